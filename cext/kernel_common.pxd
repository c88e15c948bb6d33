# Declarations of kernel_common.h for the env kernels (cimport this, never restate it).
from libc.stdint cimport uint64_t

cdef extern from "kernel_common.h" nogil:
    uint64_t op_rng_next(uint64_t *state)
    uint64_t op_rng_seed(uint64_t seed, uint64_t index)
    double op_rng_uniform(uint64_t *state, double low, double high)
    enum:
        OP_STAT_EPISODES
        OP_STAT_RETURN_SUM
        OP_STAT_RETURN_MIN
        OP_STAT_RETURN_MAX
        OP_STAT_LENGTH_SUM
        OP_STAT_LENGTH_MIN
        OP_STAT_LENGTH_MAX
        OP_STAT_SIZE
    void op_episode_done(double *stats, double *ring_returns, double *ring_lengths,
                         uint64_t *ring_head, uint64_t ring_capacity,
                         double episode_return, double episode_length)

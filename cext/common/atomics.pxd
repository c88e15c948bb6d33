# Declarations of atomics.h for Cython code that stores into shared memory
# (cimport these, never restate them).
from libc.stdint cimport int64_t, uint64_t

cdef extern from "atomics.h" nogil:
    void op_store_relaxed_u64(uint64_t *p, uint64_t v)
    void op_store_release_u64(uint64_t *p, uint64_t v)
    uint64_t op_load_relaxed_u64(const uint64_t *p)
    uint64_t op_load_acquire_u64(const uint64_t *p)
    uint64_t op_fetch_add_u64(uint64_t *p, uint64_t v)
    void op_fence_acquire()
    void op_fence_release()
    uint64_t op_f64_bits(double v)
    double op_bits_f64(uint64_t bits)
    void op_store_relaxed_f64(uint64_t *p, double v)
    void op_seqlock_write_begin(uint64_t *seq)
    void op_seqlock_write_end(uint64_t *seq)
    uint64_t op_seqlock_read_begin(const uint64_t *seq)
    int op_seqlock_read_retry(const uint64_t *seq, uint64_t begin)
    void op_store_words_relaxed(uint64_t *dst, const uint64_t *src, int64_t n)
    void op_store_f64s_relaxed(uint64_t *dst, const double *src, int64_t n)

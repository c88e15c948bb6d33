/* Pure C helpers shared by every environment kernel: a per-env RNG and the in-kernel
 * reduction of finished episodes. No allocation, no globals, no Python: each function works
 * on memory the caller (a kernel's buffers) owns. */
#ifndef OPERANT_KERNEL_COMMON_H
#define OPERANT_KERNEL_COMMON_H

#include <stdint.h>

/* SplitMix64 (Steele, Lea, Flood 2014): one 64-bit word of state per env, passes BigCrush,
 * and hashes (seed, env index) into well-separated streams. */
static inline uint64_t op_rng_next(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* The stream of env `index` under `seed`: two rounds of mixing so neighbouring seeds and
 * neighbouring indices give unrelated streams. */
static inline uint64_t op_rng_seed(uint64_t seed, uint64_t index) {
    uint64_t s = seed ^ 0x6A09E667F3BCC909ULL;
    uint64_t a = op_rng_next(&s);
    uint64_t t = a + index * 0xD1B54A32D192ED03ULL;
    return op_rng_next(&t);
}

/* Uniform double in [low, high) from the top 53 bits. */
static inline double op_rng_uniform(uint64_t *state, double low, double high) {
    double unit = (double)(op_rng_next(state) >> 11) * 0x1.0p-53;
    return low + unit * (high - low);
}

/* Slots of the episode-statistics array every kernel reduces into. */
enum {
    OP_STAT_EPISODES = 0,
    OP_STAT_RETURN_SUM = 1,
    OP_STAT_RETURN_MIN = 2,
    OP_STAT_RETURN_MAX = 3,
    OP_STAT_LENGTH_SUM = 4,
    OP_STAT_LENGTH_MIN = 5,
    OP_STAT_LENGTH_MAX = 6,
    OP_STAT_SIZE = 8
};

/* Record one finished episode: running sums/min/max since the last drain, and a ring of the
 * most recent episodes (head counts every episode ever, so readers see wrap-around). */
static inline void op_episode_done(double *stats, double *ring_returns, double *ring_lengths,
                                   uint64_t *ring_head, uint64_t ring_capacity,
                                   double episode_return, double episode_length) {
    if (stats[OP_STAT_EPISODES] == 0.0) {
        stats[OP_STAT_RETURN_MIN] = episode_return;
        stats[OP_STAT_RETURN_MAX] = episode_return;
        stats[OP_STAT_LENGTH_MIN] = episode_length;
        stats[OP_STAT_LENGTH_MAX] = episode_length;
    } else {
        if (episode_return < stats[OP_STAT_RETURN_MIN]) stats[OP_STAT_RETURN_MIN] = episode_return;
        if (episode_return > stats[OP_STAT_RETURN_MAX]) stats[OP_STAT_RETURN_MAX] = episode_return;
        if (episode_length < stats[OP_STAT_LENGTH_MIN]) stats[OP_STAT_LENGTH_MIN] = episode_length;
        if (episode_length > stats[OP_STAT_LENGTH_MAX]) stats[OP_STAT_LENGTH_MAX] = episode_length;
    }
    stats[OP_STAT_EPISODES] += 1.0;
    stats[OP_STAT_RETURN_SUM] += episode_return;
    stats[OP_STAT_LENGTH_SUM] += episode_length;
    uint64_t slot = *ring_head % ring_capacity;
    ring_returns[slot] = episode_return;
    ring_lengths[slot] = episode_length;
    *ring_head += 1;
}

#endif

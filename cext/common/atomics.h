/* 64-bit atomic stores and loads, fences, and a single-writer seqlock, over the GCC/Clang
 * __atomic builtins. The metrics writer (metrics.pyx) stores through these into memory that
 * other processes map read-only; the C11 memory model applies there as between threads.
 *
 * Seqlock, as in Linux's seqcount and Boehm, "Can seqlocks get along with programming language
 * memory models?" (MSPC 2012): the writer makes seq odd, issues a release fence, stores the
 * data with relaxed atomics, then makes seq even with a release store. A reader loads seq with
 * acquire, copies the data, issues an acquire fence, loads seq again, and keeps the copy only
 * if both loads saw the same even value. Data stores are atomics (relaxed) so the concurrent
 * reader is not a data race. Only one thread may write a given seqlock. */
#ifndef OPERANT_ATOMICS_H
#define OPERANT_ATOMICS_H

#include <stdint.h>
#include <string.h>

static inline void op_store_relaxed_u64(uint64_t *p, uint64_t v) {
    __atomic_store_n(p, v, __ATOMIC_RELAXED);
}

static inline void op_store_release_u64(uint64_t *p, uint64_t v) {
    __atomic_store_n(p, v, __ATOMIC_RELEASE);
}

static inline uint64_t op_load_relaxed_u64(const uint64_t *p) {
    return __atomic_load_n(p, __ATOMIC_RELAXED);
}

static inline uint64_t op_load_acquire_u64(const uint64_t *p) {
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

/* Relaxed: a counter orders nothing else; other threads of the writer's process may add too. */
static inline uint64_t op_fetch_add_u64(uint64_t *p, uint64_t v) {
    return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}

static inline void op_fence_acquire(void) { __atomic_thread_fence(__ATOMIC_ACQUIRE); }
static inline void op_fence_release(void) { __atomic_thread_fence(__ATOMIC_RELEASE); }

/* A float64 travels as its bit pattern in a u64 word (memcpy is the defined way to pun). */
static inline uint64_t op_f64_bits(double v) {
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    return bits;
}

static inline double op_bits_f64(uint64_t bits) {
    double v;
    memcpy(&v, &bits, sizeof v);
    return v;
}

static inline void op_store_relaxed_f64(uint64_t *p, double v) {
    __atomic_store_n(p, op_f64_bits(v), __ATOMIC_RELAXED);
}

/* Writer side. The seq word is the writer's own, so reading it relaxed is exact. */
static inline void op_seqlock_write_begin(uint64_t *seq) {
    uint64_t s = __atomic_load_n(seq, __ATOMIC_RELAXED);
    __atomic_store_n(seq, s + 1, __ATOMIC_RELAXED);
    /* Orders the odd seq before every data store that follows. */
    __atomic_thread_fence(__ATOMIC_RELEASE);
}

static inline void op_seqlock_write_end(uint64_t *seq) {
    uint64_t s = __atomic_load_n(seq, __ATOMIC_RELAXED);
    /* Release: the data stores are visible before the even seq is. */
    __atomic_store_n(seq, s + 1, __ATOMIC_RELEASE);
}

/* Reader side, for C readers; the Python reader follows the same steps. */
static inline uint64_t op_seqlock_read_begin(const uint64_t *seq) {
    return __atomic_load_n(seq, __ATOMIC_ACQUIRE);
}

static inline int op_seqlock_read_retry(const uint64_t *seq, uint64_t begin) {
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    return (begin & 1) || __atomic_load_n(seq, __ATOMIC_RELAXED) != begin;
}

/* Store n words with relaxed atomics (inside a seqlock write section). */
static inline void op_store_words_relaxed(uint64_t *dst, const uint64_t *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) __atomic_store_n(dst + i, src[i], __ATOMIC_RELAXED);
}

static inline void op_store_f64s_relaxed(uint64_t *dst, const double *src, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        __atomic_store_n(dst + i, op_f64_bits(src[i]), __ATOMIC_RELAXED);
}

#endif

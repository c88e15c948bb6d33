/* An all-reduce (sum) of float32 or float64 vectors between the ranks of one machine,
 * through a mapping they share: each rank copies its vector into its slot, says so on one
 * counter, waits until every rank has, and sums the slots in rank order into its own
 * vector, so every rank gets the same bits. The trainer's sums between ranks on one machine
 * (trainer/distributed/local_reduce.py) take it instead of gloo's, whose loopback TCP round trips and
 * sleeping waits cost several times the copy (docs/distributed.md, "When ranks pay").
 *
 * Layout: one 64-byte line holding the counter, then two sets of `world` slots of
 * `slot_bytes` each. Call g uses set g & 1, so one counter is the only barrier: a rank can
 * write set g & 1 again only at call g + 2, after passing call g + 1's barrier, which every
 * rank reaches only after it has finished reading call g's slots.
 *
 * The counter is monotonic: call g is complete when it reads (g + 1) * world. A waiting rank
 * spins (a core each, as torchrun gives ranks here), then yields its core, and gives up at
 * the deadline, so a rank that stopped ends the run as gloo's timeout would; a rank whose
 * process ended is seen at once (lr_gone), as gloo sees its closed socket. */
#ifndef OPERANT_LOCAL_REDUCE_H
#define OPERANT_LOCAL_REDUCE_H

#include <fcntl.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#define LR_HEADER 64
#define LR_SPINS 20000
#define LR_YIELD_S 0.01
#define LR_NAP_NS 100000

static inline void lr_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static inline double lr_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Bytes of a segment for `world` ranks and vectors of up to `slot_bytes` bytes. */
static inline int64_t lr_segment_bytes(int64_t world, int64_t slot_bytes) {
    return LR_HEADER + 2 * world * slot_bytes;
}

/* The first rank other than `rank` whose process has ended, or -1 while all live. Each rank
 * holds a POSIX lock on byte r of the segment's file from the start (local_reduce.py), and
 * the kernel drops a process's locks when it exits (SIGKILL and the OOM killer included), so
 * a byte nobody holds is a rank that is gone. fd < 0: not known (every rank counts as live). */
static inline int64_t lr_gone(int fd, int64_t world, int64_t rank) {
    if (fd < 0) return -1;
    for (int64_t r = 0; r < world; r++) {
        if (r == rank) continue;
        struct flock probe;
        memset(&probe, 0, sizeof probe);
        probe.l_type = F_WRLCK;
        probe.l_whence = SEEK_SET;
        probe.l_start = (off_t)r;
        probe.l_len = 1;
        if (fcntl(fd, F_GETLK, &probe) == 0 && probe.l_type == F_UNLCK) return r;
    }
    return -1;
}

/* Wait until `counter` reaches `target`; 0, -1 at the deadline, or -2 - r when rank r's
 * process ended (lr_gone: gloo learns that from its closed socket; here it would otherwise
 * take the whole timeout). Spin first (the other ranks are a minibatch's jitter away), then
 * yield the core, and after LR_YIELD_S of that sleep between looks, so a rank waiting on a
 * stopped one does not hold its core for the whole timeout. */
static inline int lr_wait(uint64_t *counter, uint64_t target, double timeout_s, int fd,
                          int64_t world, int64_t rank) {
    int64_t spins = 0;
    double start = 0.0, waited = 0.0;
    const struct timespec nap = {0, LR_NAP_NS};
    while (__atomic_load_n(counter, __ATOMIC_ACQUIRE) < target) {
        if (++spins < LR_SPINS) {
            lr_pause();
            continue;
        }
        if (start == 0.0) start = lr_now();
        if (waited > LR_YIELD_S || (spins & 255) == 0) {
            waited = lr_now() - start;
            if (waited > timeout_s) return -1;
            int64_t gone = lr_gone(fd, world, rank);
            if (gone >= 0 && __atomic_load_n(counter, __ATOMIC_ACQUIRE) < target)
                return (int)(-2 - gone);
        }
        if (waited > LR_YIELD_S) nanosleep(&nap, NULL);
        else sched_yield();
    }
    return 0;
}

/* Call number `call` (0, 1, ... in the same order on every rank): copy `bytes` of `data`
 * into this rank's slot of the call's set and wait for the others; the set's first slot, or
 * NULL with *status set (lr_wait's) when they did not all arrive. */
static inline char *lr_arrive(char *base, int64_t world, int64_t rank, int64_t slot_bytes,
                              const void *data, int64_t bytes, uint64_t call, double timeout_s,
                              int fd, int *status) {
    uint64_t *counter = (uint64_t *)base;
    char *set = base + LR_HEADER + (int64_t)(call & 1) * world * slot_bytes;
    memcpy(set + rank * slot_bytes, data, (size_t)bytes);
    __atomic_fetch_add(counter, 1, __ATOMIC_ACQ_REL);
    *status = lr_wait(counter, (call + 1) * (uint64_t)world, timeout_s, fd, world, rank);
    return *status == 0 ? set : NULL;
}

/* data[0:n] becomes the sum over the ranks, summed in rank order, then divided by `divisor`
 * when it is not 1 (the mean: the same bits as the sum followed by torch's division, with
 * one pass over the slots instead of three); 0, or -1 at the deadline. */
#define LR_SUM(NAME, T)                                                                    \
    static inline int NAME(char *base, int64_t world, int64_t rank, int64_t slot_bytes,     \
                           T *data, int64_t n, uint64_t call, double timeout_s,             \
                           T divisor, int fd) {                                             \
        int64_t bytes = n * (int64_t)sizeof(T);                                             \
        int status;                                                                         \
        char *set = lr_arrive(base, world, rank, slot_bytes, data, bytes, call, timeout_s,  \
                              fd, &status);                                                 \
        if (set == NULL) return status;                                                     \
        const T *first = (const T *)set;                                                    \
        if (world == 2) {                                                                   \
            const T *second = (const T *)(set + slot_bytes);                                \
            if (divisor == (T)1)                                                            \
                for (int64_t i = 0; i < n; i++) data[i] = first[i] + second[i];             \
            else                                                                            \
                for (int64_t i = 0; i < n; i++) data[i] = (first[i] + second[i]) / divisor; \
            return 0;                                                                       \
        }                                                                                   \
        memcpy(data, first, (size_t)bytes);                                                 \
        for (int64_t r = 1; r < world; r++) {                                               \
            const T *slot = (const T *)(set + r * slot_bytes);                              \
            for (int64_t i = 0; i < n; i++) data[i] += slot[i];                             \
        }                                                                                   \
        if (divisor != (T)1)                                                                \
            for (int64_t i = 0; i < n; i++) data[i] /= divisor;                             \
        return 0;                                                                           \
    }

LR_SUM(lr_all_reduce_sum_f32, float)
LR_SUM(lr_all_reduce_sum_f64, double)

/* out[r * bytes : (r + 1) * bytes] becomes rank r's `data`, for every rank; 0, or lr_wait's
 * status when they did not all arrive. */
static inline int lr_all_gather(char *base, int64_t world, int64_t rank, int64_t slot_bytes,
                                const void *data, int64_t bytes, char *out, uint64_t call,
                                double timeout_s, int fd) {
    int status;
    char *set = lr_arrive(base, world, rank, slot_bytes, data, bytes, call, timeout_s, fd,
                          &status);
    if (set == NULL) return status;
    for (int64_t r = 0; r < world; r++) memcpy(out + r * bytes, set + r * slot_bytes, (size_t)bytes);
    return 0;
}

#endif

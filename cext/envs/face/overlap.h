/* A native thread that runs env kernel steps on request, for the trainer's overlapped rollout
 * (operant.cext.overlap.StepThread, envs/native/overlap.py). The main thread asks for one
 * step at a time (`op_step_thread_request`), works on something else (the policy on the other
 * half of the envs), then waits for it (`op_step_thread_wait`). Neither side touches Python.
 *
 * Hand-off: two counters, `requested` (written by the main thread) and `completed` (by the
 * worker). A request stores which kernel to step, then bumps `requested`; the worker sees it,
 * steps, stores the result, then bumps `completed` with release order, so the main thread's
 * acquire load of `completed` also makes the kernel's outputs visible. Between requests the
 * worker spins for `spin_ns` (a rollout asks again within tens of microseconds), then sleeps
 * on a condition variable (a PPO update lasts milliseconds: no core is burnt for it). The
 * sleep is free of lost wake-ups by the Dekker pattern on two sequentially consistent
 * accesses: the worker stores `sleeping` then loads `requested`; a request stores
 * `requested` then loads `sleeping`; at least one of them sees the other's store. */
#ifndef OPERANT_OVERLAP_H
#define OPERANT_OVERLAP_H

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <sched.h>

#include "kernel_common.h"

#define OP_STEP_THREAD_MAX 8

typedef struct {
    op_stepper *steppers[OP_STEP_THREAD_MAX];
    int count;
    int which;               /* the requested kernel; written before `requested` is bumped */
    int64_t result;          /* the step's result; written before `completed` is bumped */
    int64_t spin_ns;
    uint64_t requested;      /* atomic */
    uint64_t completed;      /* atomic */
    uint64_t sleeping;       /* atomic */
    uint64_t stop;           /* atomic */
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    pthread_t thread;
} op_step_thread;

static inline void op_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static inline int64_t op_monotonic_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Wait until `requested` moves past `done` (1) or stop is set (0). */
static int op_step_thread_await_request(op_step_thread *t, uint64_t done) {
    int64_t started = op_monotonic_ns();
    unsigned spins = 0;
    for (;;) {
        if (__atomic_load_n(&t->requested, __ATOMIC_ACQUIRE) != done) return 1;
        if (__atomic_load_n(&t->stop, __ATOMIC_ACQUIRE)) return 0;
        op_cpu_relax();
        if ((++spins & 63) == 0 && op_monotonic_ns() - started > t->spin_ns) break;
    }
    pthread_mutex_lock(&t->mutex);
    __atomic_store_n(&t->sleeping, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&t->requested, __ATOMIC_SEQ_CST) == done
           && !__atomic_load_n(&t->stop, __ATOMIC_SEQ_CST)) {
        pthread_cond_wait(&t->cond, &t->mutex);
    }
    __atomic_store_n(&t->sleeping, 0, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&t->mutex);
    return __atomic_load_n(&t->requested, __ATOMIC_ACQUIRE) != done;
}

static void *op_step_thread_main(void *arg) {
    op_step_thread *t = (op_step_thread *)arg;
    uint64_t done = 0;
    while (op_step_thread_await_request(t, done)) {
        op_stepper *s = t->steppers[t->which];
        t->result = s->step(s->batch);
        done += 1;
        __atomic_store_n(&t->completed, done, __ATOMIC_RELEASE);
    }
    return NULL;
}

/* NULL if the thread or its memory could not be had (errno-style code in *error). */
static op_step_thread *op_step_thread_start(op_stepper **steppers, int count, int64_t spin_ns,
                                            int *error) {
    op_step_thread *t;
    int i;
    *error = 0;
    if (count < 1 || count > OP_STEP_THREAD_MAX) { *error = -1; return NULL; }
    t = (op_step_thread *)calloc(1, sizeof *t);
    if (t == NULL) { *error = -2; return NULL; }
    for (i = 0; i < count; i++) t->steppers[i] = steppers[i];
    t->count = count;
    t->spin_ns = spin_ns;
    pthread_mutex_init(&t->mutex, NULL);
    pthread_cond_init(&t->cond, NULL);
    *error = pthread_create(&t->thread, NULL, op_step_thread_main, t);
    if (*error != 0) {
        pthread_cond_destroy(&t->cond);
        pthread_mutex_destroy(&t->mutex);
        free(t);
        return NULL;
    }
    return t;
}

/* The caller has waited for any earlier request and checked `which`. */
static inline void op_step_thread_request(op_step_thread *t, int which) {
    t->which = which;
    __atomic_store_n(&t->requested, __atomic_load_n(&t->requested, __ATOMIC_RELAXED) + 1,
                     __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&t->sleeping, __ATOMIC_SEQ_CST)) {
        pthread_mutex_lock(&t->mutex);
        pthread_cond_signal(&t->cond);
        pthread_mutex_unlock(&t->mutex);
    }
}

static inline int op_step_thread_pending(op_step_thread *t) {
    return __atomic_load_n(&t->completed, __ATOMIC_ACQUIRE)
        != __atomic_load_n(&t->requested, __ATOMIC_RELAXED);
}

/* The result of the latest request, once the worker has finished it. Spins (the step is short
 * and the worker is running it); yields the core after spin_ns in case the worker is not. */
static inline int64_t op_step_thread_wait(op_step_thread *t) {
    uint64_t target = __atomic_load_n(&t->requested, __ATOMIC_RELAXED);
    int64_t started = 0;
    unsigned spins = 0;
    while (__atomic_load_n(&t->completed, __ATOMIC_ACQUIRE) != target) {
        op_cpu_relax();
        if ((++spins & 63) == 0) {
            if (started == 0) started = op_monotonic_ns();
            else if (op_monotonic_ns() - started > t->spin_ns) sched_yield();
        }
    }
    return t->result;
}

static void op_step_thread_stop(op_step_thread *t) {
    pthread_mutex_lock(&t->mutex);
    __atomic_store_n(&t->stop, 1, __ATOMIC_SEQ_CST);
    pthread_cond_signal(&t->cond);
    pthread_mutex_unlock(&t->mutex);
    pthread_join(t->thread, NULL);
    pthread_cond_destroy(&t->cond);
    pthread_mutex_destroy(&t->mutex);
    free(t);
}

#endif

/* A pool of worker threads for the fused update's calls: `mlp_pool_run(pool, task, arg)` runs
 * task(arg, t) for t = 0 .. threads - 1, index 0 on the calling thread, and returns when all
 * are done. Plain C and pthreads (no OpenMP: torch brings its own OpenMP runtime, and two in
 * one process fight over the cores). Nothing here allocates after mlp_pool_start.
 *
 * A minibatch's gradient takes about a millisecond, and an epoch's minibatches follow each
 * other inside one C call, so a worker spins for a short while (MLP_POOL_SPIN_NS) before it
 * sleeps on a condition variable: the next minibatch finds it awake, and a worker idle
 * between updates costs nothing.
 */
#ifndef OPERANT_FUSED_POOL_H
#define OPERANT_FUSED_POOL_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

#define MLP_MAX_THREADS 16
#ifndef MLP_POOL_SPIN_NS
#define MLP_POOL_SPIN_NS 200000
#endif

typedef void (*mlp_task)(void *arg, int64_t index);

typedef struct mlp_pool mlp_pool;

typedef struct {
    mlp_pool *pool;
    int64_t index;
} mlp_worker;

struct mlp_pool {
    int64_t threads, started; /* threads including the caller; workers running */
    pthread_t ids[MLP_MAX_THREADS];
    mlp_worker workers[MLP_MAX_THREADS];
    pthread_mutex_t lock;
    pthread_cond_t wake, done;
    int64_t generation; /* bumped per run (atomics: read while spinning) */
    int64_t running;    /* workers still in the current run */
    int stop;
    mlp_task task;
    void *arg;
};

static inline int64_t mlp_pool_now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static inline void mlp_pool_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Spins until (*word == value) == equal (returns 1) or MLP_POOL_SPIN_NS pass (returns 0). */
static int mlp_pool_spin(const int64_t *word, int64_t value, int equal) {
    const int64_t until = mlp_pool_now_ns() + MLP_POOL_SPIN_NS;
    int64_t i;
    for (;;) {
        for (i = 0; i < 256; i++) {
            if ((__atomic_load_n(word, __ATOMIC_ACQUIRE) == value) == equal) return 1;
            mlp_pool_pause();
        }
        if (mlp_pool_now_ns() > until) return 0;
    }
}

static void *mlp_pool_main(void *argument) {
    mlp_worker *self = (mlp_worker *)argument;
    mlp_pool *pool = self->pool;
    int64_t seen = 0;
    for (;;) {
        if (!mlp_pool_spin(&pool->generation, seen, 0)) {
            pthread_mutex_lock(&pool->lock);
            while (__atomic_load_n(&pool->generation, __ATOMIC_ACQUIRE) == seen)
                pthread_cond_wait(&pool->wake, &pool->lock);
            pthread_mutex_unlock(&pool->lock);
        }
        seen = __atomic_load_n(&pool->generation, __ATOMIC_ACQUIRE);
        if (pool->stop) return NULL;
        pool->task(pool->arg, self->index);
        if (__atomic_sub_fetch(&pool->running, 1, __ATOMIC_ACQ_REL) == 0) {
            pthread_mutex_lock(&pool->lock);
            pthread_cond_signal(&pool->done);
            pthread_mutex_unlock(&pool->lock);
        }
    }
}

/* Starts threads - 1 workers (1 <= threads <= MLP_MAX_THREADS); 0 on success, else the
 * number of workers that could not start (the pool then runs on those that did). */
static int mlp_pool_start(mlp_pool *pool, int64_t threads) {
    int64_t t;
    pool->threads = 1;
    pool->started = 0;
    pool->generation = pool->running = 0;
    pool->stop = 0;
    pthread_mutex_init(&pool->lock, NULL);
    pthread_cond_init(&pool->wake, NULL);
    pthread_cond_init(&pool->done, NULL);
    for (t = 1; t < threads && t < MLP_MAX_THREADS; t++) {
        pool->workers[t].pool = pool;
        pool->workers[t].index = t;
        if (pthread_create(&pool->ids[t], NULL, mlp_pool_main, &pool->workers[t])) break;
        pool->started++;
        pool->threads++;
    }
    return (int)(threads - pool->threads);
}

static void mlp_pool_run(mlp_pool *pool, mlp_task task, void *arg) {
    if (pool->threads == 1) {
        task(arg, 0);
        return;
    }
    pool->task = task;
    pool->arg = arg;
    __atomic_store_n(&pool->running, pool->threads - 1, __ATOMIC_RELEASE);
    pthread_mutex_lock(&pool->lock);
    __atomic_add_fetch(&pool->generation, 1, __ATOMIC_ACQ_REL);
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->lock);
    task(arg, 0);
    if (mlp_pool_spin(&pool->running, 0, 1)) return;
    pthread_mutex_lock(&pool->lock);
    while (__atomic_load_n(&pool->running, __ATOMIC_ACQUIRE))
        pthread_cond_wait(&pool->done, &pool->lock);
    pthread_mutex_unlock(&pool->lock);
}

static void mlp_pool_stop(mlp_pool *pool) {
    int64_t t;
    pthread_mutex_lock(&pool->lock);
    pool->stop = 1;
    __atomic_add_fetch(&pool->generation, 1, __ATOMIC_ACQ_REL);
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->lock);
    for (t = 1; t <= pool->started; t++) pthread_join(pool->ids[t], NULL);
    pthread_mutex_destroy(&pool->lock);
    pthread_cond_destroy(&pool->wake);
    pthread_cond_destroy(&pool->done);
    pool->threads = 1;
    pool->started = 0;
}

#endif

/* One build of cext/envs/minatar/minatar.h's Seaquest, its entry points prefixed by PFX (A or B), so that
 * two builds of the kernel (from two folders of headers) link into one driver (ab.c) and
 * alternate in one process: see run.sh. */
#include <stdlib.h>

#include "minatar.h"

#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)

/* n Seaquest envs, MinAtar's defaults (sticky actions 0.1, ramping), reset from seed 7. */
void *CAT(PFX, _make)(int64_t n) {
    ma_batch *m = calloc(1, sizeof(ma_batch));
    op_batch *b = &m->base;
    int64_t i;
    b->num_envs = n;
    b->max_episode_steps = 100000000;
    b->obs_row_bytes = SQ_CHANNELS * MA_CELLS;
    b->num_actions = 6;
    b->rng = calloc(n, 8);
    b->obs = aligned_alloc(64, n * SQ_CHANNELS * MA_CELLS);
    b->final_obs = aligned_alloc(64, n * SQ_CHANNELS * MA_CELLS);
    b->rewards = calloc(n, 4);
    b->terminated = calloc(n, 1);
    b->truncated = calloc(n, 1);
    b->episode_return = calloc(n, 8);
    b->episode_length = calloc(n, 8);
    b->stats = calloc(1, sizeof(op_episode_stats));
    b->recent_capacity = 64;
    b->recent_returns = calloc(64, 8);
    b->recent_lengths = calloc(64, 8);
    b->recent_head = calloc(1, 8);
    m->game = MA_SEAQUEST;
    m->channels = SQ_CHANNELS;
    m->scalars_per_env = SQ_SCALARS;
    for (i = 0; i < 6; i++) m->action_map[i] = i;
    m->sticky_prob = 0.1;
    m->ramping = 1;
    m->scalars = calloc(n * SQ_SCALARS, 4);
    m->slots = calloc(n * SQ_CAPACITY * SQ_FIELDS, 4);
    ma_reset(m, 1, 7);
    return m;
}

void CAT(PFX, _step)(void *p, const int64_t *actions) {
    ma_batch *m = p;
    m->base.discrete_actions = actions;
    ma_step(m);
}

/* FNV-1a over the step's observation rows, rewards and terminated flags. */
uint64_t CAT(PFX, _hash)(void *p) {
    ma_batch *m = p;
    uint64_t h = 1469598103934665603ULL;
    int64_t i, n = m->base.num_envs;
    for (i = 0; i < n * m->base.obs_row_bytes; i++) h = (h ^ m->base.obs[i]) * 1099511628211ULL;
    for (i = 0; i < n; i++) {
        h = (h ^ (uint64_t)(m->base.rewards[i] * 4)) * 1099511628211ULL;
        h = (h ^ m->base.terminated[i]) * 1099511628211ULL;
    }
    return h;
}

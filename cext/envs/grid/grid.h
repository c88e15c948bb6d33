/* The grid world's rules in plain C: N envs x K agents on a W x H map, stepped phase by phase
 * over the whole batch (grid_step), token observations (two encoders that must agree byte for
 * byte), SAME_STEP autoreset and the per-agent / per-env episode reduction. No allocation, no
 * globals, no Python: every array is owned by grid.pyx's kernel object and pointed at once.
 *
 * The rules (tests/grid_reference.py restates them in Python; docs/envs.md documents them):
 * - a cell holds nothing, a wall, or a resource tile (ready or depleted); at most one agent
 *   stands on a cell (an agent may stand on a resource tile); outside the map is blocked.
 * - actions (Discrete(9)): 0 noop; 1..4 move north/east/south/west (absolute directions, as
 *   MettaGrid's cardinal move); 5..8 rotate to face north/east/south/west. A move turns the
 *   agent to face its direction, then enters the cell unless it is outside the map, a wall or
 *   occupied. Entering a ready resource gives that agent +1 and depletes it; it is ready again
 *   `regrow` steps later.
 * - each step: step_count += 1; due resources regrow; the env's agents act one at a time in an
 *   order shuffled from the env's stream (Fisher-Yates, K - 1 draws), so collisions resolve
 *   deterministically given that order; at step_count == max_steps every agent of the env is
 *   truncated together (no termination) and the env resets in the same step.
 * - a reset draws the map (random mode: a partial Fisher-Yates over all cells picks the walls,
 *   then the resource tiles, then the agents' cells; layout mode: the layout's walls and
 *   resources, the agents' cells drawn from its free cells), then one orientation per agent.
 * Every draw is op_rng_next(&rng[env]) % bound (bounds are below 2^31: a bias under 2^-33). */
#ifndef OPERANT_GRID_H
#define OPERANT_GRID_H

#include <stdint.h>
#include <string.h>
#include <time.h>

#include "kernel_common.h"

enum { GRID_EMPTY = 0, GRID_WALL = 1, GRID_READY = 2, GRID_DEPLETED = 3 };
enum { GRID_NOOP = 0, GRID_MOVE = 1, GRID_ROTATE = 5, GRID_NUM_ACTIONS = 9 };
/* Feature ids of the tokens (docs/envs.md). Object values: */
enum { GRID_FEATURE_OBJECT = 0, GRID_FEATURE_ORIENTATION = 1, GRID_FEATURE_PROGRESS = 2 };
enum { GRID_OBJ_WALL = 1, GRID_OBJ_AGENT = 2, GRID_OBJ_READY = 3, GRID_OBJ_DEPLETED = 4 };
enum { GRID_ENCODER_SCAN = 0, GRID_ENCODER_SPARSE = 1 };
/* Profiling phases, in step order: the index of each in `timing`. */
enum { GRID_PHASE_RESET = 0, GRID_PHASE_REGROWTH, GRID_PHASE_ACTIONS, GRID_PHASE_REWARDS,
       GRID_PHASE_OBSERVATIONS, GRID_PHASE_TRUNCATION, GRID_PHASES };

static const int32_t GRID_DROW[4] = {-1, 0, 1, 0};
static const int32_t GRID_DCOL[4] = {0, 1, 0, -1};

typedef struct {
    /* configuration, checked by grid.pyx before it gets here */
    int64_t num_envs, agents, width, height, cells, row_words;
    int64_t window, tokens, max_steps, regrow, num_walls, num_resources;
    const uint8_t *layout;        /* NULL: random maps; else (cells,) GRID_EMPTY/WALL/READY */
    const int32_t *layout_free;   /* layout mode: the free cells, row-major */
    int64_t layout_free_count;
    int encoder, validate, profile;
    /* per env */
    uint64_t *rng;                /* (E,) SplitMix64 words */
    int64_t *step_count;          /* (E,) */
    uint8_t *cell;                /* (E, cells) */
    int32_t *occupant;            /* (E, cells): agent index + 1, 0 when free */
    uint64_t *row_bits;           /* (E, H, row_words): bit c set when cell c holds anything */
    int32_t *queue_cell;          /* (E, cells) FIFO of depleted resources */
    int64_t *queue_due;           /* (E, cells) the step each one is ready again */
    int64_t *queue_head, *queue_tail;   /* (E,) counts popped / pushed */
    /* per agent (rows = E x K) */
    int32_t *agent_row, *agent_col;
    uint8_t *agent_dir;           /* 0 north, 1 east, 2 south, 3 west */
    double *episode_return;
    /* caller's buffers */
    const int64_t *actions;       /* IN (rows,) */
    uint8_t *obs, *final_obs;     /* OUT (rows, tokens, 3) */
    float *rewards;               /* OUT (rows,) */
    uint8_t *terminated, *truncated;    /* OUT (rows,) */
    /* episode statistics: agents' episodes (with a ring of returns) and envs' */
    op_episode_stats *row_stats, *env_stats;
    double *ring_returns, *ring_lengths, *env_ring_returns, *env_ring_lengths;
    uint64_t *ring_head, *env_ring_head;
    uint64_t ring_capacity;
    /* scratch and instruments */
    int32_t *scratch;             /* (cells,) */
    int32_t *order;               /* (agents,) */
    uint8_t *check_obs;           /* (tokens * 3,) the other encoder's row, when validating */
    uint64_t *mismatches;         /* (1,) bytes where the encoders disagreed */
    uint64_t *timing;             /* (GRID_PHASES,) nanoseconds per phase, summed */
} grid_batch;

static inline uint64_t grid_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static inline uint64_t *grid_bits_row(const grid_batch *b, int64_t env, int64_t row) {
    return b->row_bits + (env * b->height + row) * b->row_words;
}

static inline void grid_set_bit(const grid_batch *b, int64_t env, int64_t cell, int on) {
    uint64_t *word = grid_bits_row(b, env, cell / b->width) + (cell % b->width) / 64;
    uint64_t bit = 1ULL << ((cell % b->width) % 64);
    if (on) *word |= bit; else *word &= ~bit;
}

/* Draw env `env`'s map, agents and orientations from its stream; clear its FIFO and count. */
static void grid_reset_env(grid_batch *b, int64_t env) {
    int64_t i, k, n, picks, first = 0, cells = b->cells, K = b->agents;
    uint8_t *cell = b->cell + env * cells;
    int32_t *occupant = b->occupant + env * cells;
    int32_t *pool = b->scratch;
    uint64_t *rng = b->rng + env;
    memset(occupant, 0, (size_t)cells * sizeof *occupant);
    if (b->layout == NULL) {
        memset(cell, GRID_EMPTY, (size_t)cells);
        n = cells;
        for (i = 0; i < n; i++) pool[i] = (int32_t)i;
        first = b->num_walls + b->num_resources;
    } else {
        memcpy(cell, b->layout, (size_t)cells);
        n = b->layout_free_count;
        memcpy(pool, b->layout_free, (size_t)n * sizeof *pool);
    }
    picks = first + K;
    for (i = 0; i < picks; i++) {
        int64_t j = i + (int64_t)(op_rng_next(rng) % (uint64_t)(n - i));
        int32_t swap = pool[i];
        pool[i] = pool[j];
        pool[j] = swap;
    }
    for (i = 0; i < first; i++) cell[pool[i]] = i < b->num_walls ? GRID_WALL : GRID_READY;
    for (k = 0; k < K; k++) {
        int64_t row = env * K + k, at = pool[first + k];
        occupant[at] = (int32_t)(k + 1);
        b->agent_row[row] = (int32_t)(at / b->width);
        b->agent_col[row] = (int32_t)(at % b->width);
    }
    for (k = 0; k < K; k++) b->agent_dir[env * K + k] = (uint8_t)(op_rng_next(rng) % 4);
    memset(grid_bits_row(b, env, 0), 0, (size_t)(b->height * b->row_words) * sizeof(uint64_t));
    for (i = 0; i < cells; i++) {
        if (cell[i] != GRID_EMPTY || occupant[i]) grid_set_bit(b, env, i, 1);
    }
    b->queue_head[env] = b->queue_tail[env] = 0;
    b->step_count[env] = 0;
}

/* Token writer: at most `tokens` tokens, the rest of the row left for the caller to pad. */
typedef struct { uint8_t *out; int64_t count, limit; } grid_tokens;

static inline void grid_emit(grid_tokens *t, uint8_t location, uint8_t feature, uint8_t value) {
    if (t->count < t->limit) {
        uint8_t *token = t->out + 3 * t->count;
        token[0] = location;
        token[1] = feature;
        token[2] = value;
    }
    t->count += 1;
}

/* The tokens of one map cell seen at window position (wr, wc): its static object, then the
 * agent standing on it (object and orientation). */
static inline void grid_emit_cell(const grid_batch *b, int64_t env, int64_t at, int64_t wr,
                                  int64_t wc, grid_tokens *t) {
    static const uint8_t object_of[4] = {0, GRID_OBJ_WALL, GRID_OBJ_READY, GRID_OBJ_DEPLETED};
    uint8_t kind = b->cell[env * b->cells + at], location = (uint8_t)((wr << 4) | wc);
    int32_t agent = b->occupant[env * b->cells + at];
    if (kind != GRID_EMPTY) grid_emit(t, location, GRID_FEATURE_OBJECT, object_of[kind]);
    if (agent) {
        grid_emit(t, location, GRID_FEATURE_OBJECT, GRID_OBJ_AGENT);
        grid_emit(t, location, GRID_FEATURE_ORIENTATION,
                  b->agent_dir[env * b->agents + agent - 1]);
    }
}

/* The global token at the window's centre: how much of the episode has gone (0..255). */
static inline void grid_emit_global(const grid_batch *b, int64_t env, grid_tokens *t) {
    int64_t half = b->window / 2;
    uint8_t progress = (uint8_t)((255 * b->step_count[env]) / b->max_steps);
    grid_emit(t, (uint8_t)((half << 4) | half), GRID_FEATURE_PROGRESS, progress);
}

static inline void grid_pad(grid_tokens *t) {
    int64_t used = t->count < t->limit ? t->count : t->limit;
    memset(t->out + 3 * used, 0xFF, (size_t)(3 * (t->limit - used)));
}

/* The straightforward encoder: every window cell, row-major. */
static void grid_encode_scan(const grid_batch *b, int64_t env, int64_t agent, uint8_t *out) {
    int64_t row = env * b->agents + agent, half = b->window / 2, wr, wc;
    grid_tokens t = {out, 0, b->tokens};
    grid_emit_global(b, env, &t);
    for (wr = 0; wr < b->window; wr++) {
        int64_t r = b->agent_row[row] + wr - half;
        if (r < 0 || r >= b->height) continue;
        for (wc = 0; wc < b->window; wc++) {
            int64_t c = b->agent_col[row] + wc - half;
            if (c < 0 || c >= b->width) continue;
            if (b->cell[env * b->cells + r * b->width + c] != GRID_EMPTY
                    || b->occupant[env * b->cells + r * b->width + c]) {
                grid_emit_cell(b, env, r * b->width + c, wr, wc, &t);
            }
        }
    }
    grid_pad(&t);
}

/* The optimized encoder: per window row, the occupancy bits of the window's columns, and only
 * the set ones visited (count-trailing-zeros), in the same row-major order as the scan. */
static void grid_encode_sparse(const grid_batch *b, int64_t env, int64_t agent, uint8_t *out) {
    int64_t row = env * b->agents + agent, half = b->window / 2, wr;
    int64_t lo = b->agent_col[row] - half, hi = b->agent_col[row] + half;
    grid_tokens t = {out, 0, b->tokens};
    if (lo < 0) lo = 0;
    if (hi > b->width - 1) hi = b->width - 1;
    grid_emit_global(b, env, &t);
    for (wr = 0; wr < b->window; wr++) {
        int64_t r = b->agent_row[row] + wr - half, word = lo >> 6, shift = lo & 63;
        const uint64_t *bits;
        uint64_t x;
        if (r < 0 || r >= b->height) continue;
        bits = grid_bits_row(b, env, r);
        x = bits[word] >> shift;
        if (shift && word + 1 < b->row_words) x |= bits[word + 1] << (64 - shift);
        x &= (hi - lo + 1) >= 64 ? ~0ULL : ((1ULL << (hi - lo + 1)) - 1);
        while (x) {
            int64_t c = lo + __builtin_ctzll(x);
            x &= x - 1;
            grid_emit_cell(b, env, r * b->width + c, wr, c - (b->agent_col[row] - half), &t);
        }
    }
    grid_pad(&t);
}

/* Agent `agent` of env `env`'s observation row at `out`, by the chosen encoder; when
 * validating, the other encoder writes check_obs and differing bytes are counted. */
static void grid_encode(grid_batch *b, int64_t env, int64_t agent, uint8_t *out) {
    int64_t i, bytes = 3 * b->tokens;
    if (b->encoder == GRID_ENCODER_SPARSE) grid_encode_sparse(b, env, agent, out);
    else grid_encode_scan(b, env, agent, out);
    if (b->validate) {
        if (b->encoder == GRID_ENCODER_SPARSE) grid_encode_scan(b, env, agent, b->check_obs);
        else grid_encode_sparse(b, env, agent, b->check_obs);
        for (i = 0; i < bytes; i++) *b->mismatches += out[i] != b->check_obs[i];
    }
}

static void grid_encode_env(grid_batch *b, int64_t env, uint8_t *rows) {
    int64_t k;
    for (k = 0; k < b->agents; k++) {
        grid_encode(b, env, k, rows + (env * b->agents + k) * 3 * b->tokens);
    }
}

/* One agent's action in env `env`: the reward it earns (0 or 1). */
static inline float grid_act(grid_batch *b, int64_t env, int64_t agent, int64_t action) {
    int64_t row = env * b->agents + agent, r, c, from, to, d;
    uint8_t *cell = b->cell + env * b->cells;
    int32_t *occupant = b->occupant + env * b->cells;
    if (action >= GRID_ROTATE) {
        b->agent_dir[row] = (uint8_t)(action - GRID_ROTATE);
        return 0.0f;
    }
    if (action == GRID_NOOP) return 0.0f;
    d = action - GRID_MOVE;
    b->agent_dir[row] = (uint8_t)d;
    r = b->agent_row[row] + GRID_DROW[d];
    c = b->agent_col[row] + GRID_DCOL[d];
    if (r < 0 || r >= b->height || c < 0 || c >= b->width) return 0.0f;
    to = r * b->width + c;
    if (cell[to] == GRID_WALL || occupant[to]) return 0.0f;
    from = b->agent_row[row] * b->width + b->agent_col[row];
    occupant[from] = 0;
    if (cell[from] == GRID_EMPTY) grid_set_bit(b, env, from, 0);
    occupant[to] = (int32_t)(agent + 1);
    grid_set_bit(b, env, to, 1);
    b->agent_row[row] = (int32_t)r;
    b->agent_col[row] = (int32_t)c;
    if (cell[to] != GRID_READY) return 0.0f;
    cell[to] = GRID_DEPLETED;
    b->queue_cell[env * b->cells + b->queue_tail[env] % b->cells] = (int32_t)to;
    b->queue_due[env * b->cells + b->queue_tail[env] % b->cells] = b->step_count[env] + b->regrow;
    b->queue_tail[env] += 1;
    return 1.0f;
}

/* Every agent of env `env` acts once, in a freshly shuffled order. */
static void grid_act_env(grid_batch *b, int64_t env) {
    int64_t i, K = b->agents;
    for (i = 0; i < K; i++) b->order[i] = (int32_t)i;
    for (i = K - 1; i > 0; i--) {
        int64_t j = (int64_t)(op_rng_next(b->rng + env) % (uint64_t)(i + 1));
        int32_t swap = b->order[i];
        b->order[i] = b->order[j];
        b->order[j] = swap;
    }
    for (i = 0; i < K; i++) {
        int64_t agent = b->order[i];
        b->rewards[env * K + agent] = grid_act(b, env, agent, b->actions[env * K + agent]);
    }
}

/* Resources of env `env` whose time has come are ready again (FIFO: all regrow after the same
 * number of steps, so they come due in the order they were taken). */
static inline void grid_regrow_env(grid_batch *b, int64_t env) {
    int64_t slot;
    while (b->queue_head[env] < b->queue_tail[env]) {
        slot = env * b->cells + b->queue_head[env] % b->cells;
        if (b->queue_due[slot] > b->step_count[env]) break;
        b->cell[env * b->cells + b->queue_cell[slot]] = GRID_READY;
        b->queue_head[env] += 1;
    }
}

/* Env `env`'s episode ended this step: flags, terminal observations, statistics, reset. */
static void grid_end_episode(grid_batch *b, int64_t env) {
    int64_t k, K = b->agents, row_bytes = 3 * b->tokens;
    double env_return = 0.0, length = (double)b->step_count[env];
    memcpy(b->final_obs + env * K * row_bytes, b->obs + env * K * row_bytes,
           (size_t)(K * row_bytes));
    for (k = env * K; k < (env + 1) * K; k++) {
        b->truncated[k] = 1;
        env_return += b->episode_return[k];
        op_episode_done(b->row_stats, b->ring_returns, b->ring_lengths, b->ring_head,
                        b->ring_capacity, b->episode_return[k], length);
        b->episode_return[k] = 0.0;
    }
    op_episode_done(b->env_stats, b->env_ring_returns, b->env_ring_lengths, b->env_ring_head,
                    b->ring_capacity, env_return, length);
    grid_reset_env(b, env);
    grid_encode_env(b, env, b->obs);
}

/* Index of the first row whose action is outside Discrete(9), else -1. */
static inline int64_t grid_first_invalid_action(const grid_batch *b) {
    int64_t i, rows = b->num_envs * b->agents;
    for (i = 0; i < rows; i++) {
        if (b->actions[i] < 0 || b->actions[i] >= GRID_NUM_ACTIONS) return i;
    }
    return -1;
}

#define GRID_PHASE_END(phase) \
    if (profile) { now = grid_now_ns(); b->timing[phase] += now - start; start = now; }

/* One step of every env, phase by phase over the batch; returns the first invalid action's
 * row (nothing moved) or -1. With b->profile, each phase's nanoseconds add to b->timing: one
 * branch per phase per step, none inside the loops over envs and agents. */
static int64_t grid_step(grid_batch *b) {
    int64_t e, i, rows = b->num_envs * b->agents, bad = grid_first_invalid_action(b);
    const int profile = b->profile;
    uint64_t start = 0, now;
    if (bad >= 0) return bad;
    if (profile) start = grid_now_ns();
    memset(b->terminated, 0, (size_t)rows);
    memset(b->truncated, 0, (size_t)rows);
    for (e = 0; e < b->num_envs; e++) b->step_count[e] += 1;
    GRID_PHASE_END(GRID_PHASE_RESET)
    for (e = 0; e < b->num_envs; e++) grid_regrow_env(b, e);
    GRID_PHASE_END(GRID_PHASE_REGROWTH)
    for (e = 0; e < b->num_envs; e++) grid_act_env(b, e);
    GRID_PHASE_END(GRID_PHASE_ACTIONS)
    for (i = 0; i < rows; i++) b->episode_return[i] += b->rewards[i];
    GRID_PHASE_END(GRID_PHASE_REWARDS)
    for (e = 0; e < b->num_envs; e++) grid_encode_env(b, e, b->obs);
    GRID_PHASE_END(GRID_PHASE_OBSERVATIONS)
    for (e = 0; e < b->num_envs; e++) {
        if (b->step_count[e] >= b->max_steps) grid_end_episode(b, e);
    }
    GRID_PHASE_END(GRID_PHASE_TRUNCATION)
    return -1;
}

/* Start a new episode in every env (episode returns cleared; statistics kept); with `reseed`
 * env e's stream is first set from (seed, e). */
static void grid_reset(grid_batch *b, int reseed, uint64_t seed) {
    int64_t e, i;
    for (e = 0; e < b->num_envs; e++) {
        if (reseed) b->rng[e] = op_rng_seed(seed, (uint64_t)e);
        grid_reset_env(b, e);
    }
    for (i = 0; i < b->num_envs * b->agents; i++) {
        b->episode_return[i] = 0.0;
        b->rewards[i] = 0.0f;
        b->terminated[i] = b->truncated[i] = 0;
    }
    for (e = 0; e < b->num_envs; e++) grid_encode_env(b, e, b->obs);
}

#endif

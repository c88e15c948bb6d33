/* MinAtar's games (Young & Tian 2019; the `minatar` package, v1.0.15) as plain C over a batch
 * of envs: each game's reset, step and observation, and the batch entry points that run them
 * through kernel_common.h's loop (action check, SAME_STEP autoreset, episode reduction). No
 * allocation, no globals, no Python: every array is owned by minatar.pyx's kernel object and
 * pointed at once.
 *
 * The rules are MinAtar's, statement by statement (minatar/environments/<game>.py): the same
 * order of updates inside a step, the same clamps, wrap-arounds and timers, so that a state
 * injected into MinAtar's game object and into this kernel steps to the same next state. Only
 * the random draws differ in their source: MinAtar draws from a numpy RandomState, these envs
 * from their own SplitMix64 stream (kernel_common.h), with the same distributions (a draw of
 * `randint(n)` is `op_rng_next % n`, a bias below 2^-60; `rand() < p` is a uniform double
 * below p).
 *
 * State, structure of arrays over N envs (all int32 but the maps):
 *   scalars  (N, S)                field k of env i at i * S + k (the game's <GAME>_* names;
 *                                  field 0 is every game's last effective action); numpy
 *                                  sees (S, N), a transposed view. A step reads and writes
 *                                  most of an env's scalars: side by side they are one stream
 *                                  of memory over the batch, where S rows were S streams
 *                                  (Seaquest's 18 beside the batch's own arrays): 1.16x its
 *                                  step at N = 1,024, the other games unchanged within noise
 *   maps     (maps, N, 100)        byte maps, map m of env i at (m * N + i) * 100, row-major;
 *                                  every byte 0 or 1 (they are copied into observations)
 *   slots    (N, slots, fields)    entity slots, env i's slot k at (i * K + k) * F, its F
 *                                  fields side by side (numpy sees (fields, N, slots), a
 *                                  transposed view): an env's entities share a few cache
 *                                  lines. Seaquest's are (slots, N, fields) instead, slot k
 *                                  of env i at (k * N + i) * F (SQ_SLOT): its lists are
 *                                  nearly always short, so slot 0 of env after env is read
 *                                  as one stream
 * Observations: uint8 (C, 10, 10) per env, channels first, 0 or 1; channel c of env i at
 * obs + i * C * 100 + c * 100 + row * 10 + col: MinAtar's (10, 10, C) bool state transposed.
 *
 * Actions arrive as an index into the env's action set (`action_map`: MinAtar's minimal action
 * set for the game by default) and are turned into MinAtar's full action codes below. Sticky
 * actions are MinAtar's Environment.act: with probability `sticky_prob` the previous effective
 * action is repeated instead; the previous action survives episode ends, as in MinAtar, where
 * Environment.reset does not clear it.
 *
 * Every game draws in MinAtar's order (the sticky action first, as Environment.act does before
 * the game's step; then the game's own draws, in its code's order), so a replay of an env's
 * stream in place of MinAtar's RandomState makes MinAtar draw exactly what this kernel drew:
 * the parity check (operant.envs.minatar_parity) compares spawns that way. */
#ifndef OPERANT_MINATAR_H
#define OPERANT_MINATAR_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "frame_pack.h"
#include "kernel_common.h"

/* MinAtar's full action set: Environment.env.action_map = ['n','l','u','r','d','f']. */
enum { MA_NOOP = 0, MA_LEFT = 1, MA_UP = 2, MA_RIGHT = 3, MA_DOWN = 4, MA_FIRE = 5 };
enum { MA_BREAKOUT = 0, MA_FREEWAY = 1, MA_SPACE_INVADERS = 2, MA_ASTERIX = 3, MA_SEAQUEST = 4,
       MA_GAMES = 5 };
#define MA_CELLS 100
#define MA_MAX_ACTIONS 6
#define MA_LAST_ACTION 0

/* Breakout: channels paddle, ball, trail, brick; one map (bricks). */
enum { BO_LAST_ACTION = 0, BO_BALL_X, BO_BALL_Y, BO_BALL_DIR, BO_POS, BO_LAST_X, BO_LAST_Y,
       BO_STRIKE, BO_SCALARS };
enum { BO_CH_PADDLE = 0, BO_CH_BALL, BO_CH_TRAIL, BO_CH_BRICK, BO_CHANNELS };

/* Freeway: channels chicken, car, speed1..speed5; 8 car slots (car k drives on row k + 1). */
enum { FW_LAST_ACTION = 0, FW_POS, FW_MOVE_TIMER, FW_TERMINATE_TIMER, FW_SCALARS };
enum { FW_X = 0, FW_TIMER, FW_SPEED, FW_FIELDS };
enum { FW_CH_CHICKEN = 0, FW_CH_CAR, FW_CH_SPEED1, FW_CHANNELS = 7 };
#define FW_CARS 8
#define FW_CAR(m, i, k) MA_ENTRY(m, i, k, FW_FIELDS, FW_CARS)
#define FW_PLAYER_SPEED 3
#define FW_TIME_LIMIT 2500

/* SpaceInvaders: channels cannon, alien, alien_left, alien_right, friendly_bullet,
 * enemy_bullet; three maps. No randomness at all. */
enum { SI_LAST_ACTION = 0, SI_POS, SI_ALIEN_DIR, SI_ENEMY_MOVE_INTERVAL, SI_ALIEN_MOVE_TIMER,
       SI_ALIEN_SHOT_TIMER, SI_RAMP_INDEX, SI_SHOT_TIMER, SI_SCALARS };
enum { SI_MAP_ALIEN = 0, SI_MAP_F_BULLET, SI_MAP_E_BULLET, SI_MAPS };
enum { SI_CH_CANNON = 0, SI_CH_ALIEN, SI_CH_ALIEN_LEFT, SI_CH_ALIEN_RIGHT, SI_CH_F_BULLET,
       SI_CH_E_BULLET, SI_CHANNELS };
#define SI_SHOT_COOL_DOWN 5
#define SI_INIT_MOVE_INTERVAL 12
#define SI_ENEMY_SHOT_INTERVAL 10

/* Asterix: channels player, enemy, trail, gold; 8 entity slots (slot k on row k + 1). */
enum { AX_LAST_ACTION = 0, AX_PLAYER_X, AX_PLAYER_Y, AX_SPAWN_SPEED, AX_SPAWN_TIMER,
       AX_MOVE_SPEED, AX_MOVE_TIMER, AX_RAMP_TIMER, AX_RAMP_INDEX, AX_SCALARS };
enum { AX_ACTIVE = 0, AX_X, AX_LR, AX_GOLD, AX_FIELDS };
enum { AX_CH_PLAYER = 0, AX_CH_ENEMY, AX_CH_TRAIL, AX_CH_GOLD, AX_CHANNELS };
#define AX_SLOTS 8
#define AX_ENTITY(m, i, k) MA_ENTRY(m, i, k, AX_FIELDS, AX_SLOTS)
#define AX_RAMP_INTERVAL 100
#define AX_INIT_SPAWN_SPEED 10
#define AX_INIT_MOVE_INTERVAL 5

/* Seaquest: channels sub_front, sub_back, friendly_bullet, trail, enemy_bullet, enemy_fish,
 * enemy_sub, oxygen_guage, diver_guage, diver. MinAtar keeps five Python lists whose order
 * matters (they are walked backwards while elements are removed by value); each is a list
 * here too, SQ_CAPACITY entries of its fields in the slots, its length in a scalar. */
enum { SQ_LAST_ACTION = 0, SQ_OXYGEN, SQ_DIVER_COUNT, SQ_SUB_X, SQ_SUB_Y, SQ_SUB_OR,
       SQ_E_SPAWN_SPEED, SQ_E_SPAWN_TIMER, SQ_D_SPAWN_TIMER, SQ_MOVE_SPEED, SQ_RAMP_INDEX,
       SQ_SHOT_TIMER, SQ_SURFACE, SQ_N_F_BULLETS, SQ_N_E_BULLETS, SQ_N_FISH, SQ_N_SUBS,
       SQ_N_DIVERS, SQ_SCALARS };
/* The lists' fields in the slots: friendly bullets (x, y, dir), enemy bullets (x, y, dir),
 * fish (x, y, lr, move timer), subs (x, y, lr, move timer, shot timer), divers (x, y, lr,
 * move timer). */
enum { SQ_F_BULLETS = 0, SQ_E_BULLETS = 3, SQ_FISH = 6, SQ_SUBS = 10, SQ_DIVERS = 15,
       SQ_FIELDS = 19 };
enum { SQ_X = 0, SQ_Y, SQ_DIR, SQ_TIMER, SQ_SHOT };
enum { SQ_CH_SUB_FRONT = 0, SQ_CH_SUB_BACK, SQ_CH_F_BULLET, SQ_CH_TRAIL, SQ_CH_E_BULLET,
       SQ_CH_FISH, SQ_CH_SUB, SQ_CH_OXYGEN, SQ_CH_DIVERS, SQ_CH_DIVER, SQ_CHANNELS };
/* Entries per list. At most one enemy spawns per step and lives at most 33 steps (10 cells,
 * one every 3 steps at the fastest), a sub fires once in 11 steps and its bullets live 11
 * steps, a diver spawns once in 31 steps: no list of a reachable state holds more than about
 * 45. A list that is full drops what would be appended (the parity check reports the longest
 * lists it saw). */
#define SQ_CAPACITY 64
#define SQ_RAMP_INTERVAL 100
#define SQ_MAX_OXYGEN 200
#define SQ_INIT_SPAWN_SPEED 20
#define SQ_DIVER_SPAWN_SPEED 30
#define SQ_INIT_MOVE_INTERVAL 5
#define SQ_SHOT_COOL_DOWN 5
#define SQ_ENEMY_SHOT_INTERVAL 10
#define SQ_DIVER_MOVE_INTERVAL 5

typedef struct {
    op_batch base;             /* first, so an op_batch * from the batch loop is an ma_batch * */
    int64_t game;              /* MA_BREAKOUT ... */
    int64_t channels, maps_per_env, slots_per_env;
    int64_t action_map[MA_MAX_ACTIONS];  /* action index -> MinAtar's full action code */
    double sticky_prob;        /* 0: no draw at all */
    int64_t ramping;           /* MinAtar's difficulty_ramping */
    int32_t *scalars;          /* (N, S): an env's scalars side by side */
    int64_t scalars_per_env;   /* S */
    uint8_t *maps;             /* (maps, N, 100) */
    int32_t *slots;            /* (N, slots, fields); Seaquest's (slots, N, fields) */
    uint64_t sticky_below;     /* ma_threshold(sticky_prob), set by ma_step from sticky_prob */
    uint8_t *packed;           /* NULL, or where each step also writes its rows as bits
                                  (N, fs_packed_bytes(obs_row_bytes)): a frame stack's ring
                                  slot (cext/frame_pack.h) */
} ma_batch;

#define MA_S(m, k, i) ((m)->scalars[(int64_t)(i) * (m)->scalars_per_env + (k)])
#define MA_MAP(m, k, i) ((m)->maps + ((int64_t)(k) * (m)->base.num_envs + (i)) * MA_CELLS)
/* Entry k of env i's slots (fields consecutive: entry[f] is field f), for a game whose
 * entries have `fields` fields and whose envs `per_env` entries. */
#define MA_ENTRY(m, i, k, fields, per_env) \
    ((m)->slots + ((int64_t)(i) * (per_env) + (k)) * (fields))

static inline uint8_t *ma_obs_row(ma_batch *m, int64_t i) {
    return m->base.obs + i * m->base.obs_row_bytes;
}

static inline int32_t ma_min(int32_t a, int32_t b) { return a < b ? a : b; }
static inline int32_t ma_max(int32_t a, int32_t b) { return a > b ? a : b; }

/* numpy's `randint(n)` and `rand() < p`, from env i's stream. A uniform double is
 * op_rng_uniform's (x >> 11) * 2^-53, exactly, and p * 2^53 is exact too, so `uniform < p` is
 * the integer test `(x >> 11) < ceil(p * 2^53)`: the same draws, without the conversion. */
static inline uint64_t ma_threshold(double p) {
    return p <= 0.0 ? 0 : (uint64_t)ceil(p * 0x1.0p53);
}
static inline int32_t ma_randint(ma_batch *m, int64_t i, int32_t n) {
    return (int32_t)(op_rng_next(&m->base.rng[i]) % (uint64_t)n);
}
static inline int ma_below(ma_batch *m, int64_t i, uint64_t threshold) {
    return (op_rng_next(&m->base.rng[i]) >> 11) < threshold;
}
/* For a constant p (the games' 0.5 and 1/3) the compiler folds the threshold. */
static inline int ma_chance(ma_batch *m, int64_t i, double p) {
    return ma_below(m, i, ma_threshold(p));
}

/* The effective action of env i (MinAtar's Environment.act): the mapped action, or with
 * probability sticky_prob the previous one; remembered for the next step. */
static inline int ma_effective_action(ma_batch *m, int64_t i) {
    int a = (int)m->action_map[m->base.discrete_actions[i]];
    if (m->sticky_below && ma_below(m, i, m->sticky_below)) a = MA_S(m, MA_LAST_ACTION, i);
    MA_S(m, MA_LAST_ACTION, i) = a;
    return a;
}

/* Whether a map holds any non-zero byte: its 100 bytes as words, or-ed. */
static inline int ma_any(const uint8_t *map) {
    uint64_t word, any = 0;
    uint32_t tail;
    int w;
    for (w = 0; w < 12; w++) {
        memcpy(&word, map + 8 * w, 8);
        any |= word;
    }
    memcpy(&tail, map + 96, 4);
    return (any | tail) != 0;
}

/* n bytes (at least 32) set to 0 in 32-byte stores, the last one overlapping the one before
 * where n is not a multiple of 32. GCC compiles a memset of a constant 700 or 800 bytes to
 * `rep stos`, whose start-up is much of a clear this short: Seaquest's step took 1.18x as long
 * with it (docs/performance.md). The empty asm keeps GCC from turning the loop back into that
 * memset. */
typedef uint8_t ma_v32 __attribute__((vector_size(32), aligned(1), may_alias));

static inline void ma_clear(uint8_t *__restrict__ row, int64_t n) {
    const ma_v32 zero = {0};
    int64_t k;
    for (k = 0; k + 32 <= n; k += 32) {
        *(ma_v32 *)(row + k) = zero;
        __asm__ volatile("");
    }
    if (k < n) *(ma_v32 *)(row + n - 32) = zero;
}

static inline int ma_count(const uint8_t *map) {
    int c, count = 0;
    for (c = 0; c < MA_CELLS; c++) count += map[c] != 0;
    return count;
}

/* Paint cell (y, x) of channel ch in an observation row with v (1: draw, 0: erase); a position
 * off the grid (only a state loaded from outside can hold one) is skipped rather than written
 * out of bounds. */
static inline void ma_put(uint8_t *__restrict__ o, int ch, int32_t y, int32_t x, uint8_t v) {
    if ((uint32_t)y < 10u && (uint32_t)x < 10u) o[ch * MA_CELLS + y * 10 + x] = v;
}

/* The observation by difference. A step writes only the cells that change: it erases what
 * the env's last observation drew where an object moves or goes (painting it with 0 from the
 * state before the change) and draws it where it is now (painting it with 1), a few bytes
 * where a whole row is C x 100. The row always equals what `<game>_obs` (clear the row, draw
 * everything) would write from the state, as long as it held the observation of the state
 * before the step. It does: every path that sets a state from outside (a reset, `write_obs`
 * after state was injected, a checkpoint that loads the state with its observation, NEXT_STEP's
 * restore of both) writes or restores the whole row. An autoreset erases the terminal state's
 * objects (after the batch loop has copied the row into final_obs) and draws the new
 * episode's. The batch loop runs `<game>_step_obs` and `<game>_reset_obs` with a write_obs
 * that does nothing.
 *
 * MA_ALONG: the game's step keeps the row itself, `<game>_step(m, i, row, terminated)`;
 * `<game>_paint(m, i, row, v)` paints every object of the state with v. Seaquest, whose
 * objects nearly all move every step, clears its objects' channels after its step and draws
 * them all again (seaquest_step_obs). */
#define MA_RESET_OBS(game)                                                                   \
    static void game##_reset_obs(op_batch *b, int64_t i) {                                   \
        ma_batch *m = (ma_batch *)b;                                                         \
        uint8_t *o = ma_obs_row(m, i);                                                       \
        game##_paint(m, i, o, 0);                                                            \
        game##_reset(b, i);                                                                  \
        game##_paint(m, i, o, 1);                                                            \
    }

#define MA_ALONG(game)                                                                       \
    static double game##_step_obs(op_batch *b, int64_t i, int *terminated) {                \
        ma_batch *m = (ma_batch *)b;                                                         \
        return game##_step(m, i, ma_obs_row(m, i), terminated);                              \
    }                                                                                        \
    MA_RESET_OBS(game)

static inline void ma_obs_unchanged(op_batch *b, int64_t i) {
    (void)b;
    (void)i;
}

/* ---------------------------------------------------------------------------------------- */
/* Breakout (breakout.py). Ball directions 0..3: up-left, up-right, down-right, down-left. */

static const int32_t BO_DX[4] = {-1, 1, 1, -1};
static const int32_t BO_DY[4] = {-1, -1, 1, 1};
static const int32_t BO_FLIP_X[4] = {1, 0, 3, 2};
static const int32_t BO_FLIP_Y[4] = {3, 2, 1, 0};
static const int32_t BO_FLIP_XY[4] = {2, 3, 0, 1};

static void breakout_reset(op_batch *b, int64_t i) {
    ma_batch *m = (ma_batch *)b;
    uint8_t *bricks = MA_MAP(m, 0, i);
    int start = ma_randint(m, i, 2);
    MA_S(m, BO_BALL_Y, i) = 3;
    MA_S(m, BO_BALL_X, i) = start ? 9 : 0;
    MA_S(m, BO_BALL_DIR, i) = start ? 3 : 2;
    MA_S(m, BO_POS, i) = 4;
    memset(bricks, 0, MA_CELLS);
    memset(bricks + 10, 1, 30);
    MA_S(m, BO_STRIKE, i) = 0;
    MA_S(m, BO_LAST_X, i) = MA_S(m, BO_BALL_X, i);
    MA_S(m, BO_LAST_Y, i) = MA_S(m, BO_BALL_Y, i);
}

/* The step, keeping observation row `o` that of the state: the ball, its trail and the paddle
 * moved, a brick struck or the wall rebuilt. */
static double breakout_step(ma_batch *m, int64_t i, uint8_t *__restrict__ o, int *terminated) {
    uint8_t *bricks = MA_MAP(m, 0, i), *brick_channel = o + BO_CH_BRICK * MA_CELLS;
    int a = ma_effective_action(m, i);
    double r = 0.0;
    int32_t pos = MA_S(m, BO_POS, i), dir = MA_S(m, BO_BALL_DIR, i);
    int32_t ball_x = MA_S(m, BO_BALL_X, i), ball_y = MA_S(m, BO_BALL_Y, i);
    int32_t new_x, new_y, last_y = ball_y;
    int32_t trail_x = MA_S(m, BO_LAST_X, i), trail_y = MA_S(m, BO_LAST_Y, i);
    int strike_toggle = 0;

    ma_put(o, BO_CH_BALL, ball_y, ball_x, 0);
    ma_put(o, BO_CH_PADDLE, 9, pos, 0);
    ma_put(o, BO_CH_TRAIL, trail_y, trail_x, 0);

    if (a == MA_LEFT) pos = ma_max(0, pos - 1);
    else if (a == MA_RIGHT) pos = ma_min(9, pos + 1);

    new_x = ball_x + BO_DX[dir & 3];
    new_y = ball_y + BO_DY[dir & 3];
    if (new_x < 0 || new_x > 9) {
        new_x = new_x < 0 ? 0 : 9;
        dir = BO_FLIP_X[dir & 3];
    }
    if (new_y < 0) {
        new_y = 0;
        dir = BO_FLIP_Y[dir & 3];
    } else if (new_y <= 9 && bricks[new_y * 10 + new_x]) {
        strike_toggle = 1;
        if (!MA_S(m, BO_STRIKE, i)) {
            r += 1.0;
            MA_S(m, BO_STRIKE, i) = 1;
            bricks[new_y * 10 + new_x] = 0;
            brick_channel[new_y * 10 + new_x] = 0;
            new_y = last_y;
            dir = BO_FLIP_Y[dir & 3];
        }
    } else if (new_y == 9) {
        if (!ma_any(bricks)) {
            memset(bricks + 10, 1, 30);
            memset(brick_channel + 10, 1, 30);
        }
        if (ball_x == pos) {
            dir = BO_FLIP_Y[dir & 3];
            new_y = last_y;
        } else if (new_x == pos) {
            dir = BO_FLIP_XY[dir & 3];
            new_y = last_y;
        } else {
            *terminated = 1;
        }
    }
    if (!strike_toggle) MA_S(m, BO_STRIKE, i) = 0;

    MA_S(m, BO_POS, i) = pos;
    MA_S(m, BO_BALL_DIR, i) = dir;
    MA_S(m, BO_LAST_X, i) = ball_x;
    MA_S(m, BO_LAST_Y, i) = ball_y;
    MA_S(m, BO_BALL_X, i) = new_x;
    MA_S(m, BO_BALL_Y, i) = new_y;
    ma_put(o, BO_CH_BALL, new_y, new_x, 1);
    ma_put(o, BO_CH_PADDLE, 9, pos, 1);
    ma_put(o, BO_CH_TRAIL, ball_y, ball_x, 1);
    return r;
}

/* Breakout's objects (ball, paddle, trail) painted with v, and the brick channel copied from
 * the map where they are drawn. */
static inline void breakout_paint(ma_batch *m, int64_t i, uint8_t *__restrict__ o, uint8_t v) {
    int32_t ball_y = MA_S(m, BO_BALL_Y, i), ball_x = MA_S(m, BO_BALL_X, i);
    int32_t pos = MA_S(m, BO_POS, i), last_y = MA_S(m, BO_LAST_Y, i);
    int32_t last_x = MA_S(m, BO_LAST_X, i);
    ma_put(o, BO_CH_BALL, ball_y, ball_x, v);
    ma_put(o, BO_CH_PADDLE, 9, pos, v);
    ma_put(o, BO_CH_TRAIL, last_y, last_x, v);
    if (v) memcpy(o + BO_CH_BRICK * MA_CELLS, MA_MAP(m, 0, i), MA_CELLS);
}

static void breakout_obs(op_batch *b, int64_t i) {
    ma_batch *m = (ma_batch *)b;
    uint8_t *o = ma_obs_row(m, i);
    memset(o, 0, BO_CH_BRICK * MA_CELLS);
    breakout_paint(m, i, o, 1);
}

MA_ALONG(breakout)

/* ---------------------------------------------------------------------------------------- */
/* Freeway (freeway.py). A car's speed is signed (its direction); it moves one cell every
 * |speed| + 1 frames (its timer counts down from |speed|), wrapping at the edges. */

/* _randomize_cars: 8 speeds in 1..5 (randint(1, 6, 8)), then 8 directions (sign(rand(8) -
 * 0.5): -1 below one half), in MinAtar's order of draws. A new episode also puts every car at
 * x = 0; a crossing keeps the positions. */
static void freeway_randomize(ma_batch *m, int64_t i, int initialize) {
    int k;
    for (k = 0; k < FW_CARS; k++) FW_CAR(m, i, k)[FW_SPEED] = 1 + ma_randint(m, i, 5);
    for (k = 0; k < FW_CARS; k++) {
        int32_t *car = FW_CAR(m, i, k), speed = car[FW_SPEED];
        if (ma_chance(m, i, 0.5)) car[FW_SPEED] = -speed;
        if (initialize) car[FW_X] = 0;
        car[FW_TIMER] = speed;
    }
}

static void freeway_reset(op_batch *b, int64_t i) {
    ma_batch *m = (ma_batch *)b;
    freeway_randomize(m, i, 1);
    MA_S(m, FW_POS, i) = 9;
    MA_S(m, FW_MOVE_TIMER, i) = FW_PLAYER_SPEED;
    MA_S(m, FW_TERMINATE_TIMER, i) = FW_TIME_LIMIT;
}

/* Car k (row k + 1) and its speed channel's cell one behind it, painted with v. Cars share no
 * cell: each has its own row. */
static inline void freeway_paint_car(uint8_t *__restrict__ o, int k, int32_t x, int32_t speed,
                                     uint8_t v) {
    int32_t back_x = speed > 0 ? x - 1 : x + 1, size = speed < 0 ? -speed : speed;
    if (back_x < 0) back_x = 9;
    else if (back_x > 9) back_x = 0;
    ma_put(o, FW_CH_CAR, k + 1, x, v);
    /* |speed| outside 1..5 is a state MinAtar cannot draw (its state() would fail) */
    if (size >= 1 && size <= 5) ma_put(o, FW_CH_SPEED1 + size - 1, k + 1, back_x, v);
}

/* Where a car moves to: one cell in its direction, wrapping around. */
static inline int32_t freeway_next_x(int32_t x, int32_t speed) {
    x += speed > 0 ? 1 : -1;
    if (x < 0) return 9;
    return x > 9 ? 0 : x;
}

static inline void freeway_paint_cars(ma_batch *m, int64_t i, uint8_t *__restrict__ o,
                                      uint8_t v) {
    const int32_t *cars = FW_CAR(m, i, 0);
    int k;
    for (k = 0; k < FW_CARS; k++) {
        const int32_t *car = cars + k * FW_FIELDS;
        freeway_paint_car(o, k, car[FW_X], car[FW_SPEED], v);
    }
}

/* Freeway's chicken and cars painted with v. */
static inline void freeway_paint(ma_batch *m, int64_t i, uint8_t *__restrict__ o, uint8_t v) {
    ma_put(o, FW_CH_CHICKEN, MA_S(m, FW_POS, i), 4, v);
    freeway_paint_cars(m, i, o, v);
}

/* The step, keeping observation row `o` that of the state: the chicken, the cars that moved,
 * every car where a crossing draws new speeds. */
static double freeway_step(ma_batch *m, int64_t i, uint8_t *__restrict__ o, int *terminated) {
    int32_t *cars = FW_CAR(m, i, 0), *car;
    int a = ma_effective_action(m, i), k;
    double r = 0.0;
    int32_t pos = MA_S(m, FW_POS, i), move_timer = MA_S(m, FW_MOVE_TIMER, i);

    ma_put(o, FW_CH_CHICKEN, pos, 4, 0);
    if (a == MA_UP && move_timer == 0) {
        move_timer = FW_PLAYER_SPEED;
        pos = ma_max(0, pos - 1);
    } else if (a == MA_DOWN && move_timer == 0) {
        move_timer = FW_PLAYER_SPEED;
        pos = ma_min(9, pos + 1);
    }
    if (pos == 0) {
        r += 1.0;
        freeway_paint_cars(m, i, o, 0);
        freeway_randomize(m, i, 0);
        freeway_paint_cars(m, i, o, 1);
        pos = 9;
    }
    /* MinAtar checks every car against the chicken, before and after the car moves, and sends
     * the chicken back to row 9 (where no car drives) on a hit: only the car on the chicken's
     * row (car pos - 1) can hit it, before its move or after */
    k = pos - 1;
    if ((uint32_t)k < FW_CARS) {
        car = cars + k * FW_FIELDS;
        if (car[FW_X] == 4 ||
            (car[FW_TIMER] == 0 && freeway_next_x(car[FW_X], car[FW_SPEED]) == 4))
            pos = 9;
    }
    for (k = 0; k < FW_CARS; k++) {
        int32_t speed, x;
        car = cars + k * FW_FIELDS;
        if (car[FW_TIMER] != 0) {
            car[FW_TIMER] -= 1;
            continue;
        }
        speed = car[FW_SPEED];
        x = car[FW_X];
        car[FW_TIMER] = speed < 0 ? -speed : speed;
        freeway_paint_car(o, k, x, speed, 0);
        x = freeway_next_x(x, speed);
        car[FW_X] = x;
        freeway_paint_car(o, k, x, speed, 1);
    }
    move_timer -= move_timer > 0;
    MA_S(m, FW_TERMINATE_TIMER, i) -= 1;
    if (MA_S(m, FW_TERMINATE_TIMER, i) < 0) *terminated = 1;
    MA_S(m, FW_POS, i) = pos;
    MA_S(m, FW_MOVE_TIMER, i) = move_timer;
    ma_put(o, FW_CH_CHICKEN, pos, 4, 1);
    return r;
}

static void freeway_obs(op_batch *b, int64_t i) {
    ma_batch *m = (ma_batch *)b;
    uint8_t *o = ma_obs_row(m, i);
    memset(o, 0, FW_CHANNELS * MA_CELLS);
    freeway_paint(m, i, o, 1);
}

MA_ALONG(freeway)

/* ---------------------------------------------------------------------------------------- */
/* SpaceInvaders (space_invaders.py). np.roll wraps: the alien block's step down moves row 9
 * to row 0 (only on a step that also ends the game), a step sideways is never taken at an
 * edge. */

static void space_invaders_reset(op_batch *b, int64_t i) {
    ma_batch *m = (ma_batch *)b;
    uint8_t *aliens = MA_MAP(m, SI_MAP_ALIEN, i);
    int row;
    MA_S(m, SI_POS, i) = 5;
    memset(MA_MAP(m, SI_MAP_F_BULLET, i), 0, MA_CELLS);
    memset(MA_MAP(m, SI_MAP_E_BULLET, i), 0, MA_CELLS);
    memset(aliens, 0, MA_CELLS);
    for (row = 0; row < 4; row++) memset(aliens + row * 10 + 2, 1, 6);
    MA_S(m, SI_ALIEN_DIR, i) = -1;
    MA_S(m, SI_ENEMY_MOVE_INTERVAL, i) = SI_INIT_MOVE_INTERVAL;
    MA_S(m, SI_ALIEN_MOVE_TIMER, i) = SI_INIT_MOVE_INTERVAL;
    MA_S(m, SI_ALIEN_SHOT_TIMER, i) = SI_ENEMY_SHOT_INTERVAL;
    MA_S(m, SI_RAMP_INDEX, i) = 0;
    MA_S(m, SI_SHOT_TIMER, i) = 0;
}

static inline int si_column_has(const uint8_t *map, int col) {
    int row;
    for (row = 0; row < 10; row++) {
        if (map[row * 10 + col]) return 1;
    }
    return 0;
}

/* Remove every alien a friendly bullet has reached, and that bullet; how many. Branch-free
 * over bytes that are 0 or 1, so it vectorises. */
static inline int si_kill(uint8_t *__restrict__ aliens, uint8_t *__restrict__ f_bullets) {
    int c, kills = 0;
    for (c = 0; c < MA_CELLS; c++) {
        uint8_t hit = aliens[c] & f_bullets[c];
        kills += hit;
        aliens[c] ^= hit;
        f_bullets[c] ^= hit;
    }
    return kills;
}

static double space_invaders_step(op_batch *b, int64_t i, int *terminated) {
    ma_batch *m = (ma_batch *)b;
    uint8_t *aliens = MA_MAP(m, SI_MAP_ALIEN, i);
    uint8_t *f_bullets = MA_MAP(m, SI_MAP_F_BULLET, i);
    uint8_t *e_bullets = MA_MAP(m, SI_MAP_E_BULLET, i);
    uint8_t rolled[MA_CELLS];
    int a = ma_effective_action(m, i), row, col, kills;
    /* the rules keep pos in 0..9; a loaded state that does not is clamped, never indexed */
    int32_t pos = ma_min(9, ma_max(0, MA_S(m, SI_POS, i))), dir = MA_S(m, SI_ALIEN_DIR, i);

    if (a == MA_FIRE && MA_S(m, SI_SHOT_TIMER, i) == 0) {
        f_bullets[90 + pos] = 1;
        MA_S(m, SI_SHOT_TIMER, i) = SI_SHOT_COOL_DOWN;
    } else if (a == MA_LEFT) {
        pos = ma_max(0, pos - 1);
    } else if (a == MA_RIGHT) {
        pos = ma_min(9, pos + 1);
    }
    /* friendly bullets up a row, enemy bullets down a row (roll, then clear the wrapped row) */
    memmove(f_bullets, f_bullets + 10, 90);
    memset(f_bullets + 90, 0, 10);
    memmove(e_bullets + 10, e_bullets, 90);
    memset(e_bullets, 0, 10);
    if (e_bullets[90 + pos]) *terminated = 1;

    if (aliens[90 + pos]) *terminated = 1;
    if (MA_S(m, SI_ALIEN_MOVE_TIMER, i) == 0) {
        MA_S(m, SI_ALIEN_MOVE_TIMER, i) = ma_min(ma_count(aliens),
                                                 MA_S(m, SI_ENEMY_MOVE_INTERVAL, i));
        if ((si_column_has(aliens, 0) && dir < 0) || (si_column_has(aliens, 9) && dir > 0)) {
            dir = -dir;
            for (col = 0; col < 10; col++) {
                if (aliens[90 + col]) *terminated = 1;
            }
            memcpy(rolled, aliens + 90, 10);
            memmove(aliens + 10, aliens, 90);
            memcpy(aliens, rolled, 10);
        } else {
            int shift = ((dir % 10) + 10) % 10;
            memcpy(rolled, aliens, MA_CELLS);
            for (row = 0; row < 10; row++) {
                for (col = 0; col < 10; col++) {
                    aliens[row * 10 + (col + shift) % 10] = rolled[row * 10 + col];
                }
            }
        }
        if (aliens[90 + pos]) *terminated = 1;
    }
    if (MA_S(m, SI_ALIEN_SHOT_TIMER, i) == 0) {
        int d;
        MA_S(m, SI_ALIEN_SHOT_TIMER, i) = SI_ENEMY_SHOT_INTERVAL;
        /* _nearest_alien: columns by distance from the cannon, the left one first on a tie;
         * the lowest alien of the first column that has one shoots */
        for (d = 0; d < 10; d++) {
            int candidates[2] = {pos - d, d > 0 ? pos + d : -1}, k, found = 0;
            for (k = 0; k < 2 && !found; k++) {
                col = candidates[k];
                if (col < 0 || col > 9 || !si_column_has(aliens, col)) continue;
                for (row = 9; row >= 0; row--) {
                    if (aliens[row * 10 + col]) break;
                }
                e_bullets[row * 10 + col] = 1;
                found = 1;
            }
            if (found) break;
        }
    }
    kills = si_kill(aliens, f_bullets);
    MA_S(m, SI_SHOT_TIMER, i) -= MA_S(m, SI_SHOT_TIMER, i) > 0;
    MA_S(m, SI_ALIEN_MOVE_TIMER, i) -= 1;
    MA_S(m, SI_ALIEN_SHOT_TIMER, i) -= 1;
    if (!ma_any(aliens)) {
        if (MA_S(m, SI_ENEMY_MOVE_INTERVAL, i) > 6 && m->ramping) {
            MA_S(m, SI_ENEMY_MOVE_INTERVAL, i) -= 1;
            MA_S(m, SI_RAMP_INDEX, i) += 1;
        }
        for (row = 0; row < 4; row++) memset(aliens + row * 10 + 2, 1, 6);
    }
    MA_S(m, SI_POS, i) = pos;
    MA_S(m, SI_ALIEN_DIR, i) = dir;
    return (double)kills;
}

/* The maps are the observation's channels as they are: whole-channel copies of constant size,
 * which the compiler turns into a few vector moves. */
static void space_invaders_obs(op_batch *b, int64_t i) {
    ma_batch *m = (ma_batch *)b;
    uint8_t *o = ma_obs_row(m, i);
    const uint8_t *aliens = MA_MAP(m, SI_MAP_ALIEN, i);
    int left = MA_S(m, SI_ALIEN_DIR, i) < 0;
    memset(o + SI_CH_CANNON * MA_CELLS, 0, MA_CELLS);
    ma_put(o, SI_CH_CANNON, 9, MA_S(m, SI_POS, i), 1);
    memcpy(o + SI_CH_ALIEN * MA_CELLS, aliens, MA_CELLS);
    memcpy(o + (left ? SI_CH_ALIEN_LEFT : SI_CH_ALIEN_RIGHT) * MA_CELLS, aliens, MA_CELLS);
    memset(o + (left ? SI_CH_ALIEN_RIGHT : SI_CH_ALIEN_LEFT) * MA_CELLS, 0, MA_CELLS);
    memcpy(o + SI_CH_F_BULLET * MA_CELLS, MA_MAP(m, SI_MAP_F_BULLET, i), MA_CELLS);
    memcpy(o + SI_CH_E_BULLET * MA_CELLS, MA_MAP(m, SI_MAP_E_BULLET, i), MA_CELLS);
}

/* ---------------------------------------------------------------------------------------- */
/* Asterix (asterix.py). Slot k, when active, is an enemy or a treasure on row k + 1 moving
 * right (lr) or left. */

static void asterix_reset(op_batch *b, int64_t i) {
    ma_batch *m = (ma_batch *)b;
    int k;
    MA_S(m, AX_PLAYER_X, i) = 5;
    MA_S(m, AX_PLAYER_Y, i) = 5;
    for (k = 0; k < AX_SLOTS; k++) AX_ENTITY(m, i, k)[AX_ACTIVE] = 0;
    MA_S(m, AX_SPAWN_SPEED, i) = AX_INIT_SPAWN_SPEED;
    MA_S(m, AX_SPAWN_TIMER, i) = AX_INIT_SPAWN_SPEED;
    MA_S(m, AX_MOVE_SPEED, i) = AX_INIT_MOVE_INTERVAL;
    MA_S(m, AX_MOVE_TIMER, i) = AX_INIT_MOVE_INTERVAL;
    MA_S(m, AX_RAMP_TIMER, i) = AX_RAMP_INTERVAL;
    MA_S(m, AX_RAMP_INDEX, i) = 0;
}

/* Slot k's entity (row k + 1) and its trail one cell behind, painted with v. Slots share no
 * cell: each has its own row. */
static inline void asterix_paint_slot(uint8_t *__restrict__ o, int k, int32_t x, int32_t lr,
                                      int32_t gold, uint8_t v) {
    ma_put(o, gold ? AX_CH_GOLD : AX_CH_ENEMY, k + 1, x, v);
    ma_put(o, AX_CH_TRAIL, k + 1, lr ? x - 1 : x + 1, v);
}

/* Bit k set where slot k is active. */
static inline unsigned asterix_active(const int32_t *entities) {
    unsigned active = 0;
    int k;
    for (k = 0; k < AX_SLOTS; k++) {
        active |= (unsigned)(entities[k * AX_FIELDS + AX_ACTIVE] != 0) << k;
    }
    return active;
}

/* _spawn_entity: the direction and kind are drawn first (even when no slot is free, and then
 * nothing spawns), then one of the free slots, uniformly. */
static void asterix_spawn(ma_batch *m, int64_t i, uint8_t *__restrict__ o, unsigned active) {
    int lr = ma_chance(m, i, 0.5), gold = ma_chance(m, i, 1.0 / 3.0), k, pick;
    unsigned free = ~active & ((1u << AX_SLOTS) - 1);
    int32_t *entity;
    if (free == 0) return;
    /* the pick-th free slot, counting from slot 0 */
    for (pick = ma_randint(m, i, __builtin_popcount(free)); pick > 0; pick--) free &= free - 1;
    k = __builtin_ctz(free);
    entity = AX_ENTITY(m, i, k);
    entity[AX_ACTIVE] = 1;
    entity[AX_X] = lr ? 0 : 9;
    entity[AX_LR] = lr;
    entity[AX_GOLD] = gold;
    asterix_paint_slot(o, k, lr ? 0 : 9, lr, gold, 1);
}

/* The step, keeping observation row `o` that of the state as it changes (the player's cell,
 * and a slot's cells where it spawns, moves or goes). */
static double asterix_step(ma_batch *m, int64_t i, uint8_t *__restrict__ o, int *terminated) {
    int32_t *entities = AX_ENTITY(m, i, 0), *e;
    int a = ma_effective_action(m, i), k;
    double r = 0.0;
    /* the scalars the step works on, held in locals and stored once */
    int32_t px = MA_S(m, AX_PLAYER_X, i), py = MA_S(m, AX_PLAYER_Y, i);
    int32_t spawn_timer = MA_S(m, AX_SPAWN_TIMER, i), move_timer = MA_S(m, AX_MOVE_TIMER, i);
    int32_t spawn_speed = MA_S(m, AX_SPAWN_SPEED, i), move_speed = MA_S(m, AX_MOVE_SPEED, i);

    if (spawn_timer == 0) {
        asterix_spawn(m, i, o, asterix_active(entities));
        spawn_timer = spawn_speed;
    }
    ma_put(o, AX_CH_PLAYER, py, px, 0);
    if (a == MA_LEFT) px = ma_max(0, px - 1);
    else if (a == MA_RIGHT) px = ma_min(9, px + 1);
    else if (a == MA_UP) py = ma_max(1, py - 1);
    else if (a == MA_DOWN) py = ma_min(8, py + 1);
    ma_put(o, AX_CH_PLAYER, py, px, 1);

    /* MinAtar checks every entity against the player; only the one on the player's row (slot
     * py - 1) can be there */
    k = py - 1;
    if ((uint32_t)k < AX_SLOTS) {
        e = entities + k * AX_FIELDS;
        if (e[AX_ACTIVE] && e[AX_X] == px) {
            if (e[AX_GOLD]) {
                asterix_paint_slot(o, k, e[AX_X], e[AX_LR], e[AX_GOLD], 0);
                e[AX_ACTIVE] = 0;
                r += 1.0;
            } else {
                *terminated = 1;
            }
        }
    }
    if (move_timer == 0) {
        unsigned active = asterix_active(entities);
        move_timer = move_speed;
        /* the active slots in order, lowest first (a loop over all eight mispredicts its
         * `active` test about half the time) */
        for (; active; active &= active - 1) {
            int32_t x;
            k = __builtin_ctz(active);
            e = entities + k * AX_FIELDS;
            asterix_paint_slot(o, k, e[AX_X], e[AX_LR], e[AX_GOLD], 0);
            x = e[AX_X] + (e[AX_LR] ? 1 : -1);
            e[AX_X] = x;
            if (x < 0 || x > 9) {
                e[AX_ACTIVE] = 0;
                continue;
            }
            if (x == px && k + 1 == py) {
                if (e[AX_GOLD]) {
                    e[AX_ACTIVE] = 0;
                    r += 1.0;
                    continue;
                }
                *terminated = 1;
            }
            asterix_paint_slot(o, k, x, e[AX_LR], e[AX_GOLD], 1);
        }
    }
    MA_S(m, AX_SPAWN_TIMER, i) = spawn_timer - 1;
    MA_S(m, AX_MOVE_TIMER, i) = move_timer - 1;
    if (m->ramping && (spawn_speed > 1 || move_speed > 1)) {
        if (MA_S(m, AX_RAMP_TIMER, i) >= 0) {
            MA_S(m, AX_RAMP_TIMER, i) -= 1;
        } else {
            if (move_speed > 1 && MA_S(m, AX_RAMP_INDEX, i) % 2) MA_S(m, AX_MOVE_SPEED, i) -= 1;
            if (spawn_speed > 1) MA_S(m, AX_SPAWN_SPEED, i) -= 1;
            MA_S(m, AX_RAMP_INDEX, i) += 1;
            MA_S(m, AX_RAMP_TIMER, i) = AX_RAMP_INTERVAL;
        }
    }
    MA_S(m, AX_PLAYER_X, i) = px;
    MA_S(m, AX_PLAYER_Y, i) = py;
    return r;
}

/* Asterix's player and active entities (each with its trail) painted with v. */
static inline void asterix_paint(ma_batch *m, int64_t i, uint8_t *__restrict__ o, uint8_t v) {
    const int32_t *entities = AX_ENTITY(m, i, 0);
    int k;
    ma_put(o, AX_CH_PLAYER, MA_S(m, AX_PLAYER_Y, i), MA_S(m, AX_PLAYER_X, i), v);
    for (k = 0; k < AX_SLOTS; k++) {
        const int32_t *e = entities + k * AX_FIELDS;
        if (e[AX_ACTIVE]) asterix_paint_slot(o, k, e[AX_X], e[AX_LR], e[AX_GOLD], v);
    }
}

static void asterix_obs(op_batch *b, int64_t i) {
    ma_batch *m = (ma_batch *)b;
    uint8_t *o = ma_obs_row(m, i);
    memset(o, 0, AX_CHANNELS * MA_CELLS);
    asterix_paint(m, i, o, 1);
}

MA_ALONG(asterix)

/* ---------------------------------------------------------------------------------------- */
/* Seaquest (seaquest.py). MinAtar's lists are Python lists of small int lists, and its loops
 * rely on how Python treats them: `for x in reversed(lst)` walks an index down from the end
 * (so after an earlier element is removed the same element can come round again),
 * `lst.remove(x)` removes the first element *equal* to x (not x itself), and a sub removed
 * during its own turn still counts down and may fire. The functions below do exactly that on
 * the lists kept in the slots. */

typedef struct {
    int base, fields, count;  /* first slot field, fields per entry, scalar holding the length */
} sq_list;

static const sq_list SQ_LIST_F_BULLETS = {SQ_F_BULLETS, 3, SQ_N_F_BULLETS};
static const sq_list SQ_LIST_E_BULLETS = {SQ_E_BULLETS, 3, SQ_N_E_BULLETS};
static const sq_list SQ_LIST_FISH = {SQ_FISH, 4, SQ_N_FISH};
static const sq_list SQ_LIST_SUBS = {SQ_SUBS, 5, SQ_N_SUBS};
static const sq_list SQ_LIST_DIVERS = {SQ_DIVERS, 4, SQ_N_DIVERS};

#define SQ_LEN(m, i, l) MA_S(m, (l).count, i)
/* Seaquest's slots are slot-major, (SQ_CAPACITY, N, SQ_FIELDS): env i's slot j at
 * (j * N + i) * SQ_FIELDS. Its lists are nearly always short (under random play the longest
 * of an env's five holds about one entry on average), so a step reads slot 0 of env after env,
 * one stream, where env-major slots put each env's slot 0 on its own 4 KB page. */
#define SQ_SLOT(m, i, j) ((m)->slots + ((int64_t)(j) * (m)->base.num_envs + (i)) * SQ_FIELDS)
#define SQ_AT(m, i, l, j, f) SQ_SLOT(m, i, j)[(l).base + (f)]

static inline void sq_get(ma_batch *m, int64_t i, sq_list l, int j, int32_t *values) {
    int f;
    for (f = 0; f < l.fields; f++) values[f] = SQ_AT(m, i, l, j, f);
}

static inline void sq_put(ma_batch *m, int64_t i, sq_list l, int j, const int32_t *values) {
    int f;
    for (f = 0; f < l.fields; f++) SQ_AT(m, i, l, j, f) = values[f];
}

static inline void sq_append(ma_batch *m, int64_t i, sq_list l, const int32_t *values) {
    int n = SQ_LEN(m, i, l);
    if (n >= SQ_CAPACITY) return;
    sq_put(m, i, l, n, values);
    SQ_LEN(m, i, l) = n + 1;
}

static inline void sq_delete(ma_batch *m, int64_t i, sq_list l, int j) {
    int n = SQ_LEN(m, i, l), f, k;
    for (f = 0; f < l.fields; f++) {
        for (k = j; k < n - 1; k++) SQ_AT(m, i, l, k, f) = SQ_AT(m, i, l, k + 1, f);
    }
    SQ_LEN(m, i, l) = n - 1;
}

/* list.remove(values): delete the first entry equal to `values`; its index, or -1 (where
 * Python would raise, which MinAtar's code never makes it do). */
static inline int sq_remove(ma_batch *m, int64_t i, sq_list l, const int32_t *values) {
    int n = SQ_LEN(m, i, l), j, f;
    for (j = 0; j < n; j++) {
        for (f = 0; f < l.fields; f++) {
            if (SQ_AT(m, i, l, j, f) != values[f]) break;
        }
        if (f == l.fields) {
            sq_delete(m, i, l, j);
            return j;
        }
    }
    return -1;
}

/* The entry at *pos after removing entry `removed`: it moved down one, or is gone (-1). */
static inline int sq_follow(int pos, int removed) {
    if (removed < 0 || pos < 0 || removed > pos) return pos;
    return removed == pos ? -1 : pos - 1;
}

/* The first friendly bullet at (x, y): `for x in self.f_bullets: if ...: ... break`. */
static inline int sq_bullet_at(ma_batch *m, int64_t i, int32_t x, int32_t y) {
    int j, n = SQ_LEN(m, i, SQ_LIST_F_BULLETS);
    for (j = 0; j < n; j++) {
        if (SQ_AT(m, i, SQ_LIST_F_BULLETS, j, SQ_X) == x &&
            SQ_AT(m, i, SQ_LIST_F_BULLETS, j, SQ_Y) == y) return j;
    }
    return -1;
}

static void seaquest_reset(op_batch *b, int64_t i) {
    ma_batch *m = (ma_batch *)b;
    MA_S(m, SQ_OXYGEN, i) = SQ_MAX_OXYGEN;
    MA_S(m, SQ_DIVER_COUNT, i) = 0;
    MA_S(m, SQ_SUB_X, i) = 5;
    MA_S(m, SQ_SUB_Y, i) = 0;
    MA_S(m, SQ_SUB_OR, i) = 0;
    MA_S(m, SQ_N_F_BULLETS, i) = 0;
    MA_S(m, SQ_N_E_BULLETS, i) = 0;
    MA_S(m, SQ_N_FISH, i) = 0;
    MA_S(m, SQ_N_SUBS, i) = 0;
    MA_S(m, SQ_N_DIVERS, i) = 0;
    MA_S(m, SQ_E_SPAWN_SPEED, i) = SQ_INIT_SPAWN_SPEED;
    MA_S(m, SQ_E_SPAWN_TIMER, i) = SQ_INIT_SPAWN_SPEED;
    MA_S(m, SQ_D_SPAWN_TIMER, i) = SQ_DIVER_SPAWN_SPEED;
    MA_S(m, SQ_MOVE_SPEED, i) = SQ_INIT_MOVE_INTERVAL;
    MA_S(m, SQ_RAMP_INDEX, i) = 0;
    MA_S(m, SQ_SHOT_TIMER, i) = 0;
    MA_S(m, SQ_SURFACE, i) = 1;
}

/* _spawn_enemy: direction, kind, row drawn (in that order); nothing spawns in a row that holds
 * an enemy going the other way. */
static void seaquest_spawn_enemy(ma_batch *m, int64_t i) {
    int lr = ma_chance(m, i, 0.5), is_sub = ma_chance(m, i, 1.0 / 3.0), j;
    int32_t y = 1 + ma_randint(m, i, 8), entry[5];
    for (j = 0; j < SQ_LEN(m, i, SQ_LIST_SUBS); j++) {
        if (SQ_AT(m, i, SQ_LIST_SUBS, j, SQ_Y) == y && SQ_AT(m, i, SQ_LIST_SUBS, j, SQ_DIR) != lr)
            return;
    }
    for (j = 0; j < SQ_LEN(m, i, SQ_LIST_FISH); j++) {
        if (SQ_AT(m, i, SQ_LIST_FISH, j, SQ_Y) == y && SQ_AT(m, i, SQ_LIST_FISH, j, SQ_DIR) != lr)
            return;
    }
    entry[SQ_X] = lr ? 0 : 9;
    entry[SQ_Y] = y;
    entry[SQ_DIR] = lr;
    entry[SQ_TIMER] = MA_S(m, SQ_MOVE_SPEED, i);
    entry[SQ_SHOT] = SQ_ENEMY_SHOT_INTERVAL;
    sq_append(m, i, is_sub ? SQ_LIST_SUBS : SQ_LIST_FISH, entry);
}

static void seaquest_spawn_diver(ma_batch *m, int64_t i) {
    int lr = ma_chance(m, i, 0.5);
    int32_t entry[4];
    entry[SQ_Y] = 1 + ma_randint(m, i, 8);
    entry[SQ_X] = lr ? 0 : 9;
    entry[SQ_DIR] = lr;
    entry[SQ_TIMER] = SQ_DIVER_MOVE_INTERVAL;
    sq_append(m, i, SQ_LIST_DIVERS, entry);
}

/* Python floor division (oxygen bonus and gauge): C's division truncates toward
 * zero, Python's floors; they differ only for a negative oxygen, which MinAtar can reach. */
static inline int32_t sq_floordiv(int32_t a, int32_t b) {
    int32_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

/* _surface: refill oxygen, drop a diver (all six, with a bonus, when full; MinAtar then also
 * subtracts one, leaving -1, and so does this), ramp the difficulty. */
static int32_t seaquest_surface(ma_batch *m, int64_t i) {
    int32_t r = 0;
    MA_S(m, SQ_SURFACE, i) = 1;
    if (MA_S(m, SQ_DIVER_COUNT, i) == 6) {
        MA_S(m, SQ_DIVER_COUNT, i) = 0;
        r = sq_floordiv(MA_S(m, SQ_OXYGEN, i) * 10, SQ_MAX_OXYGEN);
    }
    MA_S(m, SQ_OXYGEN, i) = SQ_MAX_OXYGEN;
    MA_S(m, SQ_DIVER_COUNT, i) -= 1;
    if (m->ramping && (MA_S(m, SQ_E_SPAWN_SPEED, i) > 1 || MA_S(m, SQ_MOVE_SPEED, i) > 2)) {
        if (MA_S(m, SQ_MOVE_SPEED, i) > 2 && MA_S(m, SQ_RAMP_INDEX, i) % 2) {
            MA_S(m, SQ_MOVE_SPEED, i) -= 1;
        }
        if (MA_S(m, SQ_E_SPAWN_SPEED, i) > 1) MA_S(m, SQ_E_SPAWN_SPEED, i) -= 1;
        MA_S(m, SQ_RAMP_INDEX, i) += 1;
    }
    return r;
}

/* The walk of an enemy list (fish, or subs with their shots) backwards, MinAtar's loop body. */
static void seaquest_enemies(ma_batch *m, int64_t i, sq_list l, int subs, int32_t sx,
                             int32_t sy, double *r, int *terminated) {
    int idx = SQ_LEN(m, i, l) - 1;
    while (idx >= 0 && idx < SQ_LEN(m, i, l)) {
        int pos = idx, bullet;
        int32_t e[5];
        idx -= 1;
        sq_get(m, i, l, pos, e);
        if (e[SQ_X] == sx && e[SQ_Y] == sy) *terminated = 1;
        if (e[SQ_TIMER] == 0) {
            e[SQ_TIMER] = MA_S(m, SQ_MOVE_SPEED, i);
            e[SQ_X] += e[SQ_DIR] ? 1 : -1;
            sq_put(m, i, l, pos, e);
            if (e[SQ_X] < 0 || e[SQ_X] > 9) {
                pos = sq_follow(pos, sq_remove(m, i, l, e));
            } else if (e[SQ_X] == sx && e[SQ_Y] == sy) {
                *terminated = 1;
            } else if ((bullet = sq_bullet_at(m, i, e[SQ_X], e[SQ_Y])) >= 0) {
                int32_t hit[3];
                pos = sq_follow(pos, sq_remove(m, i, l, e));
                sq_get(m, i, SQ_LIST_F_BULLETS, bullet, hit);
                sq_remove(m, i, SQ_LIST_F_BULLETS, hit);
                *r += 1.0;
            }
        } else {
            e[SQ_TIMER] -= 1;
            sq_put(m, i, l, pos, e);
        }
        if (!subs) continue;
        /* a sub fires, or counts down to firing, even when it was just removed */
        if (e[SQ_SHOT] == 0) {
            int32_t shot[3];
            e[SQ_SHOT] = SQ_ENEMY_SHOT_INTERVAL;
            shot[SQ_X] = e[SQ_X];
            shot[SQ_Y] = e[SQ_Y];
            shot[SQ_DIR] = e[SQ_DIR];
            sq_append(m, i, SQ_LIST_E_BULLETS, shot);
        } else {
            e[SQ_SHOT] -= 1;
        }
        if (pos >= 0) SQ_AT(m, i, l, pos, SQ_SHOT) = e[SQ_SHOT];
    }
}

/* MinAtar's moves: left `max(0, x - 1)` facing left, right `min(9, x + 1)` facing right, up
 * `max(0, y - 1)`, down `min(8, y + 1)`; anything else leaves the sub as it is (a loaded
 * position off the grid too). From tables by action, without a branch: under the policies
 * that matter the action is as good as random from env to env, and the chain of tests on it
 * mispredicted. */
static inline void sq_move_sub(ma_batch *m, int64_t i, int a, int32_t *sx, int32_t *sy) {
    enum { NO = -1, LO = INT32_MIN, HI = INT32_MAX };
    /*                                 noop left up right down fire */
    static const int8_t dx[6] =      {0,   -1,  0, 1,    0,   0};
    static const int8_t dy[6] =      {0,   0,   -1, 0,   1,   0};
    static const int32_t x_lo[6] =   {LO,  0,   LO, LO,  LO,  LO};
    static const int32_t x_hi[6] =   {HI,  HI,  HI, 9,   HI,  HI};
    static const int32_t y_lo[6] =   {LO,  LO,  0,  LO,  LO,  LO};
    static const int32_t y_hi[6] =   {HI,  HI,  HI, HI,  8,   HI};
    static const int8_t facing[6] =  {NO,  0,   NO, 1,   NO,  NO};
    int32_t or_now = MA_S(m, SQ_SUB_OR, i);
    a = (unsigned)a < 6u ? a : 0;
    *sx = ma_min(ma_max(*sx + dx[a], x_lo[a]), x_hi[a]);
    *sy = ma_min(ma_max(*sy + dy[a], y_lo[a]), y_hi[a]);
    MA_S(m, SQ_SUB_OR, i) = facing[a] == NO ? or_now : facing[a];
}

static double seaquest_step(op_batch *b, int64_t i, int *terminated) {
    ma_batch *m = (ma_batch *)b;
    int a = ma_effective_action(m, i), idx, k;
    double r = 0.0;
    int32_t sx, sy;

    /* a loaded state's list lengths are clamped to the slots, so no walk leaves them (one
     * test for the five: a negative or too large length sets a high bit of their or) */
    if (((uint32_t)MA_S(m, SQ_N_F_BULLETS, i) | (uint32_t)MA_S(m, SQ_N_E_BULLETS, i) |
         (uint32_t)MA_S(m, SQ_N_FISH, i) | (uint32_t)MA_S(m, SQ_N_SUBS, i) |
         (uint32_t)MA_S(m, SQ_N_DIVERS, i)) > SQ_CAPACITY) {
        for (k = SQ_N_F_BULLETS; k <= SQ_N_DIVERS; k++) {
            int32_t n = MA_S(m, k, i);
            if ((uint32_t)n > SQ_CAPACITY) MA_S(m, k, i) = n < 0 ? 0 : SQ_CAPACITY;
        }
    }

    if (MA_S(m, SQ_E_SPAWN_TIMER, i) == 0) {
        seaquest_spawn_enemy(m, i);
        MA_S(m, SQ_E_SPAWN_TIMER, i) = MA_S(m, SQ_E_SPAWN_SPEED, i);
    }
    if (MA_S(m, SQ_D_SPAWN_TIMER, i) == 0) {
        seaquest_spawn_diver(m, i);
        MA_S(m, SQ_D_SPAWN_TIMER, i) = SQ_DIVER_SPAWN_SPEED;
    }
    sx = MA_S(m, SQ_SUB_X, i);
    sy = MA_S(m, SQ_SUB_Y, i);
    if (a == MA_FIRE && MA_S(m, SQ_SHOT_TIMER, i) == 0) {
        int32_t shot[3];
        shot[SQ_X] = sx;
        shot[SQ_Y] = sy;
        shot[SQ_DIR] = MA_S(m, SQ_SUB_OR, i);
        sq_append(m, i, SQ_LIST_F_BULLETS, shot);
        MA_S(m, SQ_SHOT_TIMER, i) = SQ_SHOT_COOL_DOWN;
    } else {
        sq_move_sub(m, i, a, &sx, &sy);
    }
    MA_S(m, SQ_SUB_X, i) = sx;
    MA_S(m, SQ_SUB_Y, i) = sy;

    /* friendly bullets */
    idx = SQ_LEN(m, i, SQ_LIST_F_BULLETS) - 1;
    while (idx >= 0 && idx < SQ_LEN(m, i, SQ_LIST_F_BULLETS)) {
        int pos = idx, j, hit = 0;
        int32_t bullet[3], enemy[5];
        idx -= 1;
        sq_get(m, i, SQ_LIST_F_BULLETS, pos, bullet);
        bullet[SQ_X] += bullet[SQ_DIR] ? 1 : -1;
        sq_put(m, i, SQ_LIST_F_BULLETS, pos, bullet);
        if (bullet[SQ_X] < 0 || bullet[SQ_X] > 9) {
            sq_remove(m, i, SQ_LIST_F_BULLETS, bullet);
            continue;
        }
        for (j = 0; j < SQ_LEN(m, i, SQ_LIST_FISH) && !hit; j++) {
            if (SQ_AT(m, i, SQ_LIST_FISH, j, SQ_X) == bullet[SQ_X] &&
                SQ_AT(m, i, SQ_LIST_FISH, j, SQ_Y) == bullet[SQ_Y]) {
                sq_get(m, i, SQ_LIST_FISH, j, enemy);
                sq_remove(m, i, SQ_LIST_FISH, enemy);
                sq_remove(m, i, SQ_LIST_F_BULLETS, bullet);
                r += 1.0;
                hit = 1;
            }
        }
        for (j = 0; j < SQ_LEN(m, i, SQ_LIST_SUBS) && !hit; j++) {
            if (SQ_AT(m, i, SQ_LIST_SUBS, j, SQ_X) == bullet[SQ_X] &&
                SQ_AT(m, i, SQ_LIST_SUBS, j, SQ_Y) == bullet[SQ_Y]) {
                sq_get(m, i, SQ_LIST_SUBS, j, enemy);
                sq_remove(m, i, SQ_LIST_SUBS, enemy);
                sq_remove(m, i, SQ_LIST_F_BULLETS, bullet);
                r += 1.0;
                hit = 1;
            }
        }
    }

    /* divers */
    idx = SQ_LEN(m, i, SQ_LIST_DIVERS) - 1;
    while (idx >= 0 && idx < SQ_LEN(m, i, SQ_LIST_DIVERS)) {
        int pos = idx;
        int32_t diver[4];
        idx -= 1;
        sq_get(m, i, SQ_LIST_DIVERS, pos, diver);
        if (diver[SQ_X] == sx && diver[SQ_Y] == sy && MA_S(m, SQ_DIVER_COUNT, i) < 6) {
            sq_remove(m, i, SQ_LIST_DIVERS, diver);
            MA_S(m, SQ_DIVER_COUNT, i) += 1;
        } else if (diver[SQ_TIMER] == 0) {
            diver[SQ_TIMER] = SQ_DIVER_MOVE_INTERVAL;
            diver[SQ_X] += diver[SQ_DIR] ? 1 : -1;
            sq_put(m, i, SQ_LIST_DIVERS, pos, diver);
            if (diver[SQ_X] < 0 || diver[SQ_X] > 9) {
                sq_remove(m, i, SQ_LIST_DIVERS, diver);
            } else if (diver[SQ_X] == sx && diver[SQ_Y] == sy && MA_S(m, SQ_DIVER_COUNT, i) < 6) {
                sq_remove(m, i, SQ_LIST_DIVERS, diver);
                MA_S(m, SQ_DIVER_COUNT, i) += 1;
            }
        } else {
            SQ_AT(m, i, SQ_LIST_DIVERS, pos, SQ_TIMER) = diver[SQ_TIMER] - 1;
        }
    }

    seaquest_enemies(m, i, SQ_LIST_SUBS, 1, sx, sy, &r, terminated);

    /* enemy bullets */
    idx = SQ_LEN(m, i, SQ_LIST_E_BULLETS) - 1;
    while (idx >= 0 && idx < SQ_LEN(m, i, SQ_LIST_E_BULLETS)) {
        int pos = idx;
        int32_t bullet[3];
        idx -= 1;
        sq_get(m, i, SQ_LIST_E_BULLETS, pos, bullet);
        if (bullet[SQ_X] == sx && bullet[SQ_Y] == sy) *terminated = 1;
        bullet[SQ_X] += bullet[SQ_DIR] ? 1 : -1;
        sq_put(m, i, SQ_LIST_E_BULLETS, pos, bullet);
        if (bullet[SQ_X] < 0 || bullet[SQ_X] > 9) {
            sq_remove(m, i, SQ_LIST_E_BULLETS, bullet);
        } else if (bullet[SQ_X] == sx && bullet[SQ_Y] == sy) {
            *terminated = 1;
        }
    }

    seaquest_enemies(m, i, SQ_LIST_FISH, 0, sx, sy, &r, terminated);

    MA_S(m, SQ_E_SPAWN_TIMER, i) -= MA_S(m, SQ_E_SPAWN_TIMER, i) > 0;
    MA_S(m, SQ_D_SPAWN_TIMER, i) -= MA_S(m, SQ_D_SPAWN_TIMER, i) > 0;
    MA_S(m, SQ_SHOT_TIMER, i) -= MA_S(m, SQ_SHOT_TIMER, i) > 0;
    if (MA_S(m, SQ_OXYGEN, i) <= 0) *terminated = 1;
    if (sy > 0) {
        MA_S(m, SQ_OXYGEN, i) -= 1;
        MA_S(m, SQ_SURFACE, i) = 0;
    } else if (!MA_S(m, SQ_SURFACE, i)) {
        if (MA_S(m, SQ_DIVER_COUNT, i) == 0) *terminated = 1;
        else r += (double)seaquest_surface(m, i);
    }
    return r;
}

/* A list's n entities drawn, each with its trail one cell behind it where asked; `entry` is
 * the list's entry in slot 0 (its x, y and direction fields at SQ_X, SQ_Y, SQ_DIR), the next
 * slot `stride` further on. */
static inline void sq_draw_list(uint8_t *__restrict__ o, const int32_t *entry, int64_t stride,
                                int n, int ch, int trail) {
    int j;
    for (j = 0; j < n; j++, entry += stride) {
        int32_t x = entry[SQ_X], y = entry[SQ_Y];
        ma_put(o, ch, y, x, 1);
        if (trail) ma_put(o, SQ_CH_TRAIL, y, x + 1 - 2 * (entry[SQ_DIR] != 0), 1);
    }
}

/* Seaquest's moving objects, the sub and the lists' entities, drawn into a row cleared of
 * them. Which way an object faces is arithmetic, not a branch: it is as good as random from
 * env to env. */
static inline void seaquest_draw(ma_batch *m, int64_t i, uint8_t *__restrict__ o) {
    const int32_t *slot = SQ_SLOT(m, i, 0);
    int64_t stride = m->base.num_envs * SQ_FIELDS;
    int32_t sx = MA_S(m, SQ_SUB_X, i), sy = MA_S(m, SQ_SUB_Y, i);
    int32_t back_x = sx + 1 - 2 * (MA_S(m, SQ_SUB_OR, i) != 0);
    int n_f = ma_min(SQ_CAPACITY, SQ_LEN(m, i, SQ_LIST_F_BULLETS));
    int n_e = ma_min(SQ_CAPACITY, SQ_LEN(m, i, SQ_LIST_E_BULLETS));
    int n_fish = ma_min(SQ_CAPACITY, SQ_LEN(m, i, SQ_LIST_FISH));
    int n_subs = ma_min(SQ_CAPACITY, SQ_LEN(m, i, SQ_LIST_SUBS));
    int n_divers = ma_min(SQ_CAPACITY, SQ_LEN(m, i, SQ_LIST_DIVERS));
    ma_put(o, SQ_CH_SUB_FRONT, sy, sx, 1);
    /* MinAtar indexes without a bounds check: -1 is numpy's last column */
    ma_put(o, SQ_CH_SUB_BACK, sy, back_x + 10 * (back_x == -1), 1);
    sq_draw_list(o, slot + SQ_F_BULLETS, stride, n_f, SQ_CH_F_BULLET, 0);
    sq_draw_list(o, slot + SQ_E_BULLETS, stride, n_e, SQ_CH_E_BULLET, 0);
    sq_draw_list(o, slot + SQ_FISH, stride, n_fish, SQ_CH_FISH, 1);
    sq_draw_list(o, slot + SQ_SUBS, stride, n_subs, SQ_CH_SUB, 1);
    sq_draw_list(o, slot + SQ_DIVERS, stride, n_divers, SQ_CH_DIVER, 1);
}

/* The gauges, row 9 of their own channels, rewritten whole from the state (two short copies
 * from tables): oxygen cells 0 .. oxygen * 10 // 200 - 1, and state[9, 9 - diver_count:9],
 * cells 9 - diver_count .. 8 (none for a count <= 0). */
static inline void seaquest_gauges(ma_batch *m, int64_t i, uint8_t *__restrict__ o) {
    static const uint8_t ones_then_zeros[20] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                                                0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    static const uint8_t zeros_then_ones[18] = {0, 0, 0, 0, 0, 0, 0, 0, 0,
                                                1, 1, 1, 1, 1, 1, 1, 1, 1};
    int32_t oxygen = MA_S(m, SQ_OXYGEN, i), divers = MA_S(m, SQ_DIVER_COUNT, i);
    /* in 64 bits, as Python's ints: a loaded oxygen past 2^31 / 10 fills the gauge */
    int64_t cells = oxygen > 0 ? (int64_t)oxygen * 10 / SQ_MAX_OXYGEN : 0;
    if (cells > 10) cells = 10;
    memcpy(o + SQ_CH_OXYGEN * MA_CELLS + 90, ones_then_zeros + 10 - cells, 10);
    memcpy(o + SQ_CH_DIVERS * MA_CELLS + 90, zeros_then_ones + ma_min(9, ma_max(0, divers)), 9);
}

/* Seaquest's row rewritten from the state, but for the gauges' channels above their row 9
 * (always 0): its objects' channels cleared and drawn, the gauges copied. Nearly every object
 * moves every step, so a step redraws them all: clearing 800 bytes costs what erasing each
 * object where it was did (a second walk over the lists, with its branches; the same speed
 * measured both ways), and the step needs one walk. */
static inline void seaquest_redraw(ma_batch *m, int64_t i, uint8_t *__restrict__ o) {
    ma_clear(o, SQ_CH_OXYGEN * MA_CELLS);
    ma_clear(o + SQ_CH_DIVER * MA_CELLS, MA_CELLS);
    seaquest_draw(m, i, o);
    seaquest_gauges(m, i, o);
}

static void seaquest_obs(op_batch *b, int64_t i) {
    ma_batch *m = (ma_batch *)b;
    uint8_t *o = ma_obs_row(m, i);
    memset(o, 0, SQ_CHANNELS * MA_CELLS);
    seaquest_draw(m, i, o);
    seaquest_gauges(m, i, o);
}

static double seaquest_step_obs(op_batch *b, int64_t i, int *terminated) {
    ma_batch *m = (ma_batch *)b;
    double r = seaquest_step(b, i, terminated);
    seaquest_redraw(m, i, ma_obs_row(m, i));
    return r;
}

static void seaquest_reset_obs(op_batch *b, int64_t i) {
    ma_batch *m = (ma_batch *)b;
    seaquest_reset(b, i);
    seaquest_redraw(m, i, ma_obs_row(m, i));
}

/* ---------------------------------------------------------------------------------------- */
/* The batch entry points: one instance of kernel_common.h's loop per game, so each game's
 * functions are inlined into its own loop and the game is chosen once per step, not per env. */

static void ma_step_rows(ma_batch *m, int64_t lo, int64_t hi) {
    op_batch *b = &m->base;
    switch (m->game) {
    case MA_BREAKOUT:
        op_batch_step_rows(b, lo, hi, breakout_step_obs, ma_obs_unchanged, breakout_reset_obs);
        break;
    case MA_FREEWAY:
        op_batch_step_rows(b, lo, hi, freeway_step_obs, ma_obs_unchanged, freeway_reset_obs);
        break;
    case MA_SPACE_INVADERS:
        op_batch_step_rows(b, lo, hi, space_invaders_step, space_invaders_obs,
                           space_invaders_reset);
        break;
    case MA_SEAQUEST:
        op_batch_step_rows(b, lo, hi, seaquest_step_obs, ma_obs_unchanged, seaquest_reset_obs);
        break;
    default:
        op_batch_step_rows(b, lo, hi, asterix_step_obs, ma_obs_unchanged, asterix_reset_obs);
    }
}

/* Rows stepped, then packed, MA_PACK_BLOCK at a time: the rows a block just wrote are still in
 * cache when they are read for packing (packing the whole batch after the step read them back
 * from L3 once the step's state had pushed them out of L2: Seaquest's lists are 5 MB at 1,024
 * rows). */
#ifndef MA_PACK_BLOCK
#define MA_PACK_BLOCK 32
#endif

static int64_t ma_step(ma_batch *m) {
    op_batch *b = &m->base;
    int64_t lo, hi, n = b->num_envs, bytes = b->obs_row_bytes;
    int64_t packed = fs_packed_bytes(bytes), bad = op_first_invalid_action(b);
    if (bad >= 0) return bad;
    m->sticky_below = ma_threshold(m->sticky_prob);
    if (m->packed == NULL) {
        ma_step_rows(m, 0, n);
        return -1;
    }
    for (lo = 0; lo < n; lo = hi) {
        hi = lo + MA_PACK_BLOCK < n ? lo + MA_PACK_BLOCK : n;
        ma_step_rows(m, lo, hi);
        fs_pack_rows(b->obs + lo * bytes, bytes, m->packed + lo * packed, hi - lo, bytes);
    }
    return -1;
}

static void ma_reset(ma_batch *m, int reseed, uint64_t seed) {
    op_batch *b = &m->base;
    switch (m->game) {
    case MA_BREAKOUT: op_batch_reset(b, reseed, seed, breakout_reset, breakout_obs); break;
    case MA_FREEWAY: op_batch_reset(b, reseed, seed, freeway_reset, freeway_obs); break;
    case MA_SPACE_INVADERS:
        op_batch_reset(b, reseed, seed, space_invaders_reset, space_invaders_obs);
        break;
    case MA_SEAQUEST: op_batch_reset(b, reseed, seed, seaquest_reset, seaquest_obs); break;
    default: op_batch_reset(b, reseed, seed, asterix_reset, asterix_obs); break;
    }
}

static void ma_write_obs(ma_batch *m) {
    op_batch *b = &m->base;
    switch (m->game) {
    case MA_BREAKOUT: op_batch_write_obs(b, breakout_obs); break;
    case MA_FREEWAY: op_batch_write_obs(b, freeway_obs); break;
    case MA_SPACE_INVADERS: op_batch_write_obs(b, space_invaders_obs); break;
    case MA_SEAQUEST: op_batch_write_obs(b, seaquest_obs); break;
    default: op_batch_write_obs(b, asterix_obs); break;
    }
}

/* For a native thread (operant.cext.overlap): the kernel's step as an op_kernel_step_fn. */
static int64_t ma_step_batch(op_batch *b) { return ma_step((ma_batch *)b); }

#endif

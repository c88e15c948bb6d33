/* What the MinAtar games of minatar.h share: the batch struct (their state as structure of
 * arrays over envs, laid out as minatar.h describes), the random draws, sticky actions, and the
 * helpers that write observation rows by difference. Each game is in minatar_<game>.h. */
#ifndef OPERANT_MINATAR_COMMON_H
#define OPERANT_MINATAR_COMMON_H

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
                                  slot (cext/envs/face/frame_pack.h) */
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
 * with it (docs/journal/issue-16-minatar-kernels.md). The empty asm keeps GCC from turning the
 * loop back into that memset. */
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

#endif

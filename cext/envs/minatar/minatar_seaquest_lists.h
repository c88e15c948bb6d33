/* MinAtar's Seaquest: its state as the kernel lays it out (scalars, the five lists' entries in
 * the slots, the channels, the constants) and the Python-list operations its rules are written
 * with. The rules are in minatar_seaquest.h. Part of minatar.h. */
#ifndef OPERANT_MINATAR_SEAQUEST_LISTS_H
#define OPERANT_MINATAR_SEAQUEST_LISTS_H

#include "minatar_common.h"

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

/* What a step did besides moving things one cell and counting timers down, for a driver that
 * counts such steps (benchmarks/seaquest_ab/events.c defines SQ_EVENT before including this):
 * a spawn timer ran out, the player or a sub fired, an entry left a list, the sub surfaced.
 * The shipped build compiles it to nothing. */
enum { SQ_EV_SPAWN = 0, SQ_EV_FIRE, SQ_EV_SUB_FIRES, SQ_EV_REMOVE, SQ_EV_SURFACE, SQ_EVENTS };
#ifndef SQ_EVENT
#define SQ_EVENT(i, kind) ((void)0)
#endif

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
    SQ_EVENT(i, SQ_EV_REMOVE);
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

#endif

/* MinAtar's Seaquest: its rules, step by step as seaquest.py; its state and list operations are
 * in minatar_seaquest_lists.h, the observation it draws in minatar_seaquest_obs.h. Part of
 * minatar.h. */
#ifndef OPERANT_MINATAR_SEAQUEST_H
#define OPERANT_MINATAR_SEAQUEST_H

#include "minatar_seaquest_lists.h"

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
    SQ_EVENT(i, SQ_EV_SURFACE);
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
            SQ_EVENT(i, SQ_EV_SUB_FIRES);
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
        SQ_EVENT(i, SQ_EV_SPAWN);
        seaquest_spawn_enemy(m, i);
        MA_S(m, SQ_E_SPAWN_TIMER, i) = MA_S(m, SQ_E_SPAWN_SPEED, i);
    }
    if (MA_S(m, SQ_D_SPAWN_TIMER, i) == 0) {
        SQ_EVENT(i, SQ_EV_SPAWN);
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
        SQ_EVENT(i, SQ_EV_FIRE);
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

#endif

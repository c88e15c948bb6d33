/* MinAtar's Asterix (asterix.py). Slot k, when active, is an enemy or a treasure on row k + 1
 * moving right (lr) or left. Part of minatar.h (its batch entry points run it). */
#ifndef OPERANT_MINATAR_ASTERIX_H
#define OPERANT_MINATAR_ASTERIX_H

#include "minatar_common.h"

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

#endif

/* MinAtar's Freeway (freeway.py). A car's speed is signed (its direction); it moves one cell
 * every |speed| + 1 frames (its timer counts down from |speed|), wrapping at the edges. Part of
 * minatar.h (its batch entry points run it). */
#ifndef OPERANT_MINATAR_FREEWAY_H
#define OPERANT_MINATAR_FREEWAY_H

#include "minatar_common.h"

/* Freeway: channels chicken, car, speed1..speed5; 8 car slots (car k drives on row k + 1). */
enum { FW_LAST_ACTION = 0, FW_POS, FW_MOVE_TIMER, FW_TERMINATE_TIMER, FW_SCALARS };
enum { FW_X = 0, FW_TIMER, FW_SPEED, FW_FIELDS };
enum { FW_CH_CHICKEN = 0, FW_CH_CAR, FW_CH_SPEED1, FW_CHANNELS = 7 };
#define FW_CARS 8
#define FW_CAR(m, i, k) MA_ENTRY(m, i, k, FW_FIELDS, FW_CARS)
#define FW_PLAYER_SPEED 3
#define FW_TIME_LIMIT 2500


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

#endif

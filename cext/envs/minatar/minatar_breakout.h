/* MinAtar's Breakout (breakout.py). Ball directions 0..3: up-left, up-right, down-right,
 * down-left. Part of minatar.h (its batch entry points run it). */
#ifndef OPERANT_MINATAR_BREAKOUT_H
#define OPERANT_MINATAR_BREAKOUT_H

#include "minatar_common.h"

/* Breakout: channels paddle, ball, trail, brick; one map (bricks). */
enum { BO_LAST_ACTION = 0, BO_BALL_X, BO_BALL_Y, BO_BALL_DIR, BO_POS, BO_LAST_X, BO_LAST_Y,
       BO_STRIKE, BO_SCALARS };
enum { BO_CH_PADDLE = 0, BO_CH_BALL, BO_CH_TRAIL, BO_CH_BRICK, BO_CHANNELS };


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

#endif

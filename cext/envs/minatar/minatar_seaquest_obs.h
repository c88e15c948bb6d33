/* Seaquest's observation: the sub and the lists' entities drawn into a row cleared of them,
 * the two gauges copied from tables; the step and reset the batch loop runs with them.
 * Part of minatar.h. */
#ifndef OPERANT_MINATAR_SEAQUEST_OBS_H
#define OPERANT_MINATAR_SEAQUEST_OBS_H

#include "minatar_seaquest.h"

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

#endif

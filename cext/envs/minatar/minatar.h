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
 * the parity check (operant.envs.minatar.parity) compares spawns that way. */
#ifndef OPERANT_MINATAR_H
#define OPERANT_MINATAR_H

/* Each game in its own header, over the batch struct and helpers they share (minatar_common.h). */
#include "minatar_common.h"
#include "minatar_breakout.h"
#include "minatar_freeway.h"
#include "minatar_space_invaders.h"
#include "minatar_asterix.h"
#include "minatar_seaquest.h"
#include "minatar_seaquest_obs.h"

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

/* copy=True's copies of a step's frames (operant.envs.minatar.vector), into the caller's fresh arrays
 * obs and final_obs, (N, obs_row_bytes) each: every observation row, in one memcpy, and the
 * terminal rows of the envs that ended (what Gymnasium's info["final_obs"] means where
 * info["_final_obs"] is set; the other rows of final_obs are left as they are). Copying each
 * block of rows right after stepping it, while in cache, was slower (Freeway 82 against 73 us
 * a step of 1,024 envs, Seaquest 125 against 110, 2026-11-29): it took cache from the step. */
static void ma_copy_out(const ma_batch *m, uint8_t *obs, uint8_t *final_obs) {
    const op_batch *b = &m->base;
    int64_t i, n = b->num_envs, bytes = b->obs_row_bytes;
    memcpy(obs, b->obs, (size_t)(n * bytes));
    for (i = 0; i < n; i++) {
        if (b->terminated[i] | b->truncated[i])
            memcpy(final_obs + i * bytes, b->final_obs + i * bytes, (size_t)bytes);
    }
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

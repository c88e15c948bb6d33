/* The token encoder's per-token layer and masked max-pool (operant.trainer.policies.token):
 * forward with the pool's argmax, and the gradients of the two embedding tables, the token
 * layer's weight and its bias.
 *
 * Layouts (all C-contiguous):
 *   obs      uint8 (B, T, 3) tokens (location, feature id, value); 0xFF as feature id = padding
 *   fv       float (F x 256, E), the (feature id, value) table: row min(feature, F - 1) * 256 +
 *            value; loc float (256, E), the location table
 *   weight   float (H, E), the token layer's (nn.Linear's layout); bias float (H,)
 *   pooled   float (B, H): max over the row's real tokens of relu(weight x + bias), x the sum of
 *            the token's two embedding rows; 0 for a row without a real token
 *   arg      int32 (B, H): the token (slot index) that gave each pooled value, the first one on
 *            ties (torch's CPU max(dim) returns the first occurrence too: checked on torch
 *            2.13.0, values [1, 3, 3, 2, 3] give index 1)
 *
 * The layer is linear in x, and x is a sum of two table rows, so weight x + bias =
 * (weight fv[r]) + (weight loc[l] + bias): each table row's product with the weight (H floats)
 * is computed once per call, when a token first reads the row, into `table` (scratch the
 * caller owns: (F x 256 + 256, H) floats, and one flag byte a row); a token then costs H adds
 * and the max, not an H x E product. A window of 20-50 tokens reads a few dozen distinct rows
 * (few feature ids and values, at most 256 locations), so a 1,024-row minibatch computes a few
 * hundred row products instead of tens of thousands of token products.
 *
 * Backward: max-pooling routes each (row, unit)'s gradient to the one token that gave the
 * maximum, and relu's backward keeps it only where that maximum is > 0 (relu' (0) is 0, as
 * torch's; empty rows' zeros get none). The kept gradients are summed per table row the token
 * read (into `table`, reused as (rows, H) double sums g_r), then, per touched table row r in index
 * order: weight's gradient += g_r (outer) x_r, the row's gradient = g_r . weight. Sums run in
 * a fixed order (rows of the batch, units, then table rows), so results are deterministic; they
 * differ from torch's autograd in the last bits (sums grouped otherwise;
 * tests/test_token_encoder.py compares both). No allocation, no Python objects; the .pyx calls
 * these without the GIL. */
#ifndef OPERANT_TOKEN_ENCODER_H
#define OPERANT_TOKEN_ENCODER_H

#include <stdint.h>
#include <string.h>

#include "kernel_common.h" /* OP_VECTOR_CLONES */

#define TE_PAD 0xFF

typedef struct {
    int64_t batch, tokens, features, embed, hidden;
} te_shape;

/* Rows of the scratch table: the (feature, value) table's, then the location table's. */
static inline int64_t te_fv_rows(const te_shape *s) { return s->features * 256; }
static inline int64_t te_table_rows(const te_shape *s) { return te_fv_rows(s) + 256; }

/* dst[0:n] += v * src[0:n]. */
__attribute__((always_inline)) static inline void te_axpy(float *__restrict__ dst,
                                                          const float *__restrict__ src, float v,
                                                          int64_t n) {
    int64_t q;
    for (q = 0; q < n; q++) dst[q] += v * src[q];
}

/* The scratch row of table row `r` (of fv, then loc), computed on its first read this call:
 * bias (location rows only) + sum over e of x[e] * weight[:, e], from weight_t (E, H). */
__attribute__((always_inline)) static inline const float *te_row(
        int64_t r, const float *fv, const float *loc, const float *weight_t, const float *bias,
        float *table, uint8_t *flags, const te_shape *s, const int64_t E, const int64_t H) {
    float *row = table + r * H;
    if (!flags[r]) {
        int64_t fv_rows = te_fv_rows(s), e, k;
        const float *x = r < fv_rows ? fv + r * E : loc + (r - fv_rows) * E;
        for (k = 0; k < H; k++) row[k] = r < fv_rows ? 0.0f : bias[k];
        for (e = 0; e < E; e++) te_axpy(row, weight_t + e * H, x[e], H);
        flags[r] = 1;
    }
    return row;
}

/* The table rows token `tok` reads: (feature, value) row and location row (offset into the
 * scratch table's rows). */
static inline int64_t te_fv_row(const uint8_t *tok, const te_shape *s) {
    int64_t feature = tok[1] < s->features ? tok[1] : s->features - 1;
    return feature * 256 + tok[2];
}

/* best = max(best, relu(p + q)) and arg = slot where the new value is larger (strictly: the
 * first token keeps ties), eight units at a time in GCC's vector types: the plain loop's
 * float compare selecting an int compiled to a slow sequence (1.6 ms for 1,024 rows of 32
 * tokens, against 0.27 ms without the argmax). */
typedef float te_v8 __attribute__((vector_size(32), aligned(4), may_alias));
typedef int32_t te_i8 __attribute__((vector_size(32), aligned(4), may_alias));

__attribute__((always_inline)) static inline void te_argmax_step(
        const float *p, const float *q, float *best, int32_t *arg, int32_t slot, int64_t H) {
    int64_t k = 0;
    te_i8 slots = {slot, slot, slot, slot, slot, slot, slot, slot};
    for (; k + 8 <= H; k += 8) {
        te_v8 z = *(const te_v8 *)(p + k) + *(const te_v8 *)(q + k);
        te_v8 b = *(te_v8 *)(best + k);
        te_i8 positive = z > 0.0f, h = (te_i8)z & positive, more = (te_v8)h > b;
        *(te_i8 *)(best + k) = (h & more) | ((te_i8)b & ~more);
        *(te_i8 *)(arg + k) = (slots & more) | (*(te_i8 *)(arg + k) & ~more);
    }
    for (; k < H; k++) {
        float z = p[k] + q[k], h = z > 0.0f ? z : 0.0f;
        if (h > best[k]) {
            best[k] = h;
            arg[k] = slot;
        }
    }
}

/* best = max(best, relu(p + q)): the rollout's pass, no argmax. */
__attribute__((always_inline)) static inline void te_max_step(const float *p, const float *q,
                                                              float *best, int64_t H) {
    int64_t k = 0;
    for (; k + 8 <= H; k += 8) {
        te_v8 z = *(const te_v8 *)(p + k) + *(const te_v8 *)(q + k);
        te_v8 b = *(te_v8 *)(best + k);
        te_i8 h = (te_i8)z & (z > 0.0f), more = (te_v8)h > b;
        *(te_i8 *)(best + k) = (h & more) | ((te_i8)b & ~more);
    }
    for (; k < H; k++) {
        float z = p[k] + q[k], h = z > 0.0f ? z : 0.0f;
        best[k] = h > best[k] ? h : best[k];
    }
}

/* One row's pooled values into `best` (H floats), and its argmax slots into `arg` where it is
 * not NULL. */
__attribute__((always_inline)) static inline void te_pool_row(
        const uint8_t *tokens, const float *fv, const float *loc, const float *weight_t,
        const float *bias, float *table, uint8_t *flags, float *best, int32_t *arg,
        const te_shape *s, const int64_t E, const int64_t H) {
    int64_t t, k, fv_rows = te_fv_rows(s);
    for (k = 0; k < H; k++) best[k] = -1.0f; /* below any relu output: the first token wins */
    if (arg) memset(arg, 0, (size_t)H * sizeof(int32_t));
    for (t = 0; t < s->tokens; t++) {
        const uint8_t *tok = tokens + t * 3;
        const float *p, *q;
        if (tok[1] == TE_PAD) continue;
        p = te_row(te_fv_row(tok, s), fv, loc, weight_t, bias, table, flags, s, E, H);
        q = te_row(fv_rows + tok[0], fv, loc, weight_t, bias, table, flags, s, E, H);
        if (arg)
            te_argmax_step(p, q, best, arg, (int32_t)t, H);
        else
            te_max_step(p, q, best, H);
    }
    for (k = 0; k < H; k++) best[k] = best[k] < 0.0f ? 0.0f : best[k]; /* no real token */
}

__attribute__((always_inline)) static inline void te_forward_eh(
        const uint8_t *obs, const float *fv, const float *loc, const float *weight,
        const float *bias, float *weight_t, float *table, uint8_t *flags, float *pooled,
        int32_t *arg, const te_shape *s, const int64_t E, const int64_t H) {
    int64_t b, e, k;
    for (k = 0; k < H; k++) {
        for (e = 0; e < E; e++) weight_t[e * H + k] = weight[k * E + e];
    }
    memset(flags, 0, (size_t)te_table_rows(s));
    for (b = 0; b < s->batch; b++) {
        te_pool_row(obs + b * s->tokens * 3, fv, loc, weight_t, bias, table, flags,
                    pooled + b * H, arg ? arg + b * H : NULL, s, E, H);
    }
}

/* forward: weight_t (E, H), table ((F x 256 + 256), H) and flags (F x 256 + 256 bytes) are
 * scratch; arg may be NULL (the rollout's pass: no argmax kept). */
OP_VECTOR_CLONES static void te_forward(const uint8_t *obs, const float *fv, const float *loc,
                                        const float *weight, const float *bias, float *weight_t,
                                        float *table, uint8_t *flags, float *pooled,
                                        int32_t *arg, const te_shape *s) {
    if (s->embed == 32 && s->hidden == 64)
        te_forward_eh(obs, fv, loc, weight, bias, weight_t, table, flags, pooled, arg, s, 32, 64);
    else if (s->embed == 32 && s->hidden == 32)
        te_forward_eh(obs, fv, loc, weight, bias, weight_t, table, flags, pooled, arg, s, 32, 32);
    else
        te_forward_eh(obs, fv, loc, weight, bias, weight_t, table, flags, pooled, arg, s,
                      s->embed, s->hidden);
}

/* The kept gradients summed per table row into `sums` (double: (F x 256 + 256) rows of H,
 * a row zeroed when first touched, flagged in `flags`; a row of a busy location sums
 * hundreds of terms, and float sums in this serial order were 7x further from the exact
 * gradient than torch's), and the bias's gradient (summed in the row after them). */
__attribute__((always_inline)) static inline void te_sum_per_row(
        const uint8_t *obs, const float *pooled, const int32_t *arg, const float *grad,
        float *grad_bias, double *sums, uint8_t *flags, const te_shape *s, const int64_t H) {
    int64_t b, k, fv_rows = te_fv_rows(s), rows = te_table_rows(s);
    double *bias_sum = sums + rows * H;
    memset(flags, 0, (size_t)rows);
    memset(bias_sum, 0, (size_t)H * sizeof(double));
    for (b = 0; b < s->batch; b++) {
        const float *p = pooled + b * H, *g = grad + b * H;
        const int32_t *a = arg + b * H;
        const uint8_t *tokens = obs + b * s->tokens * 3;
        for (k = 0; k < H; k++) {
            const uint8_t *tok;
            int64_t touched[2], i;
            if (!(p[k] > 0.0f)) continue;
            tok = tokens + (int64_t)a[k] * 3;
            touched[0] = te_fv_row(tok, s);
            touched[1] = fv_rows + tok[0];
            for (i = 0; i < 2; i++) {
                if (!flags[touched[i]]) {
                    memset(sums + touched[i] * H, 0, (size_t)H * sizeof(double));
                    flags[touched[i]] = 1;
                }
                sums[touched[i] * H + k] += g[k];
            }
            bias_sum[k] += g[k];
        }
    }
    for (k = 0; k < H; k++) grad_bias[k] = (float)bias_sum[k];
}

__attribute__((always_inline)) static inline void te_backward_eh(
        const uint8_t *obs, const float *fv, const float *loc, const float *weight,
        const float *pooled, const int32_t *arg, const float *grad, float *grad_fv,
        float *grad_loc, float *grad_weight, float *grad_bias, double *sums, uint8_t *flags,
        const te_shape *s, const int64_t E, const int64_t H) {
    int64_t r, k, fv_rows = te_fv_rows(s);
    te_sum_per_row(obs, pooled, arg, grad, grad_bias, sums, flags, s, H);
    memset(grad_weight, 0, (size_t)(H * E) * sizeof(float));
    memset(grad_fv, 0, (size_t)(fv_rows * E) * sizeof(float));
    memset(grad_loc, 0, (size_t)(256 * E) * sizeof(float));
    for (r = 0; r < te_table_rows(s); r++) {
        const float *x = r < fv_rows ? fv + r * E : loc + (r - fv_rows) * E;
        float *dx = r < fv_rows ? grad_fv + r * E : grad_loc + (r - fv_rows) * E;
        const double *g = sums + r * H;
        if (!flags[r]) continue;
        for (k = 0; k < H; k++) {
            float gk = (float)g[k];
            if (gk == 0.0f) continue;
            te_axpy(grad_weight + k * E, x, gk, E);
            te_axpy(dx, weight + k * E, gk, E);
        }
    }
}

/* backward: the four gradients overwritten (grad_fv and grad_loc whole tables, zeros where no
 * token's gradient reached); sums ((F x 256 + 256 + 1) x H doubles: the forward's table is
 * allocated that large) and flags are scratch. */
OP_VECTOR_CLONES static void te_backward(const uint8_t *obs, const float *fv, const float *loc,
                                         const float *weight, const float *pooled,
                                         const int32_t *arg, const float *grad, float *grad_fv,
                                         float *grad_loc, float *grad_weight, float *grad_bias,
                                         double *sums, uint8_t *flags, const te_shape *s) {
    if (s->embed == 32 && s->hidden == 64)
        te_backward_eh(obs, fv, loc, weight, pooled, arg, grad, grad_fv, grad_loc, grad_weight,
                       grad_bias, sums, flags, s, 32, 64);
    else
        te_backward_eh(obs, fv, loc, weight, pooled, arg, grad, grad_fv, grad_loc, grad_weight,
                       grad_bias, sums, flags, s, s->embed, s->hidden);
}

#endif

/* The CNN policy's first convolution (stride 1, no padding, then ReLU) computed from the
 * frames' nonzero cells: MinAtar's frames are 0/1 cells of which 1-8% are set, so a cell-major
 * walk does a tenth (Breakout) to a hundredth (Seaquest) of the dense product's arithmetic and
 * never builds the im2col patches.
 *
 * Layouts (all C-contiguous):
 *   frames   uint8 (B, C, H, W), any values (a cell contributes value x weight)
 *   weight   float (O, C, k, k), torch's Conv2d layout; bias float (O,)
 *   weight_t float (C, k, k, O), scratch the caller owns: the weight transposed so that a cell's
 *            contribution to one output position is O consecutive floats (vectorised)
 *   out      float (B, H', W', O), H' = H - k + 1: the feature maps channels-last, the order the
 *            policy's dense layer reads them in
 *
 * Forward: every position starts at the bias; each nonzero cell (c, y, x) of value v adds
 * v * weight[:, c, i, j] to position (y - i, x - j) for each of the k x k offsets that land on
 * the output; then ReLU, while the row is in cache.
 * Backward (weight and bias only: the frames are the observation, no input gradient): the
 * output's gradient masked by out > 0 (ReLU's backward), summed over positions for the bias and
 * gathered cell by cell for the weight, the forward's walk in reverse roles.
 *
 * Sums run in a fixed order (rows, then cells in memory order, then offsets), so results are
 * deterministic; they differ from torch's conv2d in the last bits (tests/test_cnn_policy.py
 * compares both). No allocation, no Python objects; the .pyx calls these without the GIL. */
#ifndef OPERANT_SPARSE_CONV_H
#define OPERANT_SPARSE_CONV_H

#include <stdint.h>
#include <string.h>

#include "kernel_common.h" /* OP_VECTOR_CLONES */

typedef struct {
    int64_t batch, channels, height, width, kernel, out_channels;
} sc_shape;

static inline int64_t sc_out_h(const sc_shape *s) { return s->height - s->kernel + 1; }
static inline int64_t sc_out_w(const sc_shape *s) { return s->width - s->kernel + 1; }

/* dst (cols, rows) = src (rows, cols) transposed: the weight (O, C x k x k) into weight_t's
 * (C x k x k, O) for the passes, and weight_t's gradient back into torch's layout. */
static void sc_transpose(const float *src, float *dst, int64_t rows, int64_t cols) {
    int64_t r, c;
    for (r = 0; r < rows; r++) {
        for (c = 0; c < cols; c++) dst[c * rows + r] = src[r * cols + c];
    }
}

static inline int64_t sc_weight_rows(const sc_shape *s) {
    return s->channels * s->kernel * s->kernel;
}

/* dst[0:n] += v * src[0:n]: the inner loop of both passes (n = O, 16 for MinAtar's network),
 * sixteen then eight floats at a time in GCC's vector types (the plain loop, once inlined into
 * the cell walk, compiled to scalar code: GCC could not rule out that dst and src overlap).
 * The sixteen-float type is one AVX-512 register in the x86-64-v4 clone (two AVX2 ones, four
 * SSE ones in the others): 1.13x the forward's and 1.20x the backward's speed on this VM's
 * AVX-512 Xeon at 1,024 Breakout frames in one run
 * (docs/journal/2026-11-22-training-end-to-end.md has the whole change's spread over runs), the
 * same values bit for bit. */
typedef float sc_v8 __attribute__((vector_size(32), aligned(4), may_alias));

typedef float sc_v16 __attribute__((vector_size(64), aligned(4), may_alias));

__attribute__((always_inline)) static inline void sc_axpy(float *dst, const float *src, float v, int64_t n) {
    int64_t q = 0;
    for (; q + 16 <= n; q += 16) {
        sc_v16 d = *(const sc_v16 *)(dst + q), x = *(const sc_v16 *)(src + q);
        *(sc_v16 *)(dst + q) = d + v * x;
    }
    for (; q + 8 <= n; q += 8) {
        sc_v8 d = *(const sc_v8 *)(dst + q), x = *(const sc_v8 *)(src + q);
        *(sc_v8 *)(dst + q) = d + v * x;
    }
    for (; q < n; q++) dst[q] += v * src[q];
}

typedef int32_t sc_i16 __attribute__((vector_size(64), aligned(4), may_alias));

__attribute__((always_inline)) static inline sc_v16 sc_mask16(const float *maps, const float *g, float *masked, int64_t at) {
    sc_v16 grad = *(const sc_v16 *)(g + at), out = *(const sc_v16 *)(maps + at);
    sc_v16 kept = (sc_v16)((sc_i16)grad & (out > 0.0f));
    *(sc_v16 *)(masked + at) = kept;
    return kept;
}

/* masked = g where maps > 0, else 0 (ReLU's backward), for `count` rows of n floats, and
 * acc[0:n] += the rows of masked summed. Both loads unconditional so that the select
 * vectorises (a branch per element mispredicted on half of them: 3 ms for 1,024 Breakout
 * rows); the rows summed into four partial sums in registers, not added to acc one after
 * another through memory. */
__attribute__((always_inline)) static inline void sc_mask_rows(const float *maps, const float *g, float *masked, float *acc,
                                int64_t count, int64_t n) {
    int64_t q = 0, p;
    for (; q + 16 <= n; q += 16) {
        sc_v16 s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0};
        for (p = 0; p + 4 <= count; p += 4) {
            s0 += sc_mask16(maps, g, masked, p * n + q);
            s1 += sc_mask16(maps, g, masked, (p + 1) * n + q);
            s2 += sc_mask16(maps, g, masked, (p + 2) * n + q);
            s3 += sc_mask16(maps, g, masked, (p + 3) * n + q);
        }
        for (; p < count; p++) s0 += sc_mask16(maps, g, masked, p * n + q);
        *(sc_v16 *)(acc + q) += (s0 + s1) + (s2 + s3);
    }
    for (; q < n; q++) {
        float sum = 0.0f;
        for (p = 0; p < count; p++) {
            float gq = g[p * n + q];
            masked[p * n + q] = maps[p * n + q] > 0.0f ? gq : 0.0f;
            sum += masked[p * n + q];
        }
        acc[q] += sum;
    }
}

/* Ask for the next frame's feature maps and their gradient (n floats each) while this frame's
 * cells are walked: the backward reads 8 KB a Breakout frame from beyond L2. */
static inline void sc_prefetch(const float *a, const float *b, int64_t n) {
    int64_t q;
    for (q = 0; q < n; q += 16) {
        __builtin_prefetch(a + q);
        __builtin_prefetch(b + q);
    }
}

/* The index of the next nonzero byte of frame[at:n], or n: eight bytes at a time over zeros. */
static inline int64_t sc_next_nonzero(const uint8_t *frame, int64_t at, int64_t n) {
    uint64_t word;
    while (at + 8 <= n) {
        memcpy(&word, frame + at, 8);
        if (word) return at + (__builtin_ctzll(word) >> 3);
        at += 8;
    }
    while (at < n && !frame[at]) at++;
    return at;
}

/* Visit every (cell value, output position, weight_t row) of one frame: `body` runs with
 * `v` (float), `pos` (output position index) and `row` (index into weight_t's rows).
 * A cell's channel and row follow from its index by stepping a row start forward (cells come
 * in increasing order, so at most C x H steps a frame) instead of three integer divisions. */
#define SC_FOR_EACH_CONTRIBUTION(s, frame, body)                                          \
    do {                                                                                  \
        int64_t _k = (s)->kernel, _h = (s)->height, _w = (s)->width;                      \
        int64_t _oh = sc_out_h(s), _ow = sc_out_w(s), _plane = _h * _w;                   \
        int64_t _n = (s)->channels * _plane, _at = sc_next_nonzero(frame, 0, _n);         \
        int64_t _row_end = _w, _y = 0, _c = 0;                                            \
        while (_at < _n) {                                                                \
            int64_t _x, _i, _j;                                                           \
            float v = (float)(frame)[_at];                                                \
            while (_at >= _row_end) {                                                     \
                _row_end += _w;                                                           \
                if (++_y == _h) {                                                         \
                    _y = 0;                                                               \
                    _c++;                                                                 \
                }                                                                         \
            }                                                                             \
            _x = _at - (_row_end - _w);                                                   \
            for (_i = 0; _i < _k; _i++) {                                                 \
                int64_t _oy = _y - _i;                                                    \
                if (_oy < 0 || _oy >= _oh) continue;                                      \
                for (_j = 0; _j < _k; _j++) {                                             \
                    int64_t _ox = _x - _j;                                                \
                    if (_ox < 0 || _ox >= _ow) continue;                                  \
                    {                                                                     \
                        int64_t pos = _oy * _ow + _ox, row = (_c * _k + _i) * _k + _j;    \
                        body;                                                             \
                    }                                                                     \
                }                                                                         \
            }                                                                             \
            _at = sc_next_nonzero(frame, _at + 1, _n);                                    \
        }                                                                                 \
    } while (0)

/* The passes with O, the output channels, a compile-time constant where it is one of the
 * common widths (the dispatchers below): the per-position loops then compile to a few vector
 * instructions instead of a libc memcpy and runtime-length loops with their prologues. */
__attribute__((always_inline)) static inline void sc_forward_o(
        const uint8_t *frames, const float *weight_t, const float *bias, float *out,
        const sc_shape *s, const int64_t O) {
    int64_t positions = sc_out_h(s) * sc_out_w(s);
    int64_t frame_bytes = s->channels * s->height * s->width, b, p, q;
    for (b = 0; b < s->batch; b++) {
        const uint8_t *frame = frames + b * frame_bytes;
        float *maps = out + b * positions * O;
        for (p = 0; p < positions; p++) {
            for (q = 0; q < O; q++) maps[p * O + q] = bias[q];
        }
        SC_FOR_EACH_CONTRIBUTION(s, frame, sc_axpy(maps + pos * O, weight_t + row * O, v, O));
        for (q = 0; q < positions * O; q++) maps[q] = maps[q] > 0.0f ? maps[q] : 0.0f;
    }
}

/* grad_weight_t (C, k, k, O) and grad_bias (O,) are overwritten; masked: positions * O floats
 * of scratch. */
__attribute__((always_inline)) static inline void sc_backward_o(
        const uint8_t *frames, const float *out, const float *grad, float *grad_weight_t,
        float *grad_bias, float *masked, const sc_shape *s, const int64_t O) {
    int64_t positions = sc_out_h(s) * sc_out_w(s);
    int64_t frame_bytes = s->channels * s->height * s->width, b, p, q;
    int64_t rows = sc_weight_rows(s);
    memset(grad_weight_t, 0, (size_t)(rows * O) * sizeof(float));
    memset(grad_bias, 0, (size_t)O * sizeof(float));
    for (b = 0; b < s->batch; b++) {
        const uint8_t *frame = frames + b * frame_bytes;
        const float *maps = out + b * positions * O, *g = grad + b * positions * O;
        sc_mask_rows(maps, g, masked, grad_bias, positions, O);
        if (b + 1 < s->batch) sc_prefetch(maps + positions * O, g + positions * O, positions * O);
        SC_FOR_EACH_CONTRIBUTION(s, frame,
                                 sc_axpy(grad_weight_t + row * O, masked + pos * O, v, O));
    }
}

/* Compiled per ISA level (kernel_common.h): AVX2 does a row's adds in half the instructions
 * of the baseline's SSE. */
OP_VECTOR_CLONES static void sc_forward(const uint8_t *frames, const float *weight_t,
                                        const float *bias, float *out, const sc_shape *s) {
    switch (s->out_channels) {
    case 16: sc_forward_o(frames, weight_t, bias, out, s, 16); break;
    case 32: sc_forward_o(frames, weight_t, bias, out, s, 32); break;
    default: sc_forward_o(frames, weight_t, bias, out, s, s->out_channels);
    }
}

OP_VECTOR_CLONES static void sc_backward(const uint8_t *frames, const float *out,
                                         const float *grad, float *grad_weight_t,
                                         float *grad_bias, float *masked, const sc_shape *s) {
    switch (s->out_channels) {
    case 16: sc_backward_o(frames, out, grad, grad_weight_t, grad_bias, masked, s, 16); break;
    case 32: sc_backward_o(frames, out, grad, grad_weight_t, grad_bias, masked, s, 32); break;
    default:
        sc_backward_o(frames, out, grad, grad_weight_t, grad_bias, masked, s, s->out_channels);
    }
}

/* How many of n bytes are nonzero (the caller's choice between this and a dense product), in
 * blocks of 255 bytes whose count fits a byte, so that the compare-and-add vectorises over
 * 32 or 64 bytes at a time (the 64-bit counter the plain loop kept did not). */
OP_VECTOR_CLONES static int64_t sc_count_nonzero(const uint8_t *bytes, int64_t n) {
    int64_t count = 0, k = 0, j;
    for (; k + 255 <= n; k += 255) {
        uint8_t block = 0;
        for (j = 0; j < 255; j++) block += bytes[k + j] != 0;
        count += block;
    }
    for (; k < n; k++) count += bytes[k] != 0;
    return count;
}

#endif

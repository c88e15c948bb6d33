/* Tight single-thread float32 loops that measure what this CPU's arithmetic can do at the
 * exact shapes of a PPO step (operant.trainer.bench.arithmetic): the "arithmetic bound" of
 * `operant bench trainer` is FLOPs / these rates, so a percentage of it is a percentage of
 * arithmetic, not of a framework's per-call overhead.
 *
 * Not training code, and not bound by the kernels' rule against fused multiply-adds: these are
 * a yardstick of the machine's rate, so they may use every instruction it has. setup.py builds
 * this module with -ffp-contract=fast (and 512-bit vectors where AVX-512 is); each loop is
 * cloned for the x86-64-v4 (AVX-512) and v3 (AVX2, FMA) levels and the baseline and picked at
 * load time, like the kernels (the build stays portable).
 *
 * Matrices are row-major float32. Register tiles are GCC vector extensions (16 floats), which
 * each clone lowers to its own vector width. */
#ifndef OPERANT_ARITHMETIC_H
#define OPERANT_ARITHMETIC_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) && \
    __GNUC__ >= 12
#define OP_RATE_CLONES \
    __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define OP_RATE_CLONES
#endif

typedef float op_v16 __attribute__((vector_size(64)));

/* Always inlined: a clone passes a 64-byte vector in registers and the baseline in memory,
 * so a helper left out of line would be called with the wrong convention (cext/trainer/fused_kernels.h
 * MLP_VECTOR, where that happened). */
static inline __attribute__((always_inline)) op_v16 op_v16_load(const float *p) {
    op_v16 v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline __attribute__((always_inline)) void op_v16_store(float *p, op_v16 v) {
    memcpy(p, &v, sizeof v);
}

/* C (m x n) = A (m x k) @ B (k x n): tiles of 4 rows x 64 columns held in 16 vector registers
 * across the whole k loop, then narrower tiles, then scalars for what is left. (A vector times
 * a scalar broadcasts the scalar; the unrolled constant indices let GCC keep the tiles in
 * registers.) */
OP_RATE_CLONES static void op_gemm_nn(int64_t m, int64_t k, int64_t n, const float *A,
                                      const float *B, float *C) {
    int64_t i, j, p, r, q;
    for (j = 0; j + 64 <= n; j += 64) {
        for (i = 0; i + 4 <= m; i += 4) {
            op_v16 acc[4][4];
#pragma GCC unroll 4
            for (r = 0; r < 4; r++)
#pragma GCC unroll 4
                for (q = 0; q < 4; q++) acc[r][q] = (op_v16){0};
            for (p = 0; p < k; p++) {
                op_v16 b[4];
#pragma GCC unroll 4
                for (q = 0; q < 4; q++) b[q] = op_v16_load(B + p * n + j + 16 * q);
#pragma GCC unroll 4
                for (r = 0; r < 4; r++) {
                    float a = A[(i + r) * k + p];
#pragma GCC unroll 4
                    for (q = 0; q < 4; q++) acc[r][q] += b[q] * a;
                }
            }
#pragma GCC unroll 4
            for (r = 0; r < 4; r++)
#pragma GCC unroll 4
                for (q = 0; q < 4; q++) op_v16_store(C + (i + r) * n + j + 16 * q, acc[r][q]);
        }
        for (; i < m; i++) {
            op_v16 acc[4];
#pragma GCC unroll 4
            for (q = 0; q < 4; q++) acc[q] = (op_v16){0};
            for (p = 0; p < k; p++) {
                float a = A[i * k + p];
#pragma GCC unroll 4
                for (q = 0; q < 4; q++) acc[q] += op_v16_load(B + p * n + j + 16 * q) * a;
            }
#pragma GCC unroll 4
            for (q = 0; q < 4; q++) op_v16_store(C + i * n + j + 16 * q, acc[q]);
        }
    }
    for (; j + 16 <= n; j += 16) {
        for (i = 0; i + 4 <= m; i += 4) {
            op_v16 acc[4];
#pragma GCC unroll 4
            for (r = 0; r < 4; r++) acc[r] = (op_v16){0};
            for (p = 0; p < k; p++) {
                op_v16 b = op_v16_load(B + p * n + j);
#pragma GCC unroll 4
                for (r = 0; r < 4; r++) acc[r] += b * A[(i + r) * k + p];
            }
#pragma GCC unroll 4
            for (r = 0; r < 4; r++) op_v16_store(C + (i + r) * n + j, acc[r]);
        }
        for (; i < m; i++) {
            op_v16 acc = {0};
            for (p = 0; p < k; p++) acc += op_v16_load(B + p * n + j) * A[i * k + p];
            op_v16_store(C + i * n + j, acc);
        }
    }
    if (j < n) {
        for (i = 0; i < m; i++) {
            int64_t jj;
            for (jj = j; jj < n; jj++) C[i * n + jj] = 0.0f;
            for (p = 0; p < k; p++) {
                float a = A[i * k + p];
                for (jj = j; jj < n; jj++) C[i * n + jj] += a * B[p * n + jj];
            }
        }
    }
}

/* C (m x n) = A (m x k) @ Bt (n x k)^T: dot products along k, for narrow outputs (a policy's
 * few logits) where rows of C are too short to vectorise. */
OP_RATE_CLONES static void op_gemm_nt(int64_t m, int64_t k, int64_t n, const float *A,
                                      const float *Bt, float *C) {
    int64_t i, j, p, lane;
    for (i = 0; i < m; i++) {
        const float *a = A + i * k;
        for (j = 0; j < n; j++) {
            const float *b = Bt + j * k;
            op_v16 acc = {0};
            float sum = 0.0f;
            for (p = 0; p + 16 <= k; p += 16) acc += op_v16_load(a + p) * op_v16_load(b + p);
            for (; p < k; p++) sum += a[p] * b[p];
            for (lane = 0; lane < 16; lane++) sum += acc[lane];
            C[i * n + j] = sum;
        }
    }
}

/* The elementwise yardstick: y = max(x * scale + y, 0) over `count` floats, 3 FLOPs each (a
 * layer's bias, activation and their gradients are passes of this kind). */
OP_RATE_CLONES static void op_pointwise(int64_t count, const float *__restrict__ x,
                                        float *__restrict__ y, float scale) {
    int64_t i;
    for (i = 0; i < count; i++) {
        float v = x[i] * scale + y[i];
        y[i] = v > 0.0f ? v : 0.0f;
    }
}

/* Gradient clipping by the global norm, then one Adam step, over `count` parameters:
 * FlatParameters.clip_grad_norm_ and FlatAdam.step's arithmetic, fused into two passes.
 * OP_ADAM_FLOPS per parameter: the norm 2, the scale 1, the first moment 3, the second 4,
 * sqrt, bias correction, eps and the division 4, the parameter update 2. */
#define OP_ADAM_FLOPS 16
OP_RATE_CLONES static void op_clip_adam(int64_t count, float *__restrict__ param,
                                        float *__restrict__ grad, float *__restrict__ exp_avg,
                                        float *__restrict__ exp_avg_sq, float max_norm, float lr,
                                        float beta1, float beta2, float eps, float bc1,
                                        float bc2_sqrt) {
    int64_t i, lane;
    op_v16 acc = {0};
    float norm_sq = 0.0f, clip;
    for (i = 0; i + 16 <= count; i += 16) {
        op_v16 g = op_v16_load(grad + i);
        acc += g * g;
    }
    for (; i < count; i++) norm_sq += grad[i] * grad[i];
    for (lane = 0; lane < 16; lane++) norm_sq += acc[lane];
    clip = max_norm / (sqrtf(norm_sq) + 1e-6f);
    clip = clip < 1.0f ? clip : 1.0f;
    for (i = 0; i < count; i++) {
        float g = grad[i] * clip;
        float m = exp_avg[i] + (g - exp_avg[i]) * (1.0f - beta1);
        float v = exp_avg_sq[i] * beta2 + g * g * (1.0f - beta2);
        exp_avg[i] = m;
        exp_avg_sq[i] = v;
        param[i] += (-lr / bc1) * m / (sqrtf(v) / bc2_sqrt + eps);
    }
}

#endif

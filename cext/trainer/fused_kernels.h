/* The vectorised pieces of cext/trainer/fused_mlp.h's network: elementwise functions (exp, tanh,
 * relu) without libm, and the matrix products, register-tiled. Plain C; every hot loop is
 * compiled for AVX-512, AVX2 and the baseline and picked at load time (no -march in a build
 * that ships). */
#ifndef OPERANT_FUSED_KERNELS_H
#define OPERANT_FUSED_KERNELS_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* Fused multiply-adds here, unlike the env kernels (whose -ffp-contract=off keeps Gymnasium's
 * float64 arithmetic exact): this module matches torch to float32 rounding, not bit for bit,
 * and a multiply-add is one AVX-512 instruction instead of two. Runs on one CPU stay
 * bit-identical (the code picked at load time is the same every time). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=fast")
/* mlp_v16 in the baseline clone is passed in memory: GCC says so once per function */
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

#ifdef MLP_CLONES
/* the includer chose (a test of one target) */
#elif defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define MLP_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define MLP_CLONES
#endif

#define MLP_LANES 16
/* Below this many outputs a layer is computed as dot products over its inputs (vectorised
 * along the inputs) rather than as rows of outputs (vectorised along the outputs). */
#define MLP_NARROW 16

/* Clears the upper halves of the vector registers where the CPU has them (vzeroupper), for
 * the scalar code compiled for the baseline (SSE encodings) that runs between the clones:
 * entered with those halves dirty (code before the call that did not clear them: the
 * process's other libraries), every SSE instruction waits on a merge with the stale upper
 * bits. The epoch measured 2.2 ms from Python against 1.1 ms from a C driver until this ran
 * first; each AVX clone clears them on return itself. */
static inline void mlp_clean_upper(void) {
#if defined(__GNUC__) && defined(__x86_64__)
    static int avx = -1;
    if (avx < 0) {
        __builtin_cpu_init();
        avx = __builtin_cpu_supports("avx") != 0;
    }
    if (avx) __asm__ volatile("vzeroupper");
#endif
}

/* -- vectorisable elementwise kernels ------------------------------------------------------ */

/* tanh as Eigen computes it for float: an odd degree-13 over an even degree-6 polynomial on
 * [-7.9, 7.9] (clamped outside), within 4e-7 of the exact value; one division and no exp.
 * Written once for any T (a float, or 16 of them: mlp_v16 below), so that the loop over an
 * array and the matrix tiles' in-register version compute the same thing. */
#define MLP_TANH_POLY(T, v)                                       \
    ({                                                            \
        const T v2_ = (v) * (v);                                  \
        T p_ = (v2_ * -2.76076847742355e-16f) + 2.00018790482477e-13f; \
        T q_ = (v2_ * 1.19825839466702e-06f) + 1.18534705686654e-04f;  \
        p_ = p_ * v2_ + -8.60467152213735e-11f;                  \
        p_ = p_ * v2_ + 5.12229709037114e-08f;                   \
        p_ = p_ * v2_ + 1.48572235717979e-05f;                   \
        p_ = p_ * v2_ + 6.37261928875436e-04f;                   \
        p_ = p_ * v2_ + 4.89352455891786e-03f;                   \
        q_ = q_ * v2_ + 2.26843463243900e-03f;                   \
        q_ = q_ * v2_ + 4.89352518554385e-03f;                   \
        (v) * p_ / q_;                                            \
    })
#define MLP_TANH_BOUND 7.90531110763549805f

static inline float mlp_tanh1(float x) {
    const float v = x > MLP_TANH_BOUND ? MLP_TANH_BOUND : (x < -MLP_TANH_BOUND ? -MLP_TANH_BOUND : x);
    return MLP_TANH_POLY(float, v);
}

MLP_CLONES static void mlp_tanh(int64_t n, float *__restrict__ x) {
    int64_t i;
    for (i = 0; i < n; i++) x[i] = mlp_tanh1(x[i]);
}

MLP_CLONES static void mlp_relu(int64_t n, float *__restrict__ x) {
    int64_t i;
    for (i = 0; i < n; i++) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

/* dy *= activation'(y), y the activation's output. */
MLP_CLONES static void mlp_activation_backward(int64_t n, int relu, const float *__restrict__ y,
                                               float *__restrict__ dy) {
    int64_t i;
    if (relu) {
        for (i = 0; i < n; i++) dy[i] = y[i] > 0.0f ? dy[i] : 0.0f;
    } else {
        for (i = 0; i < n; i++) dy[i] = dy[i] * (1.0f - y[i] * y[i]);
    }
}

/* -- matrix kernels ------------------------------------------------------------------------ */

/* 16 floats as one value (GCC's vector extension: a ZMM register under AVX-512, two YMM under
 * AVX2, four XMM otherwise), so that a tile's sums stay in registers; unaligned, and allowed
 * to alias the floats it is loaded from. */
typedef float mlp_v16 __attribute__((vector_size(64), aligned(4), may_alias));
/* Every function that takes or returns an mlp_v16 is inlined into its caller, always: the
 * clones pass such a value in registers and the baseline code in memory, so a call from
 * one to the other (a helper GCC chose not to inline) would read garbage. */
#define MLP_VECTOR static inline __attribute__((always_inline))

MLP_VECTOR mlp_v16 mlp_load(const float *p) {
    mlp_v16 v;
    memcpy(&v, p, sizeof v);
    return v;
}

MLP_VECTOR void mlp_store(float *p, mlp_v16 v) { memcpy(p, &v, sizeof v); }

/* A hidden layer's activation, applied where its outputs are made (in registers, before the
 * store) rather than in a second pass over memory. */
enum { MLP_LINEAR = 0, MLP_RELU = 1, MLP_TANH = 2 };
/* ... or, for a backward product, the activation's derivative at its output g (the gate):
 * v * (g > 0) for relu, v * (1 - g g) for tanh. */
enum { MLP_DRELU = 3, MLP_DTANH = 4 };
typedef int32_t mlp_i16 __attribute__((vector_size(64)));

/* mask ? a : b, lane by lane (a mask lane is all ones or all zeros) */
MLP_VECTOR mlp_v16 mlp_select(mlp_i16 mask, mlp_v16 a, mlp_v16 b) {
    return (mlp_v16)(((mlp_i16)a & mask) | ((mlp_i16)b & ~mask));
}

MLP_VECTOR mlp_v16 mlp_splat(float x) {
    const mlp_v16 zero = {0};
    return zero + x;
}

/* exp of 16 floats, each in [-87, 88], with Cephes' range reduction and polynomial (about
 * 1 ulp). */
MLP_VECTOR mlp_v16 mlp_exp16(mlp_v16 x) {
    const mlp_v16 n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round */
    mlp_v16 r = x - n * 0.693359375f, p;
    r = r + n * 2.12194440e-4f;
    p = mlp_splat(1.9875691500e-4f);
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    return p * (mlp_v16)((__builtin_convertvector(n, mlp_i16) + 127) << 23);
}

/* log of 16 floats, each a positive normal number, with Cephes' range reduction and
 * polynomial (about 1 ulp). */
MLP_VECTOR mlp_v16 mlp_log16(mlp_v16 x) {
    const mlp_i16 bits = (mlp_i16)x;
    const mlp_v16 half_mantissa = (mlp_v16)((bits & 0x007fffff) | 0x3f000000); /* [0.5, 1) */
    const mlp_i16 small = half_mantissa < 0.707106781186547524f; /* all ones where true */
    const mlp_v16 e = __builtin_convertvector(((bits >> 23) & 0xff) - 126 + small, mlp_v16);
    const mlp_v16 m = mlp_select(small, half_mantissa + half_mantissa, half_mantissa) - 1.0f;
    const mlp_v16 z = m * m;
    mlp_v16 y = mlp_splat(7.0376836292e-2f);
    y = y * m - 1.1514610310e-1f;
    y = y * m + 1.1676998740e-1f;
    y = y * m - 1.2420140846e-1f;
    y = y * m + 1.4249322787e-1f;
    y = y * m - 1.6668057665e-1f;
    y = y * m + 2.0000714765e-1f;
    y = y * m - 2.4999993993e-1f;
    y = y * m + 3.3333331174e-1f;
    y = y * m * z;
    y += -2.12194440e-4f * e;
    y += -0.5f * z;
    return (m + y) + 0.693359375f * e;
}

MLP_VECTOR mlp_v16 mlp_activate(mlp_v16 v, int act) {
    const mlp_v16 zero = {0};
    if (act == MLP_RELU) return mlp_select(v > zero, v, zero);
    if (act == MLP_TANH) {
        const mlp_v16 hi = zero + MLP_TANH_BOUND, lo = zero - MLP_TANH_BOUND;
        v = mlp_select(v > hi, hi, v);
        v = mlp_select(v < lo, lo, v);
        return MLP_TANH_POLY(mlp_v16, v);
    }
    return v;
}

static inline float mlp_activate1(float x, int act) {
    if (act == MLP_RELU) return x > 0.0f ? x : 0.0f;
    if (act == MLP_TANH) return mlp_tanh1(x);
    return x;
}

MLP_VECTOR mlp_v16 mlp_gate(mlp_v16 v, mlp_v16 g, int act) {
    const mlp_v16 zero = {0};
    if (act == MLP_DRELU) return mlp_select(g > zero, v, zero);
    if (act == MLP_DTANH) return v * (1.0f - g * g);
    return mlp_activate(v, act);
}

static inline float mlp_gate1(float v, float g, int act) {
    if (act == MLP_DRELU) return g > 0.0f ? v : 0.0f;
    if (act == MLP_DTANH) return v * (1.0f - g * g);
    return mlp_activate1(v, act);
}

/* dst (cols, rows) = src (rows, cols with row stride ld) transposed. */
static void mlp_transpose(int64_t rows, int64_t cols, int64_t ld, const float *src, float *dst) {
    int64_t i, j;
    for (i = 0; i < rows; i++)
        for (j = 0; j < cols; j++) dst[j * rows + i] = src[i * ld + j];
}

/* MLP_TILE_ROWS rows of y at columns j .. j + 16 * chunks = x @ W [+ b], the sums in
 * registers while k runs (each sum adds its products in order k = 0, 1, ...). */
#define MLP_TILE_ROWS 8
static inline __attribute__((always_inline)) void mlp_tile(
        int64_t n_in, int64_t n_out, int64_t ldw, const float *__restrict__ x,
        const float *__restrict__ w, const float *__restrict__ b, float *__restrict__ y,
        const float *__restrict__ gate, int64_t i, int64_t j, int chunks, int act, int nrows) {
    mlp_v16 sums[MLP_TILE_ROWS][2];
    const float *xi = x + i * n_in;
    int64_t k;
    int r, c;
#pragma GCC unroll 2
    for (c = 0; c < chunks; c++) {
        mlp_v16 start = {0};
        if (b) start = mlp_load(b + j + 16 * c);
#pragma GCC unroll 8
        for (r = 0; r < nrows; r++) sums[r][c] = start;
    }
    for (k = 0; k < n_in; k++)
#pragma GCC unroll 2
        for (c = 0; c < chunks; c++) {
            const mlp_v16 wk = mlp_load(w + k * ldw + j + 16 * c);
#pragma GCC unroll 8
            for (r = 0; r < nrows; r++) sums[r][c] += xi[r * n_in + k] * wk;
        }
#pragma GCC unroll 8
    for (r = 0; r < nrows; r++)
#pragma GCC unroll 2
        for (c = 0; c < chunks; c++) {
            const int64_t at = (i + r) * n_out + j + 16 * c;
            mlp_v16 g = {0};
            if (act >= MLP_DRELU) g = mlp_load(gate + at);
            mlp_store(y + at, mlp_gate(sums[r][c], g, act));
        }
}

/* y (rows, n_out) = act(x (rows, n_in) @ W (n_in rows of stride ldw) [+ b]), for n_out >= 16:
 * tiles of 8 rows (fewer for the last) x 32 (or 16) outputs; leftover columns take the plain
 * loop, in the same order. Every row is computed by the same code wherever it falls, so a
 * row's outputs do not depend on how many rows came before it. */
static inline __attribute__((always_inline)) void mlp_matmul_as(
        int64_t rows, int64_t n_in, int64_t n_out, int64_t ldw, const float *__restrict__ x,
        const float *__restrict__ w, const float *__restrict__ b, float *__restrict__ y,
        const float *__restrict__ gate, int act) {
    const int64_t full_j = n_out - n_out % 16, full_i = rows - rows % MLP_TILE_ROWS;
    const int tail = (int)(rows - full_i);
    int64_t i, j, k;
    for (i = 0; i < full_i; i += MLP_TILE_ROWS) {
        for (j = 0; j + 32 <= full_j; j += 32)
            mlp_tile(n_in, n_out, ldw, x, w, b, y, gate, i, j, 2, act, MLP_TILE_ROWS);
        if (j < full_j) mlp_tile(n_in, n_out, ldw, x, w, b, y, gate, i, j, 1, act, MLP_TILE_ROWS);
    }
    if (tail) {
        for (j = 0; j + 32 <= full_j; j += 32)
            mlp_tile(n_in, n_out, ldw, x, w, b, y, gate, full_i, j, 2, act, tail);
        if (j < full_j) mlp_tile(n_in, n_out, ldw, x, w, b, y, gate, full_i, j, 1, act, tail);
    }
    for (i = 0; i < rows; i++)
        for (j = full_j; j < n_out; j++) {
            float sum = b ? b[j] : 0.0f;
            for (k = 0; k < n_in; k++) sum += x[i * n_in + k] * w[k * ldw + j];
            y[i * n_out + j] = mlp_gate1(sum, act >= MLP_DRELU ? gate[i * n_out + j] : 0.0f, act);
        }
}

/* The activation a compile-time constant in each copy, so that a tile's sums stay in
 * registers from the bias to the store (with it a variable, GCC kept them on the stack).
 * `gate` (rows, n_out): the activation's output for MLP_DRELU and MLP_DTANH, else unread. */
MLP_CLONES static void mlp_matmul(int64_t rows, int64_t n_in, int64_t n_out, int64_t ldw,
                                  const float *__restrict__ x, const float *__restrict__ w,
                                  const float *__restrict__ b, float *__restrict__ y,
                                  const float *__restrict__ gate, int act) {
    switch (act) {
    case MLP_RELU: mlp_matmul_as(rows, n_in, n_out, ldw, x, w, b, y, gate, MLP_RELU); break;
    case MLP_TANH: mlp_matmul_as(rows, n_in, n_out, ldw, x, w, b, y, gate, MLP_TANH); break;
    case MLP_DRELU: mlp_matmul_as(rows, n_in, n_out, ldw, x, w, b, y, gate, MLP_DRELU); break;
    case MLP_DTANH: mlp_matmul_as(rows, n_in, n_out, ldw, x, w, b, y, gate, MLP_DTANH); break;
    default: mlp_matmul_as(rows, n_in, n_out, ldw, x, w, b, y, gate, MLP_LINEAR);
    }
}

/* Four inputs' rows of g (stride ldg) at columns j.. j + 16 * chunks += x^T dy over the rows,
 * the sums in registers, in row order. */
static inline __attribute__((always_inline)) void mlp_tn_tile(int64_t rows, int64_t n_in, int64_t n_out, int64_t ldg,
                               const float *__restrict__ x, const float *__restrict__ dy,
                               float *__restrict__ g, int64_t k, int64_t j, int chunks) {
    mlp_v16 sums[4][2] = {{{0}}};
    int64_t i;
    int r, c;
    for (i = 0; i < rows; i++) {
        const float *xi = x + i * n_in + k;
        for (c = 0; c < chunks; c++) {
            const mlp_v16 d = mlp_load(dy + i * n_out + j + 16 * c);
            for (r = 0; r < 4; r++) sums[r][c] += xi[r] * d;
        }
    }
    for (r = 0; r < 4; r++)
        for (c = 0; c < chunks; c++) {
            float *at = g + (k + r) * ldg + j + 16 * c;
            mlp_store(at, mlp_load(at) + sums[r][c]);
        }
}

/* g (n_in rows of stride ldg) += x^T dy, x (rows, n_in), dy (rows, n_out), n_out >= 16:
 * tiles of 4 inputs x 32 (or 16) outputs; what is left over, one sum at a time (each in row
 * order, as the tiles). */
MLP_CLONES static void mlp_matmul_tn(int64_t rows, int64_t n_in, int64_t n_out, int64_t ldg,
                                     const float *__restrict__ x, const float *__restrict__ dy,
                                     float *__restrict__ g) {
    const int64_t full_j = n_out - n_out % 16, full_k = n_in - n_in % 4;
    int64_t i, j, k;
    for (k = 0; k < full_k; k += 4) {
        for (j = 0; j + 32 <= full_j; j += 32) mlp_tn_tile(rows, n_in, n_out, ldg, x, dy, g, k, j, 2);
        if (j < full_j) mlp_tn_tile(rows, n_in, n_out, ldg, x, dy, g, k, j, 1);
    }
    for (k = 0; k < n_in; k++)
        for (j = k < full_k ? full_j : 0; j < n_out; j++) {
            float sum = 0.0f;
            for (i = 0; i < rows; i++) sum += x[i * n_in + k] * dy[i * n_out + j];
            g[k * ldg + j] += sum;
        }
}

/* gb (n,) += the column sums of dy (rows, n), in row order. */
MLP_CLONES static void mlp_column_sums(int64_t rows, int64_t n, const float *__restrict__ dy,
                                       float *__restrict__ gb) {
    int64_t i, j;
    for (i = 0; i < rows; i++)
        for (j = 0; j < n; j++) gb[j] += dy[i * n + j];
}

/* The first layer over byte rows, sparse: y[r] = b + sum over row r's nonzero inputs k of
 * v_k W[k] (W (n_in, ldw) row-major, its first n_out columns used; the caller applies the
 * activation); row r's entries are xi/xv[xoff[r] .. xoff[r + 1]), in input order. A MinAtar frame has
 * 3-10% of its bytes set, so this reads a tenth of the dense layer's weights. */
MLP_CLONES static void mlp_sparse_affine(int64_t rows, int64_t n_out, int64_t ldw,
                                         const int64_t *__restrict__ xoff,
                                         const int32_t *__restrict__ xi,
                                         const float *__restrict__ xv,
                                         const float *__restrict__ w,
                                         const float *__restrict__ b, float *__restrict__ y) {
    int64_t r, e, j, j0;
    for (r = 0; r < rows; r++) {
        float *__restrict__ yr = y + r * n_out;
        /* 64 outputs at a time in four vector registers, summed over the row's entries and
         * stored once (a row kept in memory made each entry a store-to-load round trip) */
        for (j0 = 0; j0 + 4 * MLP_LANES <= n_out; j0 += 4 * MLP_LANES) {
            mlp_v16 a0 = mlp_load(b + j0), a1 = mlp_load(b + j0 + MLP_LANES);
            mlp_v16 a2 = mlp_load(b + j0 + 2 * MLP_LANES), a3 = mlp_load(b + j0 + 3 * MLP_LANES);
            for (e = xoff[r]; e < xoff[r + 1]; e++) {
                const mlp_v16 v = mlp_splat(xv[e]);
                const float *wk = w + (int64_t)xi[e] * ldw + j0;
                a0 += v * mlp_load(wk);
                a1 += v * mlp_load(wk + MLP_LANES);
                a2 += v * mlp_load(wk + 2 * MLP_LANES);
                a3 += v * mlp_load(wk + 3 * MLP_LANES);
            }
            mlp_store(yr + j0, a0);
            mlp_store(yr + j0 + MLP_LANES, a1);
            mlp_store(yr + j0 + 2 * MLP_LANES, a2);
            mlp_store(yr + j0 + 3 * MLP_LANES, a3);
        }
        for (j = j0; j < n_out; j++) yr[j] = b[j];
        for (e = xoff[r]; e < xoff[r + 1] && j0 < n_out; e++) {
            const float v = xv[e], *__restrict__ wk = w + (int64_t)xi[e] * ldw;
            for (j = j0; j < n_out; j++) yr[j] += v * wk[j];
        }
    }
}

/* That layer's weight gradient: g[k] += v_k dy[r] for every row's nonzero inputs, in row
 * order (the rows a dense product would sum over, the zero terms left out). */
MLP_CLONES static void mlp_sparse_grad(int64_t rows, int64_t n_out, int64_t ldg,
                                       const int64_t *__restrict__ xoff,
                                       const int32_t *__restrict__ xi,
                                       const float *__restrict__ xv,
                                       const float *__restrict__ dy, float *__restrict__ g) {
    int64_t r, e, j;
    for (r = 0; r < rows; r++) {
        const float *__restrict__ dr = dy + r * n_out;
        for (e = xoff[r]; e < xoff[r + 1]; e++) {
            const float v = xv[e];
            float *__restrict__ gk = g + (int64_t)xi[e] * ldg;
            for (j = 0; j < n_out; j++) gk[j] += v * dr[j];
        }
    }
}

/* The four sums of a, b, c and d's lanes, in lanes 0, 4, 8 and 12: halves added pairwise
 * (a fixed order: lane l + lane l + 8, then + 4, + 2, + 1), four reductions sharing each
 * shuffle and add. */
MLP_VECTOR mlp_v16 mlp_sum4(mlp_v16 a, mlp_v16 b, mlp_v16 c, mlp_v16 d) {
    const mlp_i16 lo8 = {0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23};
    const mlp_i16 hi8 = {8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31};
    const mlp_i16 lo4 = {0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27};
    const mlp_i16 hi4 = {4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31};
    const mlp_i16 by2 = {2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13};
    const mlp_i16 by1 = {1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14};
    const mlp_v16 ab = __builtin_shuffle(a, b, lo8) + __builtin_shuffle(a, b, hi8);
    const mlp_v16 cd = __builtin_shuffle(c, d, lo8) + __builtin_shuffle(c, d, hi8);
    mlp_v16 all = __builtin_shuffle(ab, cd, lo4) + __builtin_shuffle(ab, cd, hi4);
    all = all + __builtin_shuffle(all, by2);
    return all + __builtin_shuffle(all, by1);
}

/* Outputs j .. j + m of `nrows` rows from row i (m <= 4 and nrows <= 4, constants where
 * inlined): dot products with rows of wt, 16 inputs a step sharing the loads of wt between
 * the rows, each reduced by mlp_sum4, leftover inputs one by one. */
static inline __attribute__((always_inline)) void mlp_narrow_rows(
        int64_t n_in, int64_t n_out, const float *__restrict__ x, const float *__restrict__ wt,
        const float *__restrict__ b, float *__restrict__ y, int64_t i, int64_t j, int m,
        int nrows) {
    const int64_t full_k = n_in - n_in % 16;
    mlp_v16 acc[4][4] = {{{0}}}, sums;
    int64_t k;
    int q, r;
    for (k = 0; k < full_k; k += 16) {
        mlp_v16 xr[4];
#pragma GCC unroll 4
        for (r = 0; r < nrows; r++) xr[r] = mlp_load(x + (i + r) * n_in + k);
#pragma GCC unroll 4
        for (q = 0; q < m; q++) {
            const mlp_v16 wq = mlp_load(wt + (j + q) * n_in + k);
#pragma GCC unroll 4
            for (r = 0; r < nrows; r++) acc[r][q] += xr[r] * wq;
        }
    }
#pragma GCC unroll 4
    for (r = 0; r < nrows; r++) {
        const float *xi = x + (i + r) * n_in;
        sums = mlp_sum4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
        for (q = 0; q < m; q++) {
            float sum = sums[4 * q];
            for (k = full_k; k < n_in; k++) sum += xi[k] * wt[(j + q) * n_in + k];
            y[(i + r) * n_out + j + q] = b[j + q] + sum;
        }
    }
}

static inline __attribute__((always_inline)) void mlp_narrow_as(
        int64_t rows, int64_t n_in, int64_t n_out, const float *__restrict__ x,
        const float *__restrict__ wt, const float *__restrict__ b, float *__restrict__ y,
        int64_t j, int m) {
    int64_t i;
    for (i = 0; i + 4 <= rows; i += 4) mlp_narrow_rows(n_in, n_out, x, wt, b, y, i, j, m, 4);
    for (; i < rows; i++) mlp_narrow_rows(n_in, n_out, x, wt, b, y, i, j, m, 1);
}

/* y (rows, n_out) = x @ W + b for a few outputs: dot products of each row with rows of
 * wt = W transposed (n_out, n_in), up to four outputs at a time (the count a constant in
 * each copy: no lanes summed for outputs that are not there), four rows sharing each load
 * of wt. Every row's sums are made in the same order wherever it falls. */
MLP_CLONES static void mlp_affine_narrow(int64_t rows, int64_t n_in, int64_t n_out,
                                         const float *__restrict__ x,
                                         const float *__restrict__ wt,
                                         const float *__restrict__ b, float *__restrict__ y) {
    int64_t j;
    for (j = 0; j < n_out; j += 4) {
        switch (n_out - j < 4 ? n_out - j : 4) {
        case 1: mlp_narrow_as(rows, n_in, n_out, x, wt, b, y, j, 1); break;
        case 2: mlp_narrow_as(rows, n_in, n_out, x, wt, b, y, j, 2); break;
        case 3: mlp_narrow_as(rows, n_in, n_out, x, wt, b, y, j, 3); break;
        default: mlp_narrow_as(rows, n_in, n_out, x, wt, b, y, j, 4);
        }
    }
}

/* gt (n_out, n_in) += dy^T x, vectorised along the inputs: a narrow layer's weight gradient,
 * transposed; gb += column sums of dy. Up to four outputs and 64 inputs at a time, their sums
 * in registers over all the rows (each in row order, then added to gt); leftover inputs one
 * by one. */
MLP_CLONES static void mlp_grad_narrow(int64_t rows, int64_t n_in, int64_t n_out,
                                       const float *__restrict__ x, const float *__restrict__ dy,
                                       float *__restrict__ gt, float *__restrict__ gb) {
    const int64_t full_k = n_in - n_in % 16;
    int64_t i, k, j, k0, q;
    for (i = 0; i < rows; i++)
        for (j = 0; j < n_out; j++) gb[j] += dy[i * n_out + j];
    for (j = 0; j < n_out; j += 4) {
        const int m = n_out - j < 4 ? (int)(n_out - j) : 4;
        for (k0 = 0; k0 < full_k; k0 += 64) {
            const int chunks = full_k - k0 < 64 ? (int)(full_k - k0) / 16 : 4;
            mlp_v16 acc[4][4] = {{{0}}};
            int c;
            for (i = 0; i < rows; i++) {
                const float *xi = x + i * n_in + k0, *dyi = dy + i * n_out + j;
#pragma GCC unroll 4
                for (c = 0; c < 4; c++) {
                    mlp_v16 xk;
                    if (c >= chunks) break;
                    xk = mlp_load(xi + 16 * c);
#pragma GCC unroll 4
                    for (q = 0; q < 4; q++)
                        if (q < m) acc[q][c] += dyi[q] * xk;
                }
            }
            for (q = 0; q < m; q++)
                for (c = 0; c < chunks; c++) {
                    float *at = gt + (j + q) * n_in + k0 + 16 * c;
                    mlp_store(at, mlp_load(at) + acc[q][c]);
                }
        }
        for (q = 0; q < m; q++)
            for (k = full_k; k < n_in; k++) {
                float sum = 0.0f;
                for (i = 0; i < rows; i++) sum += dy[i * n_out + j + q] * x[i * n_in + k];
                gt[(j + q) * n_in + k] += sum;
            }
    }
}

/* dx (rows, n_in) = dy (rows, n_out) @ wt (n_out, n_in), vectorised along the inputs. */
MLP_CLONES static void mlp_input_grad(int64_t rows, int64_t n_in, int64_t n_out,
                                      const float *__restrict__ dy, const float *__restrict__ wt,
                                      float *__restrict__ dx) {
    int64_t i, k, j;
    for (i = 0; i < rows; i++) {
        float *dxi = dx + i * n_in;
        for (k = 0; k < n_in; k++) dxi[k] = 0.0f;
        for (j = 0; j < n_out; j++) {
            const float dyij = dy[i * n_out + j];
            const float *wj = wt + j * n_in;
            for (k = 0; k < n_in; k++) dxi[k] += dyij * wj[k];
        }
    }
}

#endif

/* The PPO minibatch step of a small MLP actor-critic, fused: forward, the clipped loss's
 * analytic gradient, the global-norm clip and Adam, in float32 with no allocation and no GIL.
 *
 * Layering: this header is plain C (no Python); cext/fused_mlp.pyx owns the buffers and calls
 * it without the GIL; operant.trainer.fused decides when it is used, and torch autograd
 * (operant.trainer.ppo) stays the reference it is tested against.
 *
 * The network is operant.trainer.policy.ActorCritic with a categorical head: one tower
 * (shared: its last layer's columns are the logits then the value) or two (separate: actor,
 * critic). Every parameter is read from, and every gradient written to, one flat buffer at
 * the offsets of an `mlp_layer` table, so FlatParameters and FlatAdam see nothing new.
 *
 * Loops are written so that GCC vectorises them without reassociating: the inner loop runs
 * over independent outputs, and the few reductions (dot products, the gradient norm) keep
 * MLP_LANES explicit partial sums, so their order is fixed by the code, not by the compiler. Each hot loop is compiled for AVX-512, AVX2 and the
 * baseline and picked at load time (no -march in a build that ships).
 */
#ifndef OPERANT_FUSED_MLP_H
#define OPERANT_FUSED_MLP_H

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

/* One layer's place in the flat buffer: weight (n_in, ldw) row-major of which the first n_out
 * columns are used, bias (n_out,). Five int64 per layer, as the Python side packs them. */
typedef struct {
    int64_t w, ldw, b, n_in, n_out;
} mlp_layer;

typedef struct {
    const mlp_layer *layers; /* towers x depth */
    int64_t towers, depth, obs_dim, num_actions;
    int relu; /* else tanh */
    float clip_coef, vf_coef, ent_coef;
    int norm_adv, clip_vloss;
} mlp_spec;

/* One rollout, flattened (B, ...), read through a permutation. */
typedef struct {
    const float *obs;
    const int64_t *actions;
    const float *logprobs, *advantages, *returns, *values;
} mlp_batch;

/* Scratch carved from one float buffer for `rows` rows (mlp_scratch_floats says how long). */
typedef struct {
    int64_t rows, width, weights;
    float *x, *acts, *dy, *dx, *wt, *gt, *logp, *prob, *adv, *dlogp, *dvalue, *entropy;
} mlp_scratch;

static inline const mlp_layer *mlp_at(const mlp_spec *s, int64_t tower, int64_t l) {
    return &s->layers[tower * s->depth + l];
}

static int64_t mlp_widest(const mlp_spec *s, int64_t *weights) {
    int64_t width = s->obs_dim, most = 0, i;
    for (i = 0; i < s->towers * s->depth; i++) {
        const mlp_layer *L = &s->layers[i];
        if (L->n_out > width) width = L->n_out;
        if (L->n_in > width) width = L->n_in;
        if (L->n_in * L->n_out > most) most = L->n_in * L->n_out;
    }
    *weights = most;
    return width;
}

static int64_t mlp_act_floats(const mlp_spec *s, int64_t rows) {
    int64_t i, total = 0;
    for (i = 0; i < s->towers * s->depth; i++) total += rows * s->layers[i].n_out;
    return total;
}

static int64_t mlp_scratch_floats(const mlp_spec *s, int64_t rows) {
    int64_t weights, width = mlp_widest(s, &weights);
    return rows * s->obs_dim + mlp_act_floats(s, rows) + 2 * rows * width + 2 * weights +
           2 * rows * s->num_actions + 5 * rows;
}

static mlp_scratch mlp_carve(const mlp_spec *s, float *buffer, int64_t rows) {
    mlp_scratch w;
    w.rows = rows;
    w.width = mlp_widest(s, &w.weights);
    w.x = buffer;
    w.acts = w.x + rows * s->obs_dim;
    w.dy = w.acts + mlp_act_floats(s, rows);
    w.dx = w.dy + rows * w.width;
    w.wt = w.dx + rows * w.width;
    w.gt = w.wt + w.weights;
    w.logp = w.gt + w.weights;
    w.prob = w.logp + rows * s->num_actions;
    w.adv = w.prob + rows * s->num_actions;
    w.dlogp = w.adv + rows;
    w.dvalue = w.dlogp + rows;
    w.entropy = w.dvalue + rows;
    return w;
}

/* Layer l's activations (rows, n_out) of `tower`, inside the scratch. */
static float *mlp_acts(const mlp_spec *s, const mlp_scratch *w, int64_t tower, int64_t l) {
    float *at = w->acts;
    int64_t i, index = tower * s->depth + l;
    for (i = 0; i < index; i++) at += w->rows * s->layers[i].n_out;
    return at;
}

/* -- vectorisable elementwise kernels ------------------------------------------------------ */

/* exp(x) for float32, x in [-88, 88], with Cephes' range reduction and polynomial (about
 * 1 ulp), written branch-free so that a loop over it vectorises (libm's expf does not). */
static inline float mlp_exp(float x) {
    float n, r, p;
    union {
        int32_t bits;
        float value;
    } two_n;
    /* round(x / ln 2) to nearest by adding and removing 1.5 * 2^23 (floorf would not
     * vectorise under strict IEEE rules) */
    n = x * 1.44269504088896341f + 12582912.0f;
    n = n - 12582912.0f;
    r = x - n * 0.693359375f;
    r = r + n * 2.12194440e-4f;
    p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    two_n.bits = ((int32_t)n + 127) << 23;
    return p * two_n.value;
}

/* tanh as Eigen computes it for float: an odd degree-13 over an even degree-6 polynomial on
 * [-7.9, 7.9] (clamped outside), within 4e-7 of the exact value; one division and no exp. */
MLP_CLONES static void mlp_tanh(int64_t n, float *__restrict__ x) {
    const float bound = 7.90531110763549805f;
    int64_t i;
    for (i = 0; i < n; i++) {
        const float v = x[i] > bound ? bound : (x[i] < -bound ? -bound : x[i]);
        const float v2 = v * v;
        float p = -2.76076847742355e-16f, q = 1.19825839466702e-06f;
        p = p * v2 + 2.00018790482477e-13f;
        p = p * v2 + -8.60467152213735e-11f;
        p = p * v2 + 5.12229709037114e-08f;
        p = p * v2 + 1.48572235717979e-05f;
        p = p * v2 + 6.37261928875436e-04f;
        p = p * v2 + 4.89352455891786e-03f;
        q = q * v2 + 1.18534705686654e-04f;
        q = q * v2 + 2.26843463243900e-03f;
        q = q * v2 + 4.89352518554385e-03f;
        x[i] = v * p / q;
    }
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

/* A dot product with MLP_LANES partial sums (a fixed order that vectorises). */
static inline float mlp_dot(int64_t n, const float *__restrict__ a, const float *__restrict__ b) {
    float lanes[MLP_LANES] = {0};
    float sum = 0.0f;
    int64_t k = 0, l;
    for (; k + MLP_LANES <= n; k += MLP_LANES)
        for (l = 0; l < MLP_LANES; l++) lanes[l] += a[k + l] * b[k + l];
    for (l = 0; l < MLP_LANES / 2; l++) lanes[l] += lanes[l + MLP_LANES / 2];
    for (l = 0; l < MLP_LANES / 4; l++) lanes[l] += lanes[l + MLP_LANES / 4];
    for (l = 0; l < MLP_LANES / 8; l++) lanes[l] += lanes[l + MLP_LANES / 8];
    sum = lanes[0] + lanes[1];
    for (; k < n; k++) sum += a[k] * b[k];
    return sum;
}

/* -- matrix kernels ------------------------------------------------------------------------ */

/* 16 floats as one value (GCC's vector extension: a ZMM register under AVX-512, two YMM under
 * AVX2, four XMM otherwise), so that a tile's sums stay in registers; unaligned, and allowed
 * to alias the floats it is loaded from. */
typedef float mlp_v16 __attribute__((vector_size(64), aligned(4), may_alias));

static inline mlp_v16 mlp_load(const float *p) {
    mlp_v16 v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void mlp_store(float *p, mlp_v16 v) { memcpy(p, &v, sizeof v); }

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
        int64_t i, int64_t j, int chunks) {
    mlp_v16 sums[MLP_TILE_ROWS][2];
    const float *xi = x + i * n_in;
    int64_t k;
    int r, c;
    for (c = 0; c < chunks; c++) {
        mlp_v16 start = {0};
        if (b) start = mlp_load(b + j + 16 * c);
        for (r = 0; r < MLP_TILE_ROWS; r++) sums[r][c] = start;
    }
    for (k = 0; k < n_in; k++)
        for (c = 0; c < chunks; c++) {
            const mlp_v16 wk = mlp_load(w + k * ldw + j + 16 * c);
            for (r = 0; r < MLP_TILE_ROWS; r++) sums[r][c] += xi[r * n_in + k] * wk;
        }
    for (r = 0; r < MLP_TILE_ROWS; r++)
        for (c = 0; c < chunks; c++) mlp_store(y + (i + r) * n_out + j + 16 * c, sums[r][c]);
}

/* y (rows, n_out) = x (rows, n_in) @ W (n_in rows of stride ldw) [+ b], for n_out >= 16:
 * tiles of 8 rows x 32 (or 16) outputs; leftover rows and columns take the plain loop, in
 * the same order. */
MLP_CLONES static void mlp_matmul(int64_t rows, int64_t n_in, int64_t n_out, int64_t ldw,
                                  const float *__restrict__ x, const float *__restrict__ w,
                                  const float *__restrict__ b, float *__restrict__ y) {
    const int64_t full_j = n_out - n_out % 16, full_i = rows - rows % MLP_TILE_ROWS;
    int64_t i, j, k;
    for (i = 0; i < full_i; i += MLP_TILE_ROWS) {
        for (j = 0; j + 32 <= full_j; j += 32) mlp_tile(n_in, n_out, ldw, x, w, b, y, i, j, 2);
        if (j < full_j) mlp_tile(n_in, n_out, ldw, x, w, b, y, i, j, 1);
    }
    for (i = 0; i < rows; i++)
        for (j = i < full_i ? full_j : 0; j < n_out; j++) {
            float sum = b ? b[j] : 0.0f;
            for (k = 0; k < n_in; k++) sum += x[i * n_in + k] * w[k * ldw + j];
            y[i * n_out + j] = sum;
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

/* The same for a few outputs: each a dot product with a row of wt = W transposed. */
MLP_CLONES static void mlp_affine_narrow(int64_t rows, int64_t n_in, int64_t n_out,
                                         const float *__restrict__ x,
                                         const float *__restrict__ wt,
                                         const float *__restrict__ b, float *__restrict__ y) {
    int64_t i, j;
    for (i = 0; i < rows; i++)
        for (j = 0; j < n_out; j++) y[i * n_out + j] = b[j] + mlp_dot(n_in, x + i * n_in, wt + j * n_in);
}

/* gt (n_out, n_in) = dy^T x (zeroed first), vectorised along the inputs: a narrow layer's
 * weight gradient, transposed; gb += column sums of dy. */
MLP_CLONES static void mlp_grad_narrow(int64_t rows, int64_t n_in, int64_t n_out,
                                       const float *__restrict__ x, const float *__restrict__ dy,
                                       float *__restrict__ gt, float *__restrict__ gb) {
    int64_t i, k, j;
    memset(gt, 0, sizeof(float) * n_in * n_out);
    for (i = 0; i < rows; i++) {
        const float *xi = x + i * n_in;
        for (j = 0; j < n_out; j++) {
            const float dyij = dy[i * n_out + j];
            float *gj = gt + j * n_in;
            gb[j] += dyij;
            for (k = 0; k < n_in; k++) gj[k] += dyij * xi[k];
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

/* -- the network --------------------------------------------------------------------------- */

static void mlp_layer_forward(const mlp_spec *s, const mlp_scratch *w, const mlp_layer *L,
                              const float *param, const float *x, float *y, int last) {
    if (L->n_out < MLP_NARROW) {
        mlp_transpose(L->n_in, L->n_out, L->ldw, param + L->w, w->wt);
        mlp_affine_narrow(w->rows, L->n_in, L->n_out, x, w->wt, param + L->b, y);
    } else {
        mlp_matmul(w->rows, L->n_in, L->n_out, L->ldw, x, param + L->w, param + L->b, y);
    }
    if (last) return;
    if (s->relu)
        mlp_relu(w->rows * L->n_out, y);
    else
        mlp_tanh(w->rows * L->n_out, y);
}

/* Every tower's activations for the rows in w->x. */
static void mlp_forward(const mlp_spec *s, const mlp_scratch *w, const float *param,
                        int64_t towers) {
    int64_t t, l;
    for (t = 0; t < towers; t++) {
        const float *x = w->x;
        for (l = 0; l < s->depth; l++) {
            float *y = mlp_acts(s, w, t, l);
            mlp_layer_forward(s, w, mlp_at(s, t, l), param, x, y, l == s->depth - 1);
            x = y;
        }
    }
}

/* One layer's backward: weight and bias gradients from w->dy (rows, n_out), and, below the
 * first layer, the gradient of its input into w->dx. */
static void mlp_layer_backward(const mlp_scratch *w, const mlp_layer *L, const float *param,
                               float *grad, const float *x, int need_dx) {
    int64_t k, j;
    if (L->n_out < MLP_NARROW) {
        mlp_grad_narrow(w->rows, L->n_in, L->n_out, x, w->dy, w->gt, grad + L->b);
        for (k = 0; k < L->n_in; k++)
            for (j = 0; j < L->n_out; j++) grad[L->w + k * L->ldw + j] += w->gt[j * L->n_in + k];
    } else {
        mlp_matmul_tn(w->rows, L->n_in, L->n_out, L->ldw, x, w->dy, grad + L->w);
        mlp_column_sums(w->rows, L->n_out, w->dy, grad + L->b);
    }
    if (!need_dx) return;
    mlp_transpose(L->n_in, L->n_out, L->ldw, param + L->w, w->wt);
    if (L->n_in >= 16)
        mlp_matmul(w->rows, L->n_out, L->n_in, L->n_in, w->dy, w->wt, NULL, w->dx);
    else
        mlp_input_grad(w->rows, L->n_in, L->n_out, w->dy, w->wt, w->dx);
}

/* Backward through one tower, w->dy holding the gradient of its last layer's output. */
static void mlp_tower_backward(const mlp_spec *s, const mlp_scratch *w, const float *param,
                               float *grad, int64_t tower) {
    int64_t l;
    for (l = s->depth - 1; l >= 0; l--) {
        const mlp_layer *L = mlp_at(s, tower, l);
        const float *x = l > 0 ? mlp_acts(s, w, tower, l - 1) : w->x;
        mlp_layer_backward(w, L, param, grad, x, l > 0);
        if (l > 0) {
            memcpy(w->dy, w->dx, sizeof(float) * w->rows * L->n_in);
            mlp_activation_backward(w->rows * L->n_in, s->relu, x, w->dy);
        }
    }
}

/* Row i's logits and value, wherever the towers put them. */
static const float *mlp_logits(const mlp_spec *s, const mlp_scratch *w, int64_t i) {
    const mlp_layer *L = mlp_at(s, 0, s->depth - 1);
    return mlp_acts(s, w, 0, s->depth - 1) + i * L->n_out;
}

static float mlp_value(const mlp_spec *s, const mlp_scratch *w, int64_t i) {
    if (s->towers == 1) return mlp_logits(s, w, i)[s->num_actions];
    return mlp_acts(s, w, 1, s->depth - 1)[i];
}

/* exp of n values in place, each at least -87 (exp's range; softmax's shifted logits). */
MLP_CLONES static void mlp_exp_block(int64_t n, float *__restrict__ x) {
    int64_t i;
    for (i = 0; i < n; i++) x[i] = mlp_exp(x[i] > -87.0f ? x[i] : -87.0f);
}

/* Every row's log_softmax (w->logp), softmax (w->prob) and entropy (w->entropy) from the
 * logits of the first w->rows rows: the exponentials in one vectorised pass. */
static void mlp_softmax(const mlp_spec *s, const mlp_scratch *w) {
    const int64_t n = s->num_actions, rows = w->rows;
    int64_t i, j;
    for (i = 0; i < rows; i++) {
        const float *logits = mlp_logits(s, w, i);
        float most = logits[0];
        for (j = 1; j < n; j++) most = logits[j] > most ? logits[j] : most;
        for (j = 0; j < n; j++) w->logp[i * n + j] = w->prob[i * n + j] = logits[j] - most;
    }
    mlp_exp_block(rows * n, w->prob);
    for (i = 0; i < rows; i++) {
        float *logp = w->logp + i * n, *prob = w->prob + i * n;
        float sum = 0.0f, log_sum, entropy = 0.0f;
        for (j = 0; j < n; j++) sum += prob[j];
        log_sum = logf(sum);
        for (j = 0; j < n; j++) {
            logp[j] -= log_sum;
            prob[j] /= sum;
            entropy -= prob[j] * logp[j];
        }
        w->entropy[i] = entropy;
    }
}

#endif

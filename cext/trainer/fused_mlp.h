/* The PPO minibatch step of a small MLP actor-critic, fused: forward, the clipped loss's
 * analytic gradient, the global-norm clip and Adam, in float32 with no allocation and no GIL.
 *
 * Layering: this header is plain C (no Python); cext/trainer/fused_mlp.pyx owns the buffers and calls
 * it without the GIL; operant.trainer.loop.fused decides when it is used, and torch autograd
 * (operant.trainer.loop.ppo) stays the reference it is tested against.
 *
 * The network is operant.trainer.policies.mlp.ActorCritic with a categorical head, or a diagonal
 * Gaussian one (`continuous`: the actor's outputs are the means, and one learned log standard
 * deviation per action dimension sits in the flat buffer at `log_std`): one tower (shared:
 * its last layer's columns are the logits or means, then the value) or two (separate: actor,
 * critic). Every parameter is read from, and every gradient written to, one flat buffer at
 * the offsets of an `mlp_layer` table, so FlatParameters and FlatAdam see nothing new.
 *
 * Observations are float32 rows, or byte rows (`obs_u8`: frames and tokens, flattened) which
 * the first layer reads as they are: each call packs its rows' nonzero bytes (index, value)
 * into the scratch, and the first layer sums only their weight rows (mlp_sparse_affine),
 * forward and backward. No float copy of the batch is made, and a MinAtar frame's layer costs
 * its few set cells, not its 400-1,000 inputs.
 *
 * Loops are written so that GCC vectorises them without reassociating: the inner loop runs
 * over independent outputs, and the few reductions (dot products, the gradient norm) keep
 * MLP_LANES explicit partial sums, so their order is fixed by the code, not by the compiler.
 * The vectorised kernels themselves are in fused_kernels.h.
 */
#ifndef OPERANT_FUSED_MLP_H
#define OPERANT_FUSED_MLP_H

#include "fused_kernels.h"

/* One layer's place in the flat buffer: weight (n_in, ldw) row-major of which the first n_out
 * columns are used, bias (n_out,). Five int64 per layer, as the Python side packs them. */
typedef struct {
    int64_t w, ldw, b, n_in, n_out;
} mlp_layer;

typedef struct {
    const mlp_layer *layers; /* towers x depth */
    int64_t towers, depth, obs_dim, num_actions;
    int relu; /* else tanh */
    int continuous;  /* a Gaussian head over num_actions dimensions; else categorical */
    int64_t log_std; /* where the Gaussian's log standard deviations start in the buffer */
    int obs_u8;      /* byte rows, read sparse by the first layer; else float32 rows */
    float obs_scale; /* what byte rows' values are multiplied by (ObsSpec.scale) */
    float clip_coef, vf_coef, ent_coef;
    int norm_adv, clip_vloss;
} mlp_spec;

/* One rollout, flattened (B, ...), read through a permutation. */
typedef struct {
    const float *obs;      /* float32 rows, or NULL */
    const uint8_t *obs_u8; /* byte rows (mlp_spec.obs_u8), or NULL */
    const int64_t *actions;  /* categorical: one index per row, or NULL */
    const float *cactions;   /* Gaussian: (rows, num_actions) samples, or NULL */
    const float *logprobs, *advantages, *returns, *values;
} mlp_batch;

/* Scratch carved from one float buffer for a call on `total` rows (mlp_scratch_floats says
 * how long): their inputs and advantages, and room for one block of at most MLP_BLOCK rows
 * (activations, gradients, softmax), which the calls walk through block by block so that a
 * block's intermediates stay in the core's caches instead of streaming a whole minibatch's
 * through memory. A carved scratch describes its first block (`rows` rows); mlp_block moves
 * it along. */
#ifndef MLP_BLOCK
#define MLP_BLOCK 32
#endif
typedef struct {
    int64_t rows, total, width, weights, lanes;
    float *x, *acts, *dy, *dx, *wt, *gt, *logp, *prob, *adv, *dlogp, *dvalue, *entropy;
    float *cols; /* MLP_COLUMNS columns of a block's rows, for the loss (fused_ppo.h) */
    /* Byte rows, packed (obs_u8): the call's row r has entries xoff[r] .. xoff[r + 1] of xi
     * (input index) and xv (its value); xv is the call's x region, and a block's xoff starts
     * at its first row. NULL for float32 rows. */
    int64_t *xoff;
    int32_t *xi;
    float *xv;
} mlp_scratch;
/* wt: every layer's weight transposed (n_out, n_in), one after the other in layer order,
 * made once per call by mlp_prepare (the narrow layers' forward and every layer's input
 * gradient read them); gt: the narrow layers' weight gradients, transposed likewise, summed
 * over a call's blocks and added into the flat gradient once at its end.
 * The softmax and the loss run along a block's rows, MLP_LANES at a time: their arrays are
 * columns of `lanes` floats (the rows rounded up to a multiple of MLP_LANES, the rows past
 * the block's filled with zeros where they are read, so every row is computed by the same
 * code); logp and prob are (num_actions, lanes), action j's column; cols holds MLP_COLUMNS
 * more (fused_ppo.h's MLP_C_* names them). */
#define MLP_COLUMNS 11

static inline const mlp_layer *mlp_at(const mlp_spec *s, int64_t tower, int64_t l) {
    return &s->layers[tower * s->depth + l];
}

/* The widest layer's width; *weights: the weights of all layers together. */
static int64_t mlp_widest(const mlp_spec *s, int64_t *weights) {
    int64_t width = s->obs_dim, total = 0, i;
    for (i = 0; i < s->towers * s->depth; i++) {
        const mlp_layer *L = &s->layers[i];
        if (L->n_out > width) width = L->n_out;
        if (L->n_in > width) width = L->n_in;
        total += L->n_in * L->n_out;
    }
    *weights = total;
    return width;
}

/* Where layer l of `tower` starts in wt and gt. */
static int64_t mlp_weight_at(const mlp_spec *s, int64_t tower, int64_t l) {
    int64_t i, at = 0, index = tower * s->depth + l;
    for (i = 0; i < index; i++) at += s->layers[i].n_in * s->layers[i].n_out;
    return at;
}

static int64_t mlp_act_floats(const mlp_spec *s, int64_t rows) {
    int64_t i, total = 0;
    for (i = 0; i < s->towers * s->depth; i++) total += rows * s->layers[i].n_out;
    return total;
}

static int64_t mlp_block_rows(int64_t rows) { return rows < MLP_BLOCK ? rows : MLP_BLOCK; }

static int64_t mlp_lanes(int64_t rows) { return (rows + MLP_LANES - 1) / MLP_LANES * MLP_LANES; }

/* The packed byte rows' offsets (int64, two floats each) and indices (int32), at the
 * scratch's start (numpy's buffers are 16-byte aligned, so the offsets are 8-byte aligned). */
static int64_t mlp_packed_floats(const mlp_spec *s, int64_t rows) {
    return s->obs_u8 ? 2 * (rows + 1) + rows * s->obs_dim : 0;
}

/* A block's room: its activations and gradients, the narrow layers' transposed gradient
 * sums, the softmax and the loss's columns (what one thread works in). */
static int64_t mlp_room_floats(const mlp_spec *s, int64_t rows) {
    int64_t weights, width = mlp_widest(s, &weights), block = mlp_block_rows(rows);
    return mlp_act_floats(s, block) + 2 * block * width + weights +
           (2 * s->num_actions + 3 + MLP_COLUMNS) * mlp_lanes(block);
}

static int64_t mlp_scratch_floats(const mlp_spec *s, int64_t rows) {
    int64_t weights;
    mlp_widest(s, &weights);
    return mlp_packed_floats(s, rows) + rows * (s->obs_dim + 1) + weights +
           mlp_room_floats(s, rows);
}

/* A worker thread's floats beside a call's scratch (mlp_carve_worker): a room and a gradient
 * of n_params. */
static int64_t mlp_worker_floats(const mlp_spec *s, int64_t rows, int64_t n_params) {
    return mlp_room_floats(s, rows) + n_params;
}

/* w's room carved from `at`; returns the float after it. */
static float *mlp_carve_room(const mlp_spec *s, mlp_scratch *w, float *at) {
    w->acts = at;
    w->dy = w->acts + mlp_act_floats(s, w->rows);
    w->dx = w->dy + w->rows * w->width;
    w->gt = w->dx + w->rows * w->width;
    w->logp = w->gt + w->weights;
    w->prob = w->logp + w->lanes * s->num_actions;
    w->dlogp = w->prob + w->lanes * s->num_actions;
    w->dvalue = w->dlogp + w->lanes;
    w->entropy = w->dvalue + w->lanes;
    w->cols = w->entropy + w->lanes;
    return w->cols + MLP_COLUMNS * w->lanes;
}

static mlp_scratch mlp_carve(const mlp_spec *s, float *buffer, int64_t rows) {
    mlp_scratch w;
    const int64_t block = mlp_block_rows(rows), lanes = mlp_lanes(block);
    w.rows = block;
    w.lanes = lanes;
    w.total = rows;
    w.width = mlp_widest(s, &w.weights);
    w.xoff = s->obs_u8 ? (int64_t *)buffer : NULL;
    w.xi = s->obs_u8 ? (int32_t *)(buffer + 2 * (rows + 1)) : NULL;
    buffer += mlp_packed_floats(s, rows);
    w.x = buffer;
    w.xv = s->obs_u8 ? buffer : NULL;
    w.adv = w.x + rows * s->obs_dim;
    w.wt = w.adv + rows;
    mlp_carve_room(s, &w, w.wt + w.weights);
    return w;
}

/* A worker's scratch: the call's inputs, advantages and transposed weights shared with
 * `main`, a room of its own from `buffer`, and its gradient (*grad) after the room. */
static mlp_scratch mlp_carve_worker(const mlp_spec *s, const mlp_scratch *main, float *buffer,
                                    float **grad) {
    mlp_scratch w = *main;
    *grad = mlp_carve_room(s, &w, buffer);
    return w;
}

/* The block of rows start .. start + MLP_BLOCK (fewer at the end) of a carved scratch: its
 * inputs and advantages are those rows of the whole call's; everything else is the block
 * room, reused. */
static mlp_scratch mlp_block(const mlp_spec *s, const mlp_scratch *w, int64_t start) {
    mlp_scratch block = *w;
    block.rows = mlp_block_rows(w->total - start);
    block.lanes = mlp_lanes(block.rows);
    block.x = w->x + start * s->obs_dim;
    block.adv = w->adv + start;
    if (w->xoff) block.xoff = w->xoff + start;
    return block;
}

/* Row i of a call's rows, a byte row of obs_dim, packed (xoff[i] set before: 0 for row 0;
 * this sets xoff[i + 1]). Eight bytes at a time, so a frame's empty stretches cost a load. */
static void mlp_pack_row(const mlp_spec *s, const mlp_scratch *w, int64_t i, const uint8_t *row) {
    int64_t n = w->xoff[i], k = 0, j;
    const int64_t dim = s->obs_dim;
    for (; k < dim; k += 8) {
        const int64_t end = k + 8 < dim ? k + 8 : dim;
        uint64_t word = 0;
        memcpy(&word, row + k, (size_t)(end - k));
        if (!word) continue;
        for (j = k; j < end; j++)
            if (row[j]) {
                w->xi[n] = (int32_t)j;
                w->xv[n++] = (float)row[j] * s->obs_scale;
            }
    }
    w->xoff[i + 1] = n;
}

/* Layer l's activations (rows, n_out) of `tower`, inside the scratch. */
static float *mlp_acts(const mlp_spec *s, const mlp_scratch *w, int64_t tower, int64_t l) {
    float *at = w->acts;
    int64_t i, index = tower * s->depth + l;
    for (i = 0; i < index; i++) at += w->rows * s->layers[i].n_out;
    return at;
}

/* -- the network --------------------------------------------------------------------------- */

/* Whether layer l of a tower reads packed byte rows (the first, over byte observations): it
 * needs no transposed weight and passes no gradient to its input. */
static inline int mlp_sparse_layer(const mlp_spec *s, int64_t l) { return l == 0 && s->obs_u8; }

static void mlp_layer_forward(const mlp_spec *s, const mlp_scratch *w, const mlp_layer *L,
                              const float *param, const float *wt, const float *x, float *y,
                              int64_t l) {
    const int last = l == s->depth - 1;
    const int act = last ? MLP_LINEAR : (s->relu ? MLP_RELU : MLP_TANH);
    if (mlp_sparse_layer(s, l)) {
        mlp_sparse_affine(w->rows, L->n_out, L->ldw, w->xoff, w->xi, w->xv, param + L->w,
                          param + L->b, y);
    } else if (L->n_out >= MLP_NARROW) {
        mlp_matmul(w->rows, L->n_in, L->n_out, L->ldw, x, param + L->w, param + L->b, y, NULL,
                   act);
        return;
    } else {
        mlp_affine_narrow(w->rows, L->n_in, L->n_out, x, wt, param + L->b, y);
    }
    if (act == MLP_RELU)
        mlp_relu(w->rows * L->n_out, y);
    else if (act == MLP_TANH)
        mlp_tanh(w->rows * L->n_out, y);
}

/* Before a call's blocks, with the parameters it uses: every layer's transposed weight into
 * w->wt (the weights do not change inside a call). */
static void mlp_prepare(const mlp_spec *s, const mlp_scratch *w, const float *param) {
    int64_t i, at = 0;
    mlp_clean_upper();
    for (i = 0; i < s->towers * s->depth; i++) {
        const mlp_layer *L = &s->layers[i];
        if (!mlp_sparse_layer(s, i % s->depth))
            mlp_transpose(L->n_in, L->n_out, L->ldw, param + L->w, w->wt + at);
        at += L->n_in * L->n_out;
    }
}

/* One tower's activations for the rows in w->x (after mlp_prepare). */
static void mlp_forward_tower(const mlp_spec *s, const mlp_scratch *w, const float *param,
                              int64_t t) {
    const float *x = w->x;
    int64_t l;
    for (l = 0; l < s->depth; l++) {
        float *y = mlp_acts(s, w, t, l);
        mlp_layer_forward(s, w, mlp_at(s, t, l), param, w->wt + mlp_weight_at(s, t, l), x, y, l);
        x = y;
    }
}

/* The first `towers` towers' activations for the rows in w->x. */
static void mlp_forward(const mlp_spec *s, const mlp_scratch *w, const float *param,
                        int64_t towers) {
    int64_t t;
    for (t = 0; t < towers; t++) mlp_forward_tower(s, w, param, t);
}

/* One layer's backward: weight and bias gradients from dy (rows, n_out), and, below the
 * first layer, the gradient of its input's pre-activation into dx (rows, n_in): dy @ W^T
 * times the activation's derivative at x, the layer's input (NULL: the first layer over
 * packed byte rows). */
static void mlp_layer_backward(const mlp_spec *s, const mlp_scratch *w, const mlp_layer *L,
                               int64_t at, float *grad, const float *x, const float *dy,
                               float *dx) {
    const float *wt = w->wt + at;
    if (!x) { /* the first layer over packed byte rows (mlp_sparse_layer) */
        mlp_sparse_grad(w->rows, L->n_out, L->ldw, w->xoff, w->xi, w->xv, dy, grad + L->w);
        mlp_column_sums(w->rows, L->n_out, dy, grad + L->b);
        return;
    }
    if (L->n_out < MLP_NARROW) {
        mlp_grad_narrow(w->rows, L->n_in, L->n_out, x, dy, w->gt + at, grad + L->b);
    } else {
        mlp_matmul_tn(w->rows, L->n_in, L->n_out, L->ldw, x, dy, grad + L->w);
        mlp_column_sums(w->rows, L->n_out, dy, grad + L->b);
    }
    if (!dx) return;
    if (L->n_in >= 16) {
        mlp_matmul(w->rows, L->n_out, L->n_in, L->n_in, dy, wt, NULL, dx, x,
                   s->relu ? MLP_DRELU : MLP_DTANH);
    } else {
        mlp_input_grad(w->rows, L->n_in, L->n_out, dy, wt, dx);
        mlp_activation_backward(w->rows * L->n_in, s->relu, x, dx);
    }
}

/* After a call's blocks: the narrow layers' weight gradients (summed in w->gt, transposed)
 * added into the flat gradient. */
static void mlp_finish_gradient(const mlp_spec *s, const mlp_scratch *w, float *grad) {
    int64_t i, k, j, at = 0;
    for (i = 0; i < s->towers * s->depth; i++) {
        const mlp_layer *L = &s->layers[i];
        if (L->n_out < MLP_NARROW && !mlp_sparse_layer(s, i % s->depth))
            for (k = 0; k < L->n_in; k++)
                for (j = 0; j < L->n_out; j++)
                    grad[L->w + k * L->ldw + j] += w->gt[at + j * L->n_in + k];
        at += L->n_in * L->n_out;
    }
}

/* Backward through one tower, w->dy holding the gradient of its last layer's output (the
 * layers' gradients then pass between w->dy and w->dx, which it leaves in any order). */
static void mlp_tower_backward(const mlp_spec *s, const mlp_scratch *w, float *grad,
                               int64_t tower) {
    float *dy = w->dy, *dx = w->dx, *swap;
    int64_t l;
    for (l = s->depth - 1; l >= 0; l--) {
        const float *x = l > 0 ? mlp_acts(s, w, tower, l - 1) : s->obs_u8 ? NULL : w->x;
        mlp_layer_backward(s, w, mlp_at(s, tower, l), mlp_weight_at(s, tower, l), grad, x, dy,
                           l > 0 ? dx : NULL);
        swap = dy;
        dy = dx;
        dx = swap;
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

/* Every row's log_softmax (w->logp), softmax (w->prob) and entropy (w->entropy) from the
 * logits of the block's rows (stride `width`), 16 rows at a time, each row's arithmetic in
 * the order of a per-row loop (max, shift, exp, sum in action order, log, divide, entropy). */
MLP_CLONES static void mlp_softmax_rows(int64_t rows, int64_t lanes, int64_t n, int64_t width,
                                        const float *__restrict__ logits,
                                        float *__restrict__ logp, float *__restrict__ prob,
                                        float *__restrict__ entropy) {
    int64_t i, j;
    for (j = 0; j < n; j++) {
        for (i = 0; i < rows; i++) logp[j * lanes + i] = logits[i * width + j];
        for (; i < lanes; i++) logp[j * lanes + i] = 0.0f;
    }
    for (i = 0; i < lanes; i += MLP_LANES) {
        mlp_v16 most = mlp_load(logp + i), sum = {0}, log_sum, h = {0};
        for (j = 1; j < n; j++) {
            const mlp_v16 l = mlp_load(logp + j * lanes + i);
            most = mlp_select(l > most, l, most);
        }
        for (j = 0; j < n; j++) {
            const mlp_v16 shifted = mlp_load(logp + j * lanes + i) - most;
            const mlp_v16 p = mlp_exp16(mlp_select(shifted > -87.0f, shifted, mlp_splat(-87.0f)));
            mlp_store(logp + j * lanes + i, shifted);
            mlp_store(prob + j * lanes + i, p);
            sum += p;
        }
        log_sum = mlp_log16(sum); /* the sum is at least 1: one of its terms is exp(0) */
        for (j = 0; j < n; j++) {
            const mlp_v16 l = mlp_load(logp + j * lanes + i) - log_sum;
            const mlp_v16 p = mlp_load(prob + j * lanes + i) / sum;
            mlp_store(logp + j * lanes + i, l);
            mlp_store(prob + j * lanes + i, p);
            h -= p * l;
        }
        mlp_store(entropy + i, h);
    }
}

static void mlp_softmax(const mlp_spec *s, const mlp_scratch *w) {
    const mlp_layer *L = mlp_at(s, 0, s->depth - 1);
    mlp_softmax_rows(w->rows, w->lanes, s->num_actions, L->n_out,
                     mlp_acts(s, w, 0, s->depth - 1), w->logp, w->prob, w->entropy);
}

#endif

/* PPO's loss, its gradient at the network's heads, the clip and Adam, over fused_mlp.h's
 * network: the arithmetic of operant.trainer.loop.ppo._losses, FlatParameters.clip_grad_norm_ and
 * FlatAdam.step (operant.trainer.loop.flat), in their operation order where it is not a
 * reduction. Called from cext/trainer/fused_mlp.pyx without the GIL.
 *
 * The loss's subgradients are torch's: max(a, b) sends the gradient to the larger argument and
 * half to each on a tie; clamp passes it inside its closed range and nothing outside.
 */
#ifndef OPERANT_FUSED_PPO_H
#define OPERANT_FUSED_PPO_H

#include "fused_mlp.h"
#include "fused_pool.h"

/* FlatAdam's settings as the Python floats they are (its scalars are rounded to float32 where
 * torch rounds them: after the double arithmetic). */
typedef struct {
    double lr, beta1, beta2, eps, max_grad_norm;
} mlp_adam;

/* The minibatch's observations into w->x (byte rows: packed) and advantages into w->adv, in
 * `order`. */
static void mlp_gather(const mlp_spec *s, const mlp_scratch *w, const mlp_batch *b,
                       const int64_t *order) {
    int64_t i;
    if (s->obs_u8) w->xoff[0] = 0;
    for (i = 0; i < w->total; i++) {
        if (s->obs_u8)
            mlp_pack_row(s, w, i, b->obs_u8 + order[i] * s->obs_dim);
        else
            memcpy(w->x + i * s->obs_dim, b->obs + order[i] * s->obs_dim,
                   sizeof(float) * s->obs_dim);
        w->adv[i] = b->advantages[order[i]];
    }
}

/* (a - mean) / (std + 1e-8): this minibatch's moments (std with Bessel's correction, as
 * torch.std) or the given global ones. */
static void mlp_normalise(const mlp_scratch *w, const float *moments) {
    int64_t i, n = w->total;
    float mean, std;
    if (moments) {
        mean = moments[0];
        std = moments[1];
    } else {
        double sum = 0.0, squares = 0.0;
        for (i = 0; i < n; i++) sum += w->adv[i];
        mean = (float)(sum / n);
        for (i = 0; i < n; i++) squares += ((double)w->adv[i] - sum / n) * ((double)w->adv[i] - sum / n);
        std = (float)sqrt(squares / (n - 1));
    }
    for (i = 0; i < n; i++) w->adv[i] = (w->adv[i] - mean) / (std + 1e-8f);
}

/* d max(a, b) / d a, torch's way, for 16 pairs. */
MLP_VECTOR mlp_v16 mlp_max_share(mlp_v16 a, mlp_v16 b) {
    return mlp_select(a > b, mlp_splat(1.0f), mlp_select(a < b, mlp_splat(0.0f), mlp_splat(0.5f)));
}

/* 1 where lo <= x <= hi, else 0. */
MLP_VECTOR mlp_v16 mlp_inside(mlp_v16 x, float lo, float hi) {
    return mlp_select((x >= lo) & (x <= hi), mlp_splat(1.0f), mlp_splat(0.0f));
}

/* The columns of a block's rows the loss reads and writes, in w->cols: the taken action (as
 * a float), its old log-probability, the return, the old value, the new value, the
 * advantage, then the five statistics of each row. */
enum { MLP_C_ACTION, MLP_C_OLD_LOGP, MLP_C_RETURN, MLP_C_OLD_VALUE, MLP_C_VALUE, MLP_C_ADV,
       MLP_C_STATS };

_Static_assert(MLP_C_STATS + 5 <= MLP_COLUMNS, "the loss's columns fit the scratch's");

typedef struct {
    float clip_coef, vf_coef, scale;
    int clip_vloss;
} mlp_loss_terms;

/* 16 rows from i: the gradients of the loss with respect to each row's taken action's
 * log-probability (dlogp) and its value (dvalue), and each row's statistics (policy loss,
 * value loss, -, approx KL, clip fraction: columns of MLP_C_STATS, the third left to the
 * entropy). The ratio's exp has its argument held to [-87, 88], exp's float range: past 88.7
 * torch's ratio overflows to inf and its gradient to NaN, which stops the trainer on
 * non-finite parameters; here the ratio stays e^88 and the clip of the gradient's norm bounds
 * the step (a policy that far from the one that acted is lost either way). */
MLP_VECTOR void mlp_loss16(int64_t i, int64_t lanes, int64_t n, const mlp_loss_terms *t,
                           const float *logp, float *cols, float *dlogp, float *dvalue) {
    const float c = t->clip_coef, lo = 1.0f - c, hi = 1.0f + c;
    const mlp_v16 action = mlp_load(cols + MLP_C_ACTION * lanes + i);
    const mlp_v16 value = mlp_load(cols + MLP_C_VALUE * lanes + i);
    const mlp_v16 ret = mlp_load(cols + MLP_C_RETURN * lanes + i);
    const mlp_v16 old = mlp_load(cols + MLP_C_OLD_VALUE * lanes + i);
    const mlp_v16 neg_adv = -mlp_load(cols + MLP_C_ADV * lanes + i);
    mlp_v16 taken = mlp_load(logp + i), log_ratio, ratio, clipped, unclipped_loss, clipped_loss;
    mlp_v16 delta, bounded, near, far, d_value, v_loss;
    float *stats = cols + MLP_C_STATS * lanes + i; /* the loss reads the inputs, writes these */
    int64_t j;
    for (j = 1; j < n; j++) taken = mlp_select(action == (float)j, mlp_load(logp + j * lanes + i), taken);
    log_ratio = taken - mlp_load(cols + MLP_C_OLD_LOGP * lanes + i);
    ratio = mlp_select(log_ratio < -87.0f, mlp_splat(-87.0f), log_ratio);
    ratio = mlp_exp16(mlp_select(ratio > 88.0f, mlp_splat(88.0f), ratio));
    clipped = mlp_select(ratio < lo, mlp_splat(lo), mlp_select(ratio > hi, mlp_splat(hi), ratio));
    unclipped_loss = neg_adv * ratio;
    clipped_loss = neg_adv * clipped;
    mlp_store(dlogp + i, neg_adv * (mlp_max_share(unclipped_loss, clipped_loss) +
                                    mlp_max_share(clipped_loss, unclipped_loss) *
                                        mlp_inside(ratio, lo, hi)) *
                             ratio * t->scale);
    delta = value - old;
    bounded = mlp_select(delta < -c, mlp_splat(-c), mlp_select(delta > c, mlp_splat(c), delta));
    near = (value - ret) * (value - ret);
    far = (old + bounded - ret) * (old + bounded - ret);
    if (t->clip_vloss) {
        v_loss = mlp_select(near > far, near, far);
        d_value = mlp_max_share(near, far) * (value - ret) +
                  mlp_max_share(far, near) * (old + bounded - ret) * mlp_inside(delta, -c, c);
    } else {
        v_loss = near;
        d_value = value - ret;
    }
    mlp_store(dvalue + i, t->vf_coef * d_value * t->scale);
    mlp_store(stats, mlp_select(unclipped_loss > clipped_loss, unclipped_loss, clipped_loss));
    mlp_store(stats + lanes, v_loss);
    mlp_store(stats + 3 * lanes, (ratio - 1.0f) - log_ratio);
    mlp_store(stats + 4 * lanes,
              mlp_select((ratio - 1.0f > c) | (1.0f - ratio > c), mlp_splat(1.0f), mlp_splat(0.0f)));
}

MLP_CLONES static void mlp_loss_rows(int64_t lanes, int64_t n, const mlp_loss_terms *t,
                                     const float *logp, float *cols, float *dlogp,
                                     float *dvalue) {
    int64_t i;
    for (i = 0; i < lanes; i += MLP_LANES) mlp_loss16(i, lanes, n, t, logp, cols, dlogp, dvalue);
}

#define MLP_HALF_LOG_2PI 0.91893853320467274178f

/* The block's Gaussian log-probabilities of its taken actions (w->logp, one column), their
 * standardised distances z = (a - mean) / std (w->prob, action dimension j's column, 0 past
 * the rows) and the entropy (w->entropy), as ActorCritic._gaussian_logprob and
 * _gaussian_entropy compute them, the means being the actor's outputs. */
static void mlp_gaussian(const mlp_spec *s, const mlp_scratch *w, const mlp_batch *b,
                         const int64_t *order, const float *param) {
    const mlp_layer *L = mlp_at(s, 0, s->depth - 1);
    const float *mean = mlp_acts(s, w, 0, s->depth - 1), *log_std = param + s->log_std;
    const int64_t n = s->num_actions, lanes = w->lanes;
    float entropy = 0.0f;
    int64_t i, j;
    for (j = 0; j < n; j++) entropy += (0.5f + MLP_HALF_LOG_2PI) + log_std[j];
    for (i = 0; i < lanes; i++) {
        float logp = 0.0f;
        for (j = 0; j < n; j++) {
            const float z = i < w->rows ? (b->cactions[order[i] * n + j] - mean[i * L->n_out + j]) *
                                              expf(-log_std[j])
                                        : 0.0f;
            w->prob[j * lanes + i] = z;
            logp += -0.5f * z * z - log_std[j] - MLP_HALF_LOG_2PI;
        }
        w->logp[i] = logp;
        w->entropy[i] = entropy;
    }
}

/* The block's softmax (or Gaussian), loss gradients at the heads' outputs, and the five
 * statistics' sums added into stats in row order (policy loss, value loss, entropy, approx
 * KL, clip fraction). */
static void mlp_loss(const mlp_spec *s, const mlp_scratch *w, const mlp_batch *b,
                     const int64_t *order, const float *param, double *stats) {
    const int64_t rows = w->rows, lanes = w->lanes;
    const mlp_loss_terms terms = {s->clip_coef, s->vf_coef, 1.0f / w->total, s->clip_vloss};
    float *cols = w->cols, *st = cols + MLP_C_STATS * lanes;
    int64_t i, k;
    if (s->continuous)
        mlp_gaussian(s, w, b, order, param);
    else
        mlp_softmax(s, w);
    for (i = 0; i < lanes; i++) {
        const int64_t row = order[i < rows ? i : 0];
        const int in = i < rows;
        cols[MLP_C_ACTION * lanes + i] = in && !s->continuous ? (float)b->actions[row] : 0.0f;
        cols[MLP_C_OLD_LOGP * lanes + i] = in ? b->logprobs[row] : 0.0f;
        cols[MLP_C_RETURN * lanes + i] = in ? b->returns[row] : 0.0f;
        cols[MLP_C_OLD_VALUE * lanes + i] = in ? b->values[row] : 0.0f;
        cols[MLP_C_VALUE * lanes + i] = in ? mlp_value(s, w, i) : 0.0f;
        cols[MLP_C_ADV * lanes + i] = in ? w->adv[i] : 0.0f;
    }
    /* (a Gaussian's one log-probability column is "action 0's") */
    mlp_loss_rows(lanes, s->continuous ? 1 : s->num_actions, &terms, w->logp, cols, w->dlogp,
                  w->dvalue);
    for (i = 0; i < rows; i++) {
        stats[0] += st[i];
        stats[1] += 0.5 * st[lanes + i];
        stats[2] += w->entropy[i];
        for (k = 3; k < 5; k++) stats[k] += st[k * lanes + i];
    }
}

/* dy (rows, width) for a policy head's outputs, 16 rows at a time: the logits' gradient,
 * then, for a shared tower (width > n), the value's in column n. */
MLP_CLONES static void mlp_head_rows(int64_t rows, int64_t lanes, int64_t n, int64_t width,
                                     float entropy_scale, const float *__restrict__ logp,
                                     const float *__restrict__ prob,
                                     const float *__restrict__ entropy,
                                     const float *__restrict__ action,
                                     const float *__restrict__ dlogp,
                                     const float *__restrict__ dvalue, float *__restrict__ dy) {
    int64_t i, j, r;
    for (i = 0; i < lanes; i += MLP_LANES) {
        const mlp_v16 h = mlp_load(entropy + i), dl = mlp_load(dlogp + i);
        const mlp_v16 a = mlp_load(action + i);
        const int64_t count = rows - i < MLP_LANES ? rows - i : MLP_LANES;
        for (j = 0; j < n; j++) {
            const mlp_v16 p = mlp_load(prob + j * lanes + i);
            const mlp_v16 d = -dl * p + entropy_scale * p * (mlp_load(logp + j * lanes + i) + h);
            const mlp_v16 g = mlp_select(a == (float)j, d + dl, d);
            for (r = 0; r < count; r++) dy[(i + r) * width + j] = g[r];
        }
        if (width > n)
            for (r = 0; r < count; r++) dy[(i + r) * width + n] = dvalue[i + r];
    }
}

/* A Gaussian head's dy (rows, width): the means' gradient dlogp z / std, then, for a shared
 * tower, the value's in column n; the log standard deviations' gradient, sum over rows of
 * dlogp (z^2 - 1), added to grad at s->log_std. */
static void mlp_gaussian_head(const mlp_spec *s, const mlp_scratch *w, int64_t width,
                              const float *param, float *grad) {
    const int64_t n = s->num_actions, lanes = w->lanes;
    int64_t i, j;
    for (j = 0; j < n; j++) {
        const float inv_std = expf(-param[s->log_std + j]);
        float sum = 0.0f;
        for (i = 0; i < w->rows; i++) {
            const float z = w->prob[j * lanes + i], d = w->dlogp[i];
            w->dy[i * width + j] = d * z * inv_std;
            sum += d * (z * z - 1.0f);
        }
        grad[s->log_std + j] += sum;
    }
    if (width > n)
        for (i = 0; i < w->rows; i++) w->dy[i * width + n] = w->dvalue[i];
}

/* w->dy for a tower's last layer: the logits' (or means') gradient (tower 0), then the
 * value's (the shared tower's last column, or the critic tower's only one). */
static void mlp_head_grad(const mlp_spec *s, const mlp_scratch *w, int64_t tower,
                          const float *param, float *grad) {
    const int64_t n = s->num_actions, width = mlp_at(s, tower, s->depth - 1)->n_out;
    int64_t i;
    if (tower == 1) {
        for (i = 0; i < w->rows; i++) w->dy[i] = w->dvalue[i];
        return;
    }
    if (s->continuous) {
        mlp_gaussian_head(s, w, width, param, grad);
        return;
    }
    mlp_head_rows(w->rows, w->lanes, n, width, s->ent_coef / w->total, w->logp, w->prob,
                  w->entropy, w->cols + MLP_C_ACTION * w->lanes, w->dlogp, w->dvalue, w->dy);
}

/* rooms[0] = *w, and for each worker t < threads its scratch beside w, carved from `spare`
 * (mlp_worker_floats each), its gradient in grads[t]. */
static void mlp_carve_workers(const mlp_spec *s, const mlp_scratch *w, float *spare,
                              int64_t threads, int64_t n_params, mlp_scratch *rooms,
                              float **grads) {
    const int64_t each = mlp_worker_floats(s, w->total, n_params);
    int64_t t;
    rooms[0] = *w;
    for (t = 1; t < threads; t++) rooms[t] = mlp_carve_worker(s, w, spare + (t - 1) * each, &grads[t]);
}

/* One minibatch's gradient, its blocks shared among a pool's threads: thread t takes blocks
 * t, t + threads, ... into its own room and gradient (thread 0: the caller's scratch and
 * grad), and the statistics' sums into sums[t]. */
typedef struct {
    const mlp_spec *s;
    const mlp_batch *b;
    const int64_t *order;
    const float *param;
    int64_t threads, n_params;
    mlp_scratch rooms[MLP_MAX_THREADS];
    float *grads[MLP_MAX_THREADS];
    double sums[MLP_MAX_THREADS][5];
} mlp_gradient_job;

static void mlp_gradient_task(void *arg, int64_t t) {
    mlp_gradient_job *job = (mlp_gradient_job *)arg;
    const mlp_spec *s = job->s;
    const mlp_scratch *w = &job->rooms[t];
    int64_t tower, start, k;
    memset(job->grads[t], 0, sizeof(float) * job->n_params);
    memset(w->gt, 0, sizeof(float) * w->weights); /* the narrow layers' sums (fused_mlp.h) */
    for (k = 0; k < 5; k++) job->sums[t][k] = 0.0;
    for (start = t * MLP_BLOCK; start < w->total; start += job->threads * MLP_BLOCK) {
        const mlp_scratch block = mlp_block(s, w, start);
        mlp_forward(s, &block, job->param, s->towers);
        mlp_loss(s, &block, job->b, job->order + start, job->param, job->sums[t]);
        for (tower = 0; tower < s->towers; tower++) {
            mlp_head_grad(s, &block, tower, job->param, job->grads[t]);
            mlp_tower_backward(s, &block, job->grads[t], tower);
        }
    }
    mlp_finish_gradient(s, w, job->grads[t]);
}

/* The loss's gradient for one minibatch (rows `order`) into grad (overwritten); adds the
 * minibatch's five mean statistics to stats. With a pool of several threads, `spare` holds
 * each worker's mlp_worker_floats after the call's scratch; their gradients are added into
 * grad in thread order, so a given thread count always sums the same way. */
static void mlp_gradient(const mlp_spec *s, const mlp_scratch *w, const mlp_batch *b,
                         const int64_t *order, const float *moments, const float *param,
                         float *grad, int64_t n_params, float *stats, mlp_pool *pool,
                         float *spare) {
    mlp_gradient_job job;
    int64_t t, i, k;
    const int64_t threads = pool ? pool->threads : 1;
    mlp_prepare(s, w, param);
    mlp_gather(s, w, b, order);
    if (s->norm_adv) mlp_normalise(w, moments);
    job.s = s;
    job.b = b;
    job.order = order;
    job.param = param;
    job.threads = threads;
    job.n_params = n_params;
    mlp_carve_workers(s, w, spare, threads, n_params, job.rooms, job.grads);
    job.grads[0] = grad;
    if (threads > 1)
        mlp_pool_run(pool, mlp_gradient_task, &job);
    else
        mlp_gradient_task(&job, 0);
    for (t = 1; t < threads; t++)
        for (i = 0; i < n_params; i++) grad[i] += job.grads[t][i];
    if (s->continuous) /* the entropy bonus: the mean entropy's gradient is 1 per log std */
        for (i = 0; i < s->num_actions; i++) grad[s->log_std + i] -= s->ent_coef;
    for (k = 0; k < 5; k++) {
        double sum = 0.0;
        for (t = 0; t < threads; t++) sum += job.sums[t][k];
        stats[k] += (float)(sum / w->total);
    }
}

/* The rollout's categorical samples for a call's rows, its blocks shared among a pool's
 * threads as the gradient's are (each row's sample depends on that row alone, so any
 * sharing gives the same bits): row i's action inverts the CDF, summed in action order, at
 * uniforms[i], as operant.trainer.policies.sampling.sample_categorical does. */
typedef struct {
    const mlp_spec *s;
    const float *param, *uniforms;
    int64_t *actions;
    float *logprobs, *values;
    int64_t threads;
    mlp_scratch rooms[MLP_MAX_THREADS];
} mlp_act_job;

static void mlp_act_task(void *arg, int64_t t) {
    const mlp_act_job *job = (const mlp_act_job *)arg;
    const mlp_spec *s = job->s;
    const int64_t count = s->num_actions;
    int64_t start, i, j;
    for (start = t * MLP_BLOCK; start < job->rooms[t].total; start += job->threads * MLP_BLOCK) {
        const mlp_scratch block = mlp_block(s, &job->rooms[t], start);
        mlp_forward(s, &block, job->param, s->towers);
        mlp_softmax(s, &block);
        for (i = 0; i < block.rows; i++) {
            const float *prob = block.prob + i; /* action j's at prob[j * lanes] */
            const float uniform = job->uniforms[start + i];
            float cdf = 0.0f;
            int64_t index = 0;
            for (j = 0; j < count; j++) {
                cdf = cdf + prob[j * block.lanes];
                index += cdf <= uniform;
            }
            if (index > count - 1) index = count - 1;
            job->actions[start + i] = index;
            job->logprobs[start + i] = block.logp[index * block.lanes + i];
            job->values[start + i] = mlp_value(s, &block, i);
        }
    }
}

/* One action per row of w (its inputs loaded), with its log-probability and value; with a
 * pool, `spare` holds each worker's mlp_worker_floats for these rows. */
static void mlp_act(const mlp_spec *s, const mlp_scratch *w, const float *param,
                    const float *uniforms, int64_t *actions, float *logprobs, float *values,
                    mlp_pool *pool, float *spare, int64_t n_params) {
    mlp_act_job job;
    float *unused[MLP_MAX_THREADS];
    mlp_prepare(s, w, param);
    job.s = s;
    job.param = param;
    job.uniforms = uniforms;
    job.actions = actions;
    job.logprobs = logprobs;
    job.values = values;
    /* a worker takes a block only where there are two or more */
    job.threads = pool && w->total > MLP_BLOCK ? pool->threads : 1;
    mlp_carve_workers(s, w, spare, job.threads, n_params, job.rooms, unused);
    if (job.threads > 1)
        mlp_pool_run(pool, mlp_act_task, &job);
    else
        mlp_act_task(&job, 0);
}

MLP_CLONES static float mlp_norm(int64_t n, const float *__restrict__ g) {
    float lanes[MLP_LANES] = {0}, sum = 0.0f;
    int64_t k = 0, l;
    for (; k + MLP_LANES <= n; k += MLP_LANES)
        for (l = 0; l < MLP_LANES; l++) lanes[l] += g[k + l] * g[k + l];
    for (l = 0; l < MLP_LANES; l++) sum += lanes[l];
    for (; k < n; k++) sum += g[k] * g[k];
    return sqrtf(sum);
}

/* FlatParameters.clip_grad_norm_ then FlatAdam.step (its `step`-th), elementwise as there:
 * m = lerp(m, g, 1 - beta1); v = v * beta2 + (1 - beta2) g g;
 * p += -lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps). */
MLP_CLONES static void mlp_clip_adam(int64_t n, float *__restrict__ param,
                                     float *__restrict__ grad, float *__restrict__ m,
                                     float *__restrict__ v, const mlp_adam *adam, int64_t step) {
    const float norm = mlp_norm(n, grad);
    const float clip = (float)adam->max_grad_norm / (norm + 1e-6f);
    const float factor = clip < 1.0f ? clip : 1.0f;
    const float weight = (float)(1.0 - adam->beta1), beta2 = (float)adam->beta2;
    const float rest = (float)(1.0 - adam->beta2);
    const float bc2_sqrt = (float)sqrt(1.0 - pow(adam->beta2, (double)step));
    const float step_size = (float)(-adam->lr / (1.0 - pow(adam->beta1, (double)step)));
    const float eps = (float)adam->eps;
    int64_t i;
    for (i = 0; i < n; i++) {
        const float g = grad[i] * factor;
        grad[i] = g;
        m[i] = m[i] + weight * (g - m[i]);
        v[i] = v[i] * beta2 + rest * g * g;
        param[i] = param[i] + step_size * (m[i] / (sqrtf(v[i]) / bc2_sqrt + eps));
    }
}

#endif

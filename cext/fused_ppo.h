/* PPO's loss, its gradient at the network's heads, the clip and Adam, over fused_mlp.h's
 * network: the arithmetic of operant.trainer.ppo._losses, FlatParameters.clip_grad_norm_ and
 * FlatAdam.step (operant.trainer.flat), in their operation order where it is not a
 * reduction. Called from cext/fused_mlp.pyx without the GIL.
 *
 * The loss's subgradients are torch's: max(a, b) sends the gradient to the larger argument and
 * half to each on a tie; clamp passes it inside its closed range and nothing outside.
 */
#ifndef OPERANT_FUSED_PPO_H
#define OPERANT_FUSED_PPO_H

#include "fused_mlp.h"

/* FlatAdam's settings as the Python floats they are (its scalars are rounded to float32 where
 * torch rounds them: after the double arithmetic). */
typedef struct {
    double lr, beta1, beta2, eps, max_grad_norm;
} mlp_adam;

/* The minibatch's observations into w->x and advantages into w->adv, in `order`. */
static void mlp_gather(const mlp_spec *s, const mlp_scratch *w, const mlp_batch *b,
                       const int64_t *order) {
    int64_t i;
    for (i = 0; i < w->total; i++) {
        memcpy(w->x + i * s->obs_dim, b->obs + order[i] * s->obs_dim, sizeof(float) * s->obs_dim);
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

/* d max(a, b) / d a, torch's way. */
static inline float mlp_max_share(float a, float b) {
    return a > b ? 1.0f : (a < b ? 0.0f : 0.5f);
}

/* Each row's log-probabilities and entropy, the gradients of the loss with respect to the
 * taken action's log-probability and the value; the five statistics' sums into stats
 * (policy loss, value loss, entropy, approx KL, clip fraction). */
static void mlp_loss(const mlp_spec *s, const mlp_scratch *w, const mlp_batch *b,
                     const int64_t *order, double *stats) {
    const float lo = 1.0f - s->clip_coef, hi = 1.0f + s->clip_coef, scale = 1.0f / w->total;
    int64_t i;
    mlp_softmax(s, w);
    for (i = 0; i < w->rows; i++) {
        const int64_t row = order[i];
        float *logp = w->logp + i * s->num_actions;
        float log_ratio, ratio, clipped, neg_adv, unclipped_loss, clipped_loss, d_ratio;
        float value = mlp_value(s, w, i), ret = b->returns[row], old = b->values[row];
        float v_loss, d_value;
        log_ratio = logp[b->actions[row]] - b->logprobs[row];
        ratio = expf(log_ratio);
        clipped = ratio < lo ? lo : (ratio > hi ? hi : ratio);
        neg_adv = -w->adv[i];
        unclipped_loss = neg_adv * ratio;
        clipped_loss = neg_adv * clipped;
        d_ratio = neg_adv * (mlp_max_share(unclipped_loss, clipped_loss) +
                             mlp_max_share(clipped_loss, unclipped_loss) *
                                 (ratio >= lo && ratio <= hi));
        w->dlogp[i] = d_ratio * ratio * scale;
        if (s->clip_vloss) {
            float delta = value - old, bounded, far, near;
            bounded = delta < -s->clip_coef ? -s->clip_coef : (delta > s->clip_coef ? s->clip_coef : delta);
            near = (value - ret) * (value - ret);
            far = (old + bounded - ret) * (old + bounded - ret);
            v_loss = near > far ? near : far;
            d_value = mlp_max_share(near, far) * (value - ret) +
                      mlp_max_share(far, near) * (old + bounded - ret) *
                          (delta >= -s->clip_coef && delta <= s->clip_coef);
        } else {
            v_loss = (value - ret) * (value - ret);
            d_value = value - ret;
        }
        w->dvalue[i] = s->vf_coef * d_value * scale;
        stats[0] += unclipped_loss > clipped_loss ? unclipped_loss : clipped_loss;
        stats[1] += 0.5 * v_loss;
        stats[2] += w->entropy[i];
        stats[3] += (ratio - 1.0f) - log_ratio;
        stats[4] += fabsf(ratio - 1.0f) > s->clip_coef;
    }
}

/* w->dy for a tower's last layer: the logits' gradient (tower 0), then the value's (the
 * shared tower's last column, or the critic tower's only one). */
static void mlp_head_grad(const mlp_spec *s, const mlp_scratch *w, const mlp_batch *b,
                          const int64_t *order, int64_t tower) {
    const int64_t n = s->num_actions, width = mlp_at(s, tower, s->depth - 1)->n_out;
    const float entropy_scale = s->ent_coef / w->total;
    int64_t i, j;
    for (i = 0; i < w->rows; i++) {
        float *dy = w->dy + i * width;
        const float *logp = w->logp + i * n, *prob = w->prob + i * n;
        if (tower == 1) {
            dy[0] = w->dvalue[i];
            continue;
        }
        for (j = 0; j < n; j++) {
            dy[j] = -w->dlogp[i] * prob[j] + entropy_scale * prob[j] * (logp[j] + w->entropy[i]);
        }
        dy[b->actions[order[i]]] += w->dlogp[i];
        if (s->towers == 1) dy[n] = w->dvalue[i];
    }
}

/* The loss's gradient for one minibatch (rows `order`) into grad (zeroed first); adds the
 * minibatch's five mean statistics to stats. */
static void mlp_gradient(const mlp_spec *s, const mlp_scratch *w, const mlp_batch *b,
                         const int64_t *order, const float *moments, const float *param,
                         float *grad, int64_t n_params, float *stats) {
    double sums[5] = {0};
    int64_t t, k, start;
    mlp_prepare(s, w, param);
    mlp_gather(s, w, b, order);
    if (s->norm_adv) mlp_normalise(w, moments);
    memset(grad, 0, sizeof(float) * n_params);
    for (start = 0; start < w->total; start += MLP_BLOCK) {
        const mlp_scratch block = mlp_block(s, w, start);
        mlp_forward(s, &block, param, s->towers);
        mlp_loss(s, &block, b, order + start, sums);
        for (t = 0; t < s->towers; t++) {
            mlp_head_grad(s, &block, b, order + start, t);
            mlp_tower_backward(s, &block, param, grad, t);
        }
    }
    mlp_finish_gradient(s, w, grad);
    for (k = 0; k < 5; k++) stats[k] += (float)(sums[k] / w->total);
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

/* A row of logits' log-sum-exp, as torch's log_softmax computes it (the max, then the log of
 * the sum of exp(z - max)): shared by PPO's native loss (cext/trainer/ppo_loss.pyx) and the rollout's
 * categorical (cext/trainer/sampling.pyx). No allocation, no Python objects. */
#ifndef OPERANT_SOFTMAX_H
#define OPERANT_SOFTMAX_H

#include <math.h>
#include <stdint.h>

/* log(sum(exp(z[0:n]))), with the max in *peak and the sum of exp(z - max) in *total; the
 * first `keep` terms exp(z[j] - max) also into kept[j] (none when kept is NULL). */
static inline float op_logsumexp(const float *z, int64_t n, float *peak, float *total,
                                 float *kept, int64_t keep) {
    float top = z[0], sum = 0.0f;
    int64_t j;
    for (j = 1; j < n; j++) {
        if (z[j] > top) top = z[j];
    }
    for (j = 0; j < n; j++) {
        const float term = expf(z[j] - top);
        if (kept && j < keep) kept[j] = term;
        sum += term;
    }
    *peak = top;
    *total = sum;
    return top + logf(sum);
}

#endif

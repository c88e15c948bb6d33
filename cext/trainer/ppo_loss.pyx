# cython: boundscheck=False, wraparound=False
"""PPO's clipped loss over a discrete policy's heads, and its gradient at them, in one pass
(operant.trainer.loop.ppo_loss): what operant.trainer.loop.ppo computes from `evaluate`'s outputs
with some thirty torch operations forward and as many backward (1.7 ms at 1,024 rows, 0.1 ms
of arithmetic).

Per row: log-softmax of the logits, the taken action's log-probability, the entropy, the
ratio to the old policy, the clipped surrogate, the (optionally clipped) value loss; their
means over the rows make the loss, and their gradients with respect to each logit and value
are written out for the backward. The subgradients are torch's: max(a, b) sends the gradient
to the larger argument and half to each on a tie; clamp passes it inside its closed range
and nothing outside. Advantages are normalised with the rows' own mean and standard deviation
(Bessel's correction, as torch.std) or the moments given (several ranks). Float32 arithmetic
per element, sums over rows in double: the same function as the torch path to float32
rounding, not bit for bit.

Addresses, not tensors: the caller checks dtypes, shapes and contiguity. No GIL, no
allocation.
"""

from libc.math cimport NAN, expf, sqrt
from libc.stdint cimport int64_t, uintptr_t


cdef extern from "softmax.h" nogil:
    float op_logsumexp(const float *z, int64_t n, float *peak, float *total, float *kept,
                       int64_t keep)


cdef inline float _share(float a, float b) noexcept nogil:
    """d max(a, b) / d a, torch's way."""
    if a > b:
        return 1.0
    if a < b:
        return 0.0
    return 0.5


cdef inline float _inside(float x, float lo, float hi) noexcept nogil:
    return 1.0 if lo <= x <= hi else 0.0


cdef inline float _clamp(float x, float lo, float hi) noexcept nogil:
    return lo if x < lo else (hi if x > hi else x)


# The first _KEPT actions' exp(z - max) are kept from the softmax's sum for the entropy and
# the gradient (one exp a logit instead of three); wider heads compute theirs again.
cdef enum:
    _KEPT = 64


cdef inline float _prob(const float *z, int64_t j, float peak, float total,
                        const float *kept) noexcept nogil:
    """softmax(z)[j]: exp(z[j] - max) / sum."""
    return (kept[j] if j < _KEPT else expf(z[j] - peak)) / total


cdef struct Terms:
    float clip_coef, vf_coef, ent_coef
    bint clip_vloss, normalise


cdef void _moments(const float *adv, int64_t rows, float *mean, float *std) noexcept nogil:
    cdef double total = 0.0, squares = 0.0, centred, m
    cdef int64_t i
    for i in range(rows):
        total += adv[i]
    m = total / rows
    for i in range(rows):
        centred = adv[i] - m
        squares += centred * centred
    mean[0] = <float>m
    std[0] = <float>sqrt(squares / (rows - 1))


cdef int64_t _loss(const float *logits, const float *values, const int64_t *actions,
                const float *old_logp, const float *adv, const float *returns,
                const float *old_values, int64_t rows, int64_t n, int64_t ld, int64_t vs,
                Terms t, float mean, float std, float *dlogits, float *dvalues,
                double *sums) noexcept nogil:
    """Returns how many rows' actions were not in [0, n) (their loss and gradients are NaN)."""
    cdef float lo = 1.0 - t.clip_coef, hi = 1.0 + t.clip_coef, c = t.clip_coef
    cdef float inv = 1.0 / rows, ent_scale = t.ent_coef / rows
    cdef float peak, total, lse, entropy, lp, p, taken, log_ratio, ratio, a, unclipped
    cdef float clipped, g_logp, d, v, delta, bounded, near, far, v_loss, d_value
    cdef const float *z
    cdef float *dz
    cdef float kept[_KEPT]
    cdef int64_t i, j, action, bad = 0
    for j in range(6):
        sums[j] = 0.0
    for i in range(rows):
        z = logits + i * ld
        dz = dlogits + i * ld
        lse = op_logsumexp(z, n, &peak, &total, kept, _KEPT)
        entropy = 0.0
        for j in range(n):
            lp = z[j] - lse
            entropy -= _prob(z, j, peak, total, kept) * lp
        action = actions[i]
        if action < 0 or action >= n:  # torch's gather would raise
            bad += 1
            action = 0
            lse = NAN
        taken = z[action] - lse
        log_ratio = taken - old_logp[i]
        ratio = expf(log_ratio)
        a = (adv[i] - mean) / (std + <float>1e-8) if t.normalise else adv[i]
        unclipped = -a * ratio
        clipped = -a * _clamp(ratio, lo, hi)
        g_logp = (-a * (_share(unclipped, clipped)
                        + _share(clipped, unclipped) * _inside(ratio, lo, hi))) * ratio * inv
        for j in range(n):
            lp = z[j] - lse
            p = _prob(z, j, peak, total, kept)
            d = -g_logp * p + ent_scale * p * (lp + entropy)
            dz[j] = d + g_logp if j == action else d
        v = values[i * vs]
        near = (v - returns[i]) * (v - returns[i])
        if t.clip_vloss:
            delta = v - old_values[i]
            bounded = old_values[i] + _clamp(delta, -c, c)
            far = (bounded - returns[i]) * (bounded - returns[i])
            v_loss = near if near > far else far
            d_value = (_share(near, far) * (v - returns[i])
                       + _share(far, near) * (bounded - returns[i]) * _inside(delta, -c, c))
        else:
            v_loss = near
            d_value = v - returns[i]
        dvalues[i * vs] = t.vf_coef * d_value * inv
        sums[1] += unclipped if unclipped > clipped else clipped
        sums[2] += v_loss
        sums[3] += entropy
        sums[4] += (ratio - 1.0) - log_ratio
        sums[5] += 1.0 if (ratio - 1.0 > c or 1.0 - ratio > c) else 0.0
    for j in range(1, 6):
        sums[j] /= rows
    sums[2] *= 0.5
    sums[0] = sums[1] + t.vf_coef * sums[2] - t.ent_coef * sums[3]
    return bad


def loss(uintptr_t logits, uintptr_t values, uintptr_t actions, uintptr_t old_logp,
         uintptr_t advantages, uintptr_t returns, uintptr_t old_values, int64_t rows,
         int64_t num_actions, float clip_coef, float vf_coef, float ent_coef, bint clip_vloss,
         bint norm_adv, moments, uintptr_t dlogits, uintptr_t dvalues, uintptr_t sums,
         int64_t stride=0):
    """The loss's gradient into `dlogits` (rows, num_actions) and `dvalues` (rows,), float32,
    already divided by the rows (the means' gradients), and into `sums` six float64: the loss,
    then the mean policy loss, value loss (with its 0.5), entropy, approx KL and clip
    fraction. Logits, values, old log-probabilities, advantages, returns and old values are
    float32, actions int64, all C-contiguous. `moments`: None (normalise with the rows' own)
    or (mean, std). `stride` > 0: the logits and values (and their gradients) are rows of
    `stride` floats instead, the heads' outputs side by side (values at logits + n); 0 means
    contiguous logits and a separate values vector, as above."""
    if rows < 1 or num_actions < 1 or (stride and stride < num_actions + 1):
        raise ValueError(f"no loss over {rows} rows of {num_actions} actions (stride {stride})")
    cdef Terms t
    t.clip_coef = clip_coef
    t.vf_coef = vf_coef
    t.ent_coef = ent_coef
    t.clip_vloss = clip_vloss
    t.normalise = norm_adv
    cdef float mean = 0.0, std = 1.0
    cdef bint own = norm_adv and moments is None
    if norm_adv and moments is not None:
        mean, std = moments
    cdef int64_t ld = stride if stride else num_actions, vs = stride if stride else 1
    cdef int64_t bad
    with nogil:
        if own:
            _moments(<const float *>advantages, rows, &mean, &std)
        bad = _loss(<const float *>logits, <const float *>values, <const int64_t *>actions,
              <const float *>old_logp, <const float *>advantages, <const float *>returns,
              <const float *>old_values, rows, num_actions, ld, vs, t, mean, std,
              <float *>dlogits, <float *>dvalues, <double *>sums)
    if bad:
        raise ValueError(f"{bad} of {rows} actions are not in [0, {num_actions})")

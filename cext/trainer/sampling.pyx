# cython: boundscheck=False, wraparound=False
"""One action per row of a categorical's logits, at a given uniform per row, with its
log-probability (operant.trainer.policies.sampling): log-softmax, the CDF's running sum and its
inversion in one pass, where the torch path runs seven operations (log_softmax, exp, cumsum,
searchsorted, clamp, gather and their views: about 60 us for 64 rows of 3 actions).

The action is the number of CDF entries <= u (searchsorted with right=True), at most the last
index (a CDF that rounds to just under 1); the CDF sums exp(logit - logsumexp) in row order,
as torch's cumsum does, so the same uniforms pick the same actions except where u falls within
float32 rounding of a CDF entry. Addresses, not tensors; no GIL, no allocation.
"""

from libc.math cimport expf
from libc.stdint cimport int64_t, uintptr_t


cdef extern from "softmax.h" nogil:
    float op_logsumexp(const float *z, int64_t n, float *peak, float *total, float *kept,
                       int64_t keep)


cdef void _categorical(const float *logits, const float *uniform, int64_t *actions,
                       float *logprob, int64_t rows, int64_t n) noexcept nogil:
    cdef int64_t i, j, pick
    cdef const float *z
    cdef float peak, total, lse, cdf, u
    for i in range(rows):
        z = logits + i * n
        lse = op_logsumexp(z, n, &peak, &total, NULL, 0)
        u = uniform[i]
        cdf = 0.0
        pick = n - 1
        for j in range(n - 1):
            cdf += expf(z[j] - lse)
            if cdf > u:
                pick = j
                break
        actions[i] = pick
        logprob[i] = z[pick] - lse


def categorical(uintptr_t logits, uintptr_t uniform, uintptr_t actions, uintptr_t logprob,
                int64_t rows, int64_t num_actions):
    """Actions (int64) and their log-probabilities (float32) for `rows` rows of C-contiguous
    float32 logits (rows, num_actions), one float32 uniform in [0, 1) per row."""
    if rows < 0 or num_actions < 1:
        raise ValueError(f"no categorical over {rows} rows of {num_actions} actions")
    with nogil:
        _categorical(<const float *>logits, <const float *>uniform, <int64_t *>actions,
                     <float *>logprob, rows, num_actions)

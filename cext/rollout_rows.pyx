# cython: boundscheck=False, wraparound=False
"""The rollout's per-rollout bookkeeping in one nogil pass: operant.trainer.collect's dones.

A bound rollout (the kernels write their flags straight into the storage's rows) computes
every step's dones after the rollout, and learns on the way whether any row truncated, so
that the deferred truncation bootstrap (operant.trainer.bootstrap) runs only when needed.
Nothing is allocated.
"""

from libc.stdint cimport int64_t, uint8_t


def rollout_dones(const uint8_t[::1] terminated, const uint8_t[::1] truncated,
                  float[::1] dones):
    """dones[i] = 1.0 where terminated[i] or truncated[i], else 0.0, over a whole rollout's
    flags (bool (steps * rows,) as uint8); returns how many were truncated. One pass in C:
    once a rollout, right after the update's work has left the caches cold, one small loop
    costs less than numpy's or torch's calls."""
    cdef int64_t i, n = dones.shape[0], truncations = 0
    if terminated.shape[0] != n or truncated.shape[0] != n:
        raise ValueError(f"terminated and truncated must have the {n} flags of dones")
    with nogil:
        for i in range(n):
            dones[i] = <float>(terminated[i] | truncated[i])
            truncations += truncated[i]
    return truncations

# cython: boundscheck=False, wraparound=False
"""The rollout's per-rollout bookkeeping in one nogil pass: operant.trainer.loop.collect's dones.

A bound rollout (the kernels write their flags straight into the storage's rows) computes
every step's dones after the rollout, and learns on the way whether any row truncated, so
that the deferred truncation bootstrap (operant.trainer.loop.collect.BatchedBootstrap) runs only when needed.
Nothing is allocated.
"""

from libc.stdint cimport int64_t, uint8_t


def rollout_dones(const uint8_t[::1] terminated, const uint8_t[::1] truncated,
                  float[::1] dones, uint8_t[::1] step_truncated=None):
    """dones[i] = 1.0 where terminated[i] or truncated[i], else 0.0, over a whole rollout's
    flags (bool (steps * rows,) as uint8); returns how many were truncated, and with
    `step_truncated` (uint8 (steps,)) marks the steps on which some row truncated (the
    bootstrap's list of steps to value). One pass in C: once a rollout, right after the
    update's work has left the caches cold, one small loop costs less than numpy's or torch's
    calls (a numpy `any()` per step was most of the default config's once-a-rollout time)."""
    cdef int64_t i, t, n = dones.shape[0], truncations = 0, steps, rows
    cdef uint8_t seen
    if terminated.shape[0] != n or truncated.shape[0] != n:
        raise ValueError(f"terminated and truncated must have the {n} flags of dones")
    if step_truncated is None:
        with nogil:
            for i in range(n):
                dones[i] = <float>(terminated[i] | truncated[i])
                truncations += truncated[i]
        return truncations
    steps = step_truncated.shape[0]
    if steps < 1 or n % steps:
        raise ValueError(f"{n} flags do not divide into {steps} steps")
    rows = n // steps
    with nogil:
        for t in range(steps):
            seen = 0
            for i in range(t * rows, (t + 1) * rows):
                dones[i] = <float>(terminated[i] | truncated[i])
                seen |= truncated[i]
            step_truncated[t] = seen
            truncations += seen
    return truncations

# cython: language_level=3
"""Generalised advantage estimation over a whole rollout, all envs at once, in float32.

Computes exactly what operant.trainer.loop.ppo._compute_gae_torch computes, in its operation order
(so the two agree to float32 rounding, and in practice bit for bit):

    delta[t]   = rewards[t] + gamma * V_next * (1 - dones[t]) - values[t]
    last[t]    = delta[t] + (gamma * lambda) * (1 - dones[t]) * last[t + 1]
    returns[t] = last[t] + values[t]

where V_next is values[t + 1] (next_value after the last step) and last[T] = 0. The outer loop
walks t backwards; the inner loop runs over the N contiguous envs of one row, C code in the
block below with restrict pointers so that it vectorises (AVX2 where the CPU has it, chosen at
load time). `last` is never stored separately: it is advantages row t + 1, already written.
"""

cimport cython
from libc.stdint cimport int64_t

cdef extern from "kernel_common.h":
    pass  # OP_VECTOR_CLONES

cdef extern from *:
    """
    /* One row of GAE: step t of every env, given row t + 1's values and advantages (for the
       last step next_value and NULL: zeros, as the torch loop starts from zeros; the loop is
       unswitched on it). IN: rewards, values, dones, following_values, following_advantages;
       OUT: advantages, returns (row t). */
    OP_VECTOR_CLONES static void gae_row(
            int64_t n, float gamma, float gamma_lambda, const float *__restrict__ rewards,
            const float *__restrict__ values, const float *__restrict__ dones,
            const float *__restrict__ following_values,
            const float *__restrict__ following_advantages, float *__restrict__ advantages,
            float *__restrict__ returns) {
        int64_t i;
        for (i = 0; i < n; i++) {
            float following = following_advantages ? following_advantages[i] : 0.0f;
            float not_done = 1.0f - dones[i];
            float delta = rewards[i] + gamma * following_values[i] * not_done - values[i];
            float last = delta + gamma_lambda * not_done * following;
            advantages[i] = last;
            returns[i] = last + values[i];
        }
    }
    """
    void gae_row(int64_t n, float gamma, float gamma_lambda, const float *rewards,
                 const float *values, const float *dones, const float *following_values,
                 const float *following_advantages, float *advantages,
                 float *returns) noexcept nogil


cdef inline bint _overlaps(const float *a, Py_ssize_t a_count, const float *b,
                           Py_ssize_t b_count) noexcept:
    return a < b + b_count and b < a + a_count


@cython.boundscheck(False)
@cython.wraparound(False)
def gae(const float[:, ::1] rewards, const float[:, ::1] values, const float[:, ::1] dones,
        const float[::1] next_value, double gamma, double gae_lambda,
        float[:, ::1] advantages, float[:, ::1] returns):
    """Write GAE advantages and returns of a rollout into `advantages` and `returns`.

    rewards, values, dones, advantages, returns: C-contiguous float32 (T, N), T >= 1, N >= 1;
    next_value: float32 (N,), V(obs after the last step). dones are 0.0 / 1.0: dones[t] means
    the episode ended at step t, so nothing flows across it. The outputs must not overlap the
    inputs or each other. gamma * gae_lambda is formed in double and rounded once, as the
    torch loop does. The GIL is released; nothing is allocated.
    """
    cdef Py_ssize_t steps = rewards.shape[0], envs = rewards.shape[1], t, k
    cdef float g = <float>gamma, gl = <float>(gamma * gae_lambda)
    if steps < 1 or envs < 1:
        raise ValueError(f"rewards must be (T, N) with T, N >= 1, got ({steps}, {envs})")
    for name, rows, cols in (("values", values.shape[0], values.shape[1]),
                             ("dones", dones.shape[0], dones.shape[1]),
                             ("advantages", advantages.shape[0], advantages.shape[1]),
                             ("returns", returns.shape[0], returns.shape[1])):
        if rows != steps or cols != envs:
            raise ValueError(f"{name} must have the shape of rewards ({steps}, {envs}), "
                             f"got ({rows}, {cols})")
    if next_value.shape[0] != envs:
        raise ValueError(f"next_value must have shape ({envs},), got ({next_value.shape[0]},)")
    # The row loops take restrict pointers: no output may share memory with another buffer.
    cdef Py_ssize_t size = steps * envs
    cdef const float *adv = &advantages[0, 0]
    cdef const float *ret = &returns[0, 0]
    cdef const float *inputs[4]
    cdef Py_ssize_t counts[4]
    inputs[:] = [&rewards[0, 0], &values[0, 0], &dones[0, 0], &next_value[0]]
    counts[:] = [size, size, size, envs]
    bad = _overlaps(adv, size, ret, size)
    for k in range(4):
        bad = bad or _overlaps(adv, size, inputs[k], counts[k]) \
            or _overlaps(ret, size, inputs[k], counts[k])
    if bad:
        raise ValueError("advantages and returns must not overlap each other or the inputs")
    with nogil:
        t = steps - 1
        gae_row(envs, g, gl, &rewards[t, 0], &values[t, 0], &dones[t, 0], inputs[3], NULL,
                &advantages[t, 0], &returns[t, 0])
        for t in range(steps - 2, -1, -1):
            gae_row(envs, g, gl, &rewards[t, 0], &values[t, 0], &dones[t, 0],
                    &values[t + 1, 0], &advantages[t + 1, 0], &advantages[t, 0],
                    &returns[t, 0])


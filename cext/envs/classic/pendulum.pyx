# cython: language_level=3
"""Pendulum-v1 as a batch kernel over N environments.

Layering: operant.envs.native.vector -> BatchKernel (kernel_common.pxi, included below) ->
op_batch_step in kernel_common.h (action check, SAME_STEP autoreset, episode reduction, RNG) ->
the env functions `_reset_one`, `_write_obs`, `_step_one` here.

Dynamics are Gymnasium's Pendulum-v1 exactly (g = 10, m = l = 1, dt = 0.05), number types
included: the action is float32 (N, 1), clipped to [-2, 2] in float32; the torque terms that
NumPy 2 computes in float32 (`3.0 * u`, `0.001 * u**2`) are computed in float32 here, the rest
in float64; `** 2` is libm's pow as on NumPy scalars. Reward -(angle_normalize(theta)**2
+ 0.1 * theta_dot**2 + 0.001 * u**2), with angle_normalize(x) = ((x + pi) mod 2 pi) - pi and the
modulo taking the divisor's sign (Python's). theta_dot is clipped to [-8, 8]. Observations
(cos theta, sin theta, theta_dot) as float32. Never terminates; truncation after
`max_episode_steps` (200). Reset: theta uniform in [-pi, pi), theta_dot in [-1, 1).
Out-of-range torques are clipped, as in Gymnasium; NaN and infinities are refused (step returns
the env's index).

Autoreset is Gymnasium's SAME_STEP mode (see kernel_common.h, op_batch_step).
"""

cimport cython
from libc.math cimport M_PI, cos, sin
from libc.stdint cimport int64_t

from kernel_common cimport (
    op_batch,
    op_batch_step,
    op_obs_f32,
    op_pow2,
    op_pow2f,
    op_py_mod,
    op_rng_uniform,
)

cdef double MAX_SPEED = 8.0
cdef float MAX_TORQUE = 2.0
cdef double DT = 0.05
cdef double G = 10.0
cdef double M = 1.0
cdef double L = 1.0
cdef double GRAVITY_COEFFICIENT = 3 * G / (2 * L)
cdef float TORQUE_COEFFICIENT = <float>(3.0 / (M * L * L))
cdef float TORQUE_COST = <float>0.001
cdef double RESET_THETA = M_PI
cdef double RESET_THETA_DOT = 1.0

STATE_DIM = 2
OBS_DTYPE = "float32"
OBS_SHAPE = (3,)
ACTION_DIM = 1
NUM_ACTIONS = 0
MAX_EPISODE_STEPS = 200


cdef inline double _angle_normalize(double x) noexcept nogil:
    return op_py_mod(x + M_PI, 2 * M_PI) - M_PI


cdef void _reset_one(op_batch *b, int64_t i) noexcept nogil:
    b.state[i] = op_rng_uniform(&b.rng[i], -RESET_THETA, RESET_THETA)
    b.state[b.num_envs + i] = op_rng_uniform(&b.rng[i], -RESET_THETA_DOT, RESET_THETA_DOT)


cdef void _write_obs(op_batch *b, int64_t i) noexcept nogil:
    cdef double theta = b.state[i]
    cdef float *row = &op_obs_f32(b)[3 * i]
    row[0] = <float>cos(theta)
    row[1] = <float>sin(theta)
    row[2] = <float>b.state[b.num_envs + i]


cdef double _step_one(op_batch *b, int64_t i, int *terminated) noexcept nogil:
    cdef int64_t n = b.num_envs
    cdef double th = b.state[i]
    cdef double thdot = b.state[n + i]
    cdef float u = min(max(b.continuous_actions[i], -MAX_TORQUE), MAX_TORQUE)
    cdef double costs = (op_pow2(_angle_normalize(th)) + 0.1 * op_pow2(thdot)
                         + <double>(TORQUE_COST * op_pow2f(u)))
    cdef double newthdot = thdot + (GRAVITY_COEFFICIENT * sin(th)
                                    + <double>(TORQUE_COEFFICIENT * u)) * DT
    newthdot = min(max(newthdot, -MAX_SPEED), MAX_SPEED)
    b.state[i] = th + newthdot * DT
    b.state[n + i] = newthdot
    terminated[0] = 0
    return -costs


cdef int64_t _step(op_batch *b) noexcept nogil:
    return op_batch_step(b, _step_one, _write_obs, _reset_one)


include "kernel_common.pxi"


@cython.final
cdef class PendulumKernel(BatchKernel):
    """N Pendulum-v1 environments; `state` rows: theta, theta_dot."""

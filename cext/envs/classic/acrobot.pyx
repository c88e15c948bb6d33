# cython: language_level=3
"""Acrobot-v1 as a batch kernel over N environments.

Layering: operant.envs.native.vector -> BatchKernel (kernel_common.pxi, included below) ->
op_batch_step in kernel_common.h (action check, SAME_STEP autoreset, episode reduction, RNG) ->
the env functions `_reset_one`, `_write_obs`, `_step_one` here.

Dynamics are Gymnasium's Acrobot-v1 exactly, `book_or_nips = "book"`, torque noise 0: one
classical RK4 step of dt = 0.2 over (theta1, theta2, dtheta1, dtheta2, torque) with Gymnasium's
intermediate steps (y + dt/2 k1, y + dt/2 k2, y + dt k3, y + dt/6 (k1 + 2 k2 + 2 k3 + k4)), its
`_dsdt` term for term (`** 2` is libm's pow, as on NumPy scalars), then `wrap` of both angles
into [-pi, pi] by repeated +-2 pi and `bound` of the velocities to +-4 pi and +-9 pi. Actions
0/1/2 are torques -1/0/+1. Terminated when -cos(theta1) - cos(theta2 + theta1) > 1; reward -1,
0 on the terminal step; truncation after `max_episode_steps` (500). Observations
(cos theta1, sin theta1, cos theta2, sin theta2, dtheta1, dtheta2) as float32. Reset: each state
variable uniform in [-0.1, 0.1), rounded to float32 as Gymnasium does.

The system is chaotic: an ulp of difference grows into a different trajectory within a few dozen
steps, which is why every operation keeps Gymnasium's order.

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
    op_rng_uniform,
)

cdef double DT = 0.2
cdef double LINK_LENGTH_1 = 1.0
cdef double LINK_MASS_1 = 1.0
cdef double LINK_MASS_2 = 1.0
cdef double LINK_COM_POS_1 = 0.5
cdef double LINK_COM_POS_2 = 0.5
cdef double LINK_MOI = 1.0
cdef double MAX_VEL_1 = 4 * M_PI
cdef double MAX_VEL_2 = 9 * M_PI
cdef double G = 9.8
cdef double RESET_LOW = -0.1
cdef double RESET_HIGH = 0.1
cdef double[3] AVAIL_TORQUE = [-1.0, 0.0, 1.0]

STATE_DIM = 4
OBS_DTYPE = "float32"
OBS_SHAPE = (6,)
ACTION_DIM = 0
NUM_ACTIONS = 3
MAX_EPISODE_STEPS = 500


cdef inline void _dsdt(const double *s, double a, double *out) noexcept nogil:
    """Gymnasium's AcrobotEnv._dsdt (book): out = (dtheta1, dtheta2, ddtheta1, ddtheta2)."""
    cdef double m1 = LINK_MASS_1, m2 = LINK_MASS_2, l1 = LINK_LENGTH_1
    cdef double lc1 = LINK_COM_POS_1, lc2 = LINK_COM_POS_2, I1 = LINK_MOI, I2 = LINK_MOI
    cdef double theta1 = s[0], theta2 = s[1], dtheta1 = s[2], dtheta2 = s[3]
    cdef double d1 = (m1 * lc1 * lc1 + m2 * (l1 * l1 + lc2 * lc2 + 2 * l1 * lc2 * cos(theta2))
                      + I1 + I2)
    cdef double d2 = m2 * (lc2 * lc2 + l1 * lc2 * cos(theta2)) + I2
    cdef double phi2 = m2 * lc2 * G * cos(theta1 + theta2 - M_PI / 2.0)
    cdef double phi1 = (-m2 * l1 * lc2 * op_pow2(dtheta2) * sin(theta2)
                        - 2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * sin(theta2)
                        + (m1 * lc1 + m2 * l1) * G * cos(theta1 - M_PI / 2)
                        + phi2)
    cdef double ddtheta2 = ((a + d2 / d1 * phi1 - m2 * l1 * lc2 * op_pow2(dtheta1) * sin(theta2)
                             - phi2)
                            / (m2 * lc2 * lc2 + I2 - op_pow2(d2) / d1))
    cdef double ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
    out[0] = dtheta1
    out[1] = dtheta2
    out[2] = ddtheta1
    out[3] = ddtheta2


cdef inline double _wrap(double x, double m, double M) noexcept nogil:
    cdef double diff = M - m
    while x > M:
        x = x - diff
    while x < m:
        x = x + diff
    return x


cdef void _reset_one(op_batch *b, int64_t i) noexcept nogil:
    cdef int64_t k
    for k in range(4):
        b.state[k * b.num_envs + i] = <float>op_rng_uniform(&b.rng[i], RESET_LOW, RESET_HIGH)


cdef void _write_obs(op_batch *b, int64_t i) noexcept nogil:
    cdef int64_t n = b.num_envs
    cdef double theta1 = b.state[i], theta2 = b.state[n + i]
    cdef float *row = &op_obs_f32(b)[6 * i]
    row[0] = <float>cos(theta1)
    row[1] = <float>sin(theta1)
    row[2] = <float>cos(theta2)
    row[3] = <float>sin(theta2)
    row[4] = <float>b.state[2 * n + i]
    row[5] = <float>b.state[3 * n + i]


cdef double _step_one(op_batch *b, int64_t i, int *terminated) noexcept nogil:
    cdef int64_t n = b.num_envs, k
    cdef double torque = AVAIL_TORQUE[b.discrete_actions[i]]
    cdef double y0[4]
    cdef double y[4]
    cdef double k1[4]
    cdef double k2[4]
    cdef double k3[4]
    cdef double k4[4]
    # Gymnasium's rk4(derivs, y0, [0, dt]); the torque rides along as a fifth state with
    # derivative 0, so it stays `torque` in every stage (torque + dt/2 * 0.0 == torque).
    cdef double dt = DT - 0
    cdef double dt2 = dt / 2.0
    for k in range(4):
        y0[k] = b.state[k * n + i]
    _dsdt(y0, torque, k1)
    for k in range(4):
        y[k] = y0[k] + dt2 * k1[k]
    _dsdt(y, torque, k2)
    for k in range(4):
        y[k] = y0[k] + dt2 * k2[k]
    _dsdt(y, torque, k3)
    for k in range(4):
        y[k] = y0[k] + dt * k3[k]
    _dsdt(y, torque, k4)
    for k in range(4):
        y[k] = y0[k] + dt / 6.0 * (k1[k] + 2 * k2[k] + 2 * k3[k] + k4[k])
    y[0] = _wrap(y[0], -M_PI, M_PI)
    y[1] = _wrap(y[1], -M_PI, M_PI)
    y[2] = min(max(y[2], -MAX_VEL_1), MAX_VEL_1)
    y[3] = min(max(y[3], -MAX_VEL_2), MAX_VEL_2)
    for k in range(4):
        b.state[k * n + i] = y[k]
    terminated[0] = -cos(y[0]) - cos(y[1] + y[0]) > 1.0
    return 0.0 if terminated[0] else -1.0


cdef int64_t _step(op_batch *b) noexcept nogil:
    return op_batch_step(b, _step_one, _write_obs, _reset_one)


include "kernel_common.pxi"


@cython.final
cdef class AcrobotKernel(BatchKernel):
    """N Acrobot-v1 environments; `state` rows: theta1, theta2, dtheta1, dtheta2."""

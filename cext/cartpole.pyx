# cython: language_level=3
"""CartPole-v1 as a batch kernel over N environments.

Layering: operant.trainer.envs.native -> BatchKernel (kernel_common.pxi, included below) ->
op_batch_step in kernel_common.h (action check, SAME_STEP autoreset, episode reduction, RNG) ->
the env functions `_reset_one`, `_write_obs`, `_step_one` here.

Dynamics are Gymnasium's CartPole-v1 exactly: Euler integrator, float64 state, float32
observations, +-2.4 / +-12 degree termination, reward 1 on every step including the last, and
truncation after `max_episode_steps` (500).

Autoreset is Gymnasium's SAME_STEP mode: when an episode ends on a step, that step's
terminated/truncated flags and reward describe the ending, `final_obs` holds the terminal
observation, and `obs` already holds the first observation of the next episode.
"""

cimport cython
from libc.math cimport cos, sin
from libc.stdint cimport int64_t, uint64_t

from kernel_common cimport (
    op_batch,
    op_rng_uniform,
    op_write_state_obs,
)

cdef double GRAVITY = 9.8
cdef double MASSCART = 1.0
cdef double MASSPOLE = 0.1
cdef double TOTAL_MASS = MASSPOLE + MASSCART
cdef double LENGTH = 0.5
cdef double POLEMASS_LENGTH = MASSPOLE * LENGTH
cdef double FORCE_MAG = 10.0
cdef double TAU = 0.02
cdef double THETA_THRESHOLD = 12 * 2 * 3.141592653589793 / 360
cdef double X_THRESHOLD = 2.4
cdef double RESET_LOW = -0.05
cdef double RESET_HIGH = 0.05

STATE_DIM = 4
OBS_DIM = 4
ACTION_DIM = 0
NUM_ACTIONS = 2
MAX_EPISODE_STEPS = 500


cdef void _reset_one(op_batch *b, int64_t i) noexcept nogil:
    cdef int64_t n = b.num_envs
    cdef uint64_t *rng = &b.rng[i]
    b.state[i] = op_rng_uniform(rng, RESET_LOW, RESET_HIGH)
    b.state[n + i] = op_rng_uniform(rng, RESET_LOW, RESET_HIGH)
    b.state[2 * n + i] = op_rng_uniform(rng, RESET_LOW, RESET_HIGH)
    b.state[3 * n + i] = op_rng_uniform(rng, RESET_LOW, RESET_HIGH)


cdef void _write_obs(op_batch *b, int64_t i) noexcept nogil:
    op_write_state_obs(b, i)


cdef double _step_one(op_batch *b, int64_t i, int *terminated) noexcept nogil:
    cdef int64_t n = b.num_envs
    cdef double x = b.state[i]
    cdef double x_dot = b.state[n + i]
    cdef double theta = b.state[2 * n + i]
    cdef double theta_dot = b.state[3 * n + i]
    cdef double force = FORCE_MAG if b.discrete_actions[i] == 1 else -FORCE_MAG
    cdef double costheta = cos(theta)
    cdef double sintheta = sin(theta)
    # Same operation order as Gymnasium so float64 results agree bit for bit.
    cdef double temp = (force + POLEMASS_LENGTH * (theta_dot * theta_dot) * sintheta) / TOTAL_MASS
    cdef double thetaacc = (GRAVITY * sintheta - costheta * temp) / (
        LENGTH * (4.0 / 3.0 - MASSPOLE * (costheta * costheta) / TOTAL_MASS))
    cdef double xacc = temp - POLEMASS_LENGTH * thetaacc * costheta / TOTAL_MASS
    x = x + TAU * x_dot
    x_dot = x_dot + TAU * xacc
    theta = theta + TAU * theta_dot
    theta_dot = theta_dot + TAU * thetaacc
    b.state[i] = x
    b.state[n + i] = x_dot
    b.state[2 * n + i] = theta
    b.state[3 * n + i] = theta_dot
    terminated[0] = (x < -X_THRESHOLD or x > X_THRESHOLD
                     or theta < -THETA_THRESHOLD or theta > THETA_THRESHOLD)
    return 1.0


include "kernel_common.pxi"


@cython.final
cdef class CartPoleKernel(BatchKernel):
    """N CartPole-v1 environments; `state` rows: x, x_dot, theta, theta_dot."""

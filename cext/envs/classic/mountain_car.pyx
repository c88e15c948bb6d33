# cython: language_level=3
"""MountainCar-v0 as a batch kernel over N environments.

Layering: operant.envs.native.vector -> BatchKernel (kernel_common.pxi, included below) ->
op_batch_step in kernel_common.h (action check, SAME_STEP autoreset, episode reduction, RNG) ->
the env functions `_reset_one`, `_write_obs`, `_step_one` here.

Dynamics are Gymnasium's MountainCar-v0 exactly (its state stays float64; observations are
float32): actions 0/1/2 push left/none/right with force 0.001, gravity 0.0025 * cos(3 x),
velocity clipped to +-0.07, position to [-1.2, 0.6] with the velocity zeroed on hitting the left
wall, termination at position >= 0.5 (goal velocity 0), reward -1 on every step, truncation
after `max_episode_steps` (200). Reset: position uniform in [-0.6, -0.4), velocity 0.

Autoreset is Gymnasium's SAME_STEP mode (see kernel_common.h, op_batch_step).
"""

cimport cython
from libc.math cimport cos
from libc.stdint cimport int64_t

from kernel_common cimport (
    op_batch,
    op_batch_step,
    op_rng_uniform,
    op_write_state_obs,
)

cdef double MIN_POSITION = -1.2
cdef double MAX_POSITION = 0.6
cdef double MAX_SPEED = 0.07
cdef double GOAL_POSITION = 0.5
cdef double GOAL_VELOCITY = 0.0
cdef double FORCE = 0.001
cdef double GRAVITY = 0.0025
cdef double RESET_LOW = -0.6
cdef double RESET_HIGH = -0.4

STATE_DIM = 2
OBS_DTYPE = "float32"
OBS_SHAPE = (2,)
ACTION_DIM = 0
NUM_ACTIONS = 3
MAX_EPISODE_STEPS = 200


cdef void _reset_one(op_batch *b, int64_t i) noexcept nogil:
    b.state[i] = op_rng_uniform(&b.rng[i], RESET_LOW, RESET_HIGH)
    b.state[b.num_envs + i] = 0.0


cdef void _write_obs(op_batch *b, int64_t i) noexcept nogil:
    op_write_state_obs(b, i, 2)


cdef double _step_one(op_batch *b, int64_t i, int *terminated) noexcept nogil:
    cdef int64_t n = b.num_envs
    cdef double position = b.state[i]
    cdef double velocity = b.state[n + i]
    # Gymnasium: velocity += (action - 1) * force + cos(3 * position) * (-gravity)
    velocity = velocity + ((b.discrete_actions[i] - 1) * FORCE + cos(3 * position) * (-GRAVITY))
    velocity = min(max(velocity, -MAX_SPEED), MAX_SPEED)
    position = position + velocity
    position = min(max(position, MIN_POSITION), MAX_POSITION)
    if position == MIN_POSITION and velocity < 0:
        velocity = 0.0
    b.state[i] = position
    b.state[n + i] = velocity
    terminated[0] = position >= GOAL_POSITION and velocity >= GOAL_VELOCITY
    return -1.0


cdef int64_t _step(op_batch *b) noexcept nogil:
    return op_batch_step(b, _step_one, _write_obs, _reset_one)


include "kernel_common.pxi"


@cython.final
cdef class MountainCarKernel(BatchKernel):
    """N MountainCar-v0 environments; `state` rows: position, velocity."""

# cython: language_level=3
"""MountainCarContinuous-v0 as a batch kernel over N environments.

Layering: operant.envs.native.vector -> BatchKernel (kernel_common.pxi, included below) ->
op_batch_step in kernel_common.h (action check, SAME_STEP autoreset, episode reduction, RNG) ->
the env functions `_reset_one`, `_write_obs`, `_step_one` here.

Dynamics are Gymnasium's MountainCarContinuous-v0 exactly, including its number types, which
matter at the last bit:
- Gymnasium stores the state as a float32 array after every step, and NumPy 2 computes
  `float32 (op) Python float` in float32. So from the second step of an episode on, the
  velocity and position updates, clips and comparisons run in float32 (`float` here); on the
  first step the state is still the float64 array reset made and they run in float64. The state
  array stays float64 but always holds what Gymnasium holds.
- Actions are float32 (N, 1). The force is the action clipped to [-1, 1]; an out-of-range
  action becomes a Python float +-1.0, so that step's force term is float64 instead of float32.
  The reward charges the *unclipped* action: 100 on reaching the goal, minus 0.1 * action**2.
  Gymnasium does not refuse out-of-range actions and neither does this kernel; NaN and
  infinities are refused (step returns the env's index).
- Termination at position >= 0.45 with velocity >= 0; truncation after `max_episode_steps`
  (999). Reset: position uniform in [-0.6, -0.4), velocity 0.

Autoreset is Gymnasium's SAME_STEP mode (see kernel_common.h, op_batch_step).
"""

cimport cython
from libc.math cimport cos, pow
from libc.stdint cimport int64_t

from kernel_common cimport (
    op_batch,
    op_batch_step,
    op_pow2,
    op_rng_uniform,
    op_write_state_obs,
)

cdef double MIN_ACTION = -1.0
cdef double MAX_ACTION = 1.0
cdef double MIN_POSITION = -1.2
cdef double MAX_POSITION = 0.6
cdef double MAX_SPEED = 0.07
cdef double GOAL_POSITION = 0.45
cdef double GOAL_VELOCITY = 0.0
cdef double POWER = 0.0015
cdef double GRAVITY = 0.0025
cdef double RESET_LOW = -0.6
cdef double RESET_HIGH = -0.4
cdef float POWER_F = <float>POWER  # as NumPy casts it to meet a float32 action

STATE_DIM = 2
OBS_DTYPE = "float32"
OBS_SHAPE = (2,)
ACTION_DIM = 1
NUM_ACTIONS = 0
MAX_EPISODE_STEPS = 999


cdef void _reset_one(op_batch *b, int64_t i) noexcept nogil:
    b.state[i] = op_rng_uniform(&b.rng[i], RESET_LOW, RESET_HIGH)
    b.state[b.num_envs + i] = 0.0


cdef void _write_obs(op_batch *b, int64_t i) noexcept nogil:
    op_write_state_obs(b, i, 2)


ctypedef fused real:
    float
    double


cdef inline void _move(real position, real velocity, real increment, double *state,
                       int64_t n, int64_t i, int *terminated) noexcept nogil:
    """Gymnasium's step after the force term, in the number type its state has then (float64
    on an episode's first step, float32 after): constants are cast to it as NumPy casts a Python
    float that meets a float32."""
    velocity = velocity + increment
    if velocity > <real>MAX_SPEED:
        velocity = <real>MAX_SPEED
    if velocity < <real>-MAX_SPEED:
        velocity = <real>-MAX_SPEED
    position = position + velocity
    if position > <real>MAX_POSITION:
        position = <real>MAX_POSITION
    if position < <real>MIN_POSITION:
        position = <real>MIN_POSITION
    if position == <real>MIN_POSITION and velocity < 0:
        velocity = 0
    terminated[0] = position >= <real>GOAL_POSITION and velocity >= GOAL_VELOCITY
    # Gymnasium stores the state as a float32 array.
    state[i] = <float>position
    state[n + i] = <float>velocity


cdef double _step_one(op_batch *b, int64_t i, int *terminated) noexcept nogil:
    cdef int64_t n = b.num_envs
    cdef float action = b.continuous_actions[i]
    cdef bint first_step = b.episode_length[i] == 0
    cdef double position = b.state[i]
    cdef double velocity = b.state[n + i]
    cdef double gravity_term, increment
    # velocity += force * power - 0.0025 * cos(3 * position), where force is the float32
    # action in range and the Python float +-1.0 out of it.
    if first_step:
        gravity_term = GRAVITY * cos(3 * position)
    else:
        gravity_term = GRAVITY * cos(<float>3 * <float>position)
    if MIN_ACTION <= action <= MAX_ACTION:
        increment = <float>(action * POWER_F) - <float>gravity_term
    else:
        increment = (MAX_ACTION if action > MAX_ACTION else MIN_ACTION) * POWER - gravity_term
    if first_step:
        _move[double](position, velocity, increment, b.state, n, i, terminated)
    else:
        _move[float](<float>position, <float>velocity, <float>increment, b.state, n, i,
                     terminated)
    # The reward charges the unclipped action.
    return (100.0 if terminated[0] else 0.0) - op_pow2(action) * 0.1


cdef int64_t _step(op_batch *b) noexcept nogil:
    return op_batch_step(b, _step_one, _write_obs, _reset_one)


include "kernel_common.pxi"


@cython.final
cdef class MountainCarContinuousKernel(BatchKernel):
    """N MountainCarContinuous-v0 environments; `state` rows: position, velocity."""

# cython: language_level=3
"""CartPole-v1 as a batch kernel over N environments.

Layering: Python face (operant.trainer.envs) -> this kernel -> kernel_common.h (RNG, episode
reduction). The kernel owns its state as structure-of-arrays (one row per state variable, one
column per env) and one SplitMix64 word per env; the caller owns every input/output buffer and
hands them over once, at construction. `step()` then reads the bound action buffer and writes
observations, rewards and flags in place, with the GIL released, no allocation and no Python
object per step.

Dynamics are Gymnasium's CartPole-v1 exactly: Euler integrator, float64 state, float32
observations, +-2.4 / +-12 degree termination, reward 1 on every step including the last, and
truncation after `max_episode_steps` (500).

Autoreset is Gymnasium's SAME_STEP mode: when an episode ends on a step, that step's
terminated/truncated flags and reward describe the ending, `final_obs` holds the terminal
observation, and `obs` already holds the first observation of the next episode.
"""

cimport cython
from libc.math cimport cos, sin
from libc.stdint cimport int64_t, uint8_t, uint64_t

import numpy as np

from kernel_common cimport (
    OP_STAT_SIZE,
    op_episode_done,
    op_rng_seed,
    op_rng_uniform,
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

OBS_DIM = 4
STATE_DIM = 4
RECENT_CAPACITY = 1024


cdef class CartPoleKernel:
    """N CartPole-v1 environments stepped together; see the module docstring for the contract."""

    cdef readonly int num_envs
    cdef readonly int max_episode_steps
    # Kernel-owned state (numpy arrays so checkpoints and tests can read and inject them).
    cdef public object state            # float64 (4, N): x, x_dot, theta, theta_dot
    cdef public object rng_state        # uint64 (N,)
    cdef public object episode_return   # float64 (N,)
    cdef public object episode_length   # int64 (N,)
    cdef public object stats            # float64 (OP_STAT_SIZE,): reduction since last drain
    cdef public object recent_returns   # float64 (RECENT_CAPACITY,)
    cdef public object recent_lengths   # float64 (RECENT_CAPACITY,)
    cdef public object recent_head      # uint64 (1,): episodes recorded ever
    # Caller-owned buffers, kept referenced so their memory outlives the kernel.
    cdef object _buffers
    cdef double[:, ::1] _state
    cdef uint64_t[::1] _rng
    cdef double[::1] _ep_return
    cdef int64_t[::1] _ep_length
    cdef double[::1] _stats
    cdef double[::1] _recent_returns
    cdef double[::1] _recent_lengths
    cdef uint64_t[::1] _recent_head
    cdef const int64_t[::1] _actions     # IN
    cdef float[:, ::1] _obs              # OUT
    cdef float[::1] _rewards             # OUT
    cdef uint8_t[::1] _terminated        # OUT (bool memory viewed as uint8)
    cdef uint8_t[::1] _truncated         # OUT
    cdef float[:, ::1] _final_obs        # OUT: terminal observation of envs that ended

    def __init__(self, int num_envs, actions, obs, rewards, terminated, truncated, final_obs,
                 int max_episode_steps=500):
        if num_envs <= 0:
            raise ValueError(f"num_envs must be positive, got {num_envs}")
        self.num_envs = num_envs
        self.max_episode_steps = max_episode_steps
        self.state = np.zeros((STATE_DIM, num_envs), dtype=np.float64)
        self.rng_state = np.zeros(num_envs, dtype=np.uint64)
        self.episode_return = np.zeros(num_envs, dtype=np.float64)
        self.episode_length = np.zeros(num_envs, dtype=np.int64)
        self.stats = np.zeros(OP_STAT_SIZE, dtype=np.float64)
        self.recent_returns = np.zeros(RECENT_CAPACITY, dtype=np.float64)
        self.recent_lengths = np.zeros(RECENT_CAPACITY, dtype=np.float64)
        self.recent_head = np.zeros(1, dtype=np.uint64)
        self._state = self.state
        self._rng = self.rng_state
        self._ep_return = self.episode_return
        self._ep_length = self.episode_length
        self._stats = self.stats
        self._recent_returns = self.recent_returns
        self._recent_lengths = self.recent_lengths
        self._recent_head = self.recent_head
        self._buffers = (actions, obs, rewards, terminated, truncated, final_obs)
        self._actions = actions
        self._obs = obs
        self._rewards = rewards
        self._terminated = terminated.view(np.uint8)
        self._truncated = truncated.view(np.uint8)
        self._final_obs = final_obs
        for name, rows in (("actions", self._actions.shape[0]), ("obs", self._obs.shape[0]),
                           ("rewards", self._rewards.shape[0]),
                           ("terminated", self._terminated.shape[0]),
                           ("truncated", self._truncated.shape[0]),
                           ("final_obs", self._final_obs.shape[0])):
            if rows != num_envs:
                raise ValueError(f"buffer {name} has {rows} rows, expected num_envs={num_envs}")
        if self._obs.shape[1] != OBS_DIM or self._final_obs.shape[1] != OBS_DIM:
            raise ValueError(f"obs buffers must have {OBS_DIM} columns")

    @cython.boundscheck(False)
    @cython.wraparound(False)
    cdef inline void _reset_one(self, Py_ssize_t i) noexcept nogil:
        cdef uint64_t *rng = &self._rng[i]
        self._state[0, i] = op_rng_uniform(rng, RESET_LOW, RESET_HIGH)
        self._state[1, i] = op_rng_uniform(rng, RESET_LOW, RESET_HIGH)
        self._state[2, i] = op_rng_uniform(rng, RESET_LOW, RESET_HIGH)
        self._state[3, i] = op_rng_uniform(rng, RESET_LOW, RESET_HIGH)
        self._ep_return[i] = 0.0
        self._ep_length[i] = 0

    @cython.boundscheck(False)
    @cython.wraparound(False)
    cdef inline void _write_obs(self, Py_ssize_t i) noexcept nogil:
        self._obs[i, 0] = <float>self._state[0, i]
        self._obs[i, 1] = <float>self._state[1, i]
        self._obs[i, 2] = <float>self._state[2, i]
        self._obs[i, 3] = <float>self._state[3, i]

    @cython.boundscheck(False)
    @cython.wraparound(False)
    def reset(self, seed=None):
        """Start a new episode in every env and write `obs`.

        With a seed, env i's stream is first re-seeded from (seed, i); without one the streams
        continue, so successive resets differ.
        """
        cdef Py_ssize_t i
        cdef bint reseed = seed is not None
        cdef uint64_t seed_value = <uint64_t>seed if reseed else 0
        with nogil:
            for i in range(self.num_envs):
                if reseed:
                    self._rng[i] = op_rng_seed(seed_value, <uint64_t>i)
                self._reset_one(i)
                self._write_obs(i)
                self._terminated[i] = 0
                self._truncated[i] = 0
                self._rewards[i] = 0.0

    @cython.boundscheck(False)
    @cython.wraparound(False)
    def write_obs(self):
        """Rewrite `obs` from `state` (after a test or a checkpoint injected state)."""
        cdef Py_ssize_t i
        with nogil:
            for i in range(self.num_envs):
                self._write_obs(i)

    def step(self):
        """Advance every env by the action in the bound action buffer.

        Returns -1 on success, else the index of the first env whose action is not 0 or 1
        (then no env has moved).
        """
        cdef Py_ssize_t result
        with nogil:
            result = self.step_nogil()
        return result

    @cython.boundscheck(False)
    @cython.wraparound(False)
    cdef Py_ssize_t step_nogil(self) noexcept nogil:
        cdef Py_ssize_t i, n = self.num_envs
        cdef int64_t action
        cdef double x, x_dot, theta, theta_dot, force, costheta, sintheta, temp
        cdef double thetaacc, xacc
        cdef bint terminated, truncated
        cdef uint64_t capacity = self._recent_returns.shape[0]
        for i in range(n):
            action = self._actions[i]
            if action != 0 and action != 1:
                return i
        for i in range(n):
            x = self._state[0, i]
            x_dot = self._state[1, i]
            theta = self._state[2, i]
            theta_dot = self._state[3, i]
            force = FORCE_MAG if self._actions[i] == 1 else -FORCE_MAG
            costheta = cos(theta)
            sintheta = sin(theta)
            # Same operation order as Gymnasium so float64 results agree bit for bit.
            temp = (force + POLEMASS_LENGTH * (theta_dot * theta_dot) * sintheta) / TOTAL_MASS
            thetaacc = (GRAVITY * sintheta - costheta * temp) / (
                LENGTH * (4.0 / 3.0 - MASSPOLE * (costheta * costheta) / TOTAL_MASS))
            xacc = temp - POLEMASS_LENGTH * thetaacc * costheta / TOTAL_MASS
            x = x + TAU * x_dot
            x_dot = x_dot + TAU * xacc
            theta = theta + TAU * theta_dot
            theta_dot = theta_dot + TAU * thetaacc
            self._state[0, i] = x
            self._state[1, i] = x_dot
            self._state[2, i] = theta
            self._state[3, i] = theta_dot
            terminated = (x < -X_THRESHOLD or x > X_THRESHOLD
                          or theta < -THETA_THRESHOLD or theta > THETA_THRESHOLD)
            self._ep_return[i] += 1.0
            self._ep_length[i] += 1
            truncated = self._ep_length[i] >= self.max_episode_steps
            self._rewards[i] = 1.0
            self._terminated[i] = terminated
            self._truncated[i] = truncated
            self._write_obs(i)
            if terminated or truncated:
                self._final_obs[i, 0] = self._obs[i, 0]
                self._final_obs[i, 1] = self._obs[i, 1]
                self._final_obs[i, 2] = self._obs[i, 2]
                self._final_obs[i, 3] = self._obs[i, 3]
                op_episode_done(&self._stats[0], &self._recent_returns[0],
                                &self._recent_lengths[0], &self._recent_head[0], capacity,
                                self._ep_return[i], <double>self._ep_length[i])
                self._reset_one(i)
                self._write_obs(i)
        return -1

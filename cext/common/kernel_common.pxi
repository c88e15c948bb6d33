# The kernel class every env kernel module shares. Kernels are separate extension modules and
# Cython cannot give them a common base class across modules, so each one includes this file at
# module level (`include "kernel_common.pxi"`) after defining:
#   STATE_DIM                   rows of `state`
#   OBS_DTYPE, OBS_SHAPE        one env's observation row (any numpy dtype and shape; the
#                               classic-control kernels: "float32", (obs_dim,))
#   ACTION_DIM, NUM_ACTIONS     ACTION_DIM 0: one int64 action per env in 0 .. NUM_ACTIONS - 1;
#                               otherwise float32 actions shaped (N, ACTION_DIM)
#   MAX_EPISODE_STEPS           Gymnasium's time limit for the env
#   _reset_one, _write_obs      the env's reset and observation (kernel_common.h: op_reset_fn,
#                               op_obs_fn)
#   _step                       one step of the batch: op_batch_step with the env's step
#                               function, or op_batch_step_all for dynamics that vectorise
# and then subclasses BatchKernel under the env's name, with a docstring naming its state rows.
# The env functions are module-level cdef functions, so the always-inlined batch loop turns
# them into direct, inlinable calls: no indirection per env per step.

from cpython.pycapsule cimport PyCapsule_New
from libc.stdint cimport int64_t

from kernel_common cimport (
    op_batch,
    op_batch_bind,
    op_batch_reset,
    op_batch_write_obs,
    op_kernel_step_fn,
    op_stepper,
)
from kernel_slots cimport op_slot_table, op_slots_bind, op_slots_init, op_slots_select


cdef class BatchKernel:
    """N environments stepped together, Gymnasium's dynamics in C.

    The caller owns the buffers `actions` (IN: int64 (N,) or float32 (N, act_dim)), `obs`,
    `final_obs` (OUT: (N, *OBS_SHAPE) of OBS_DTYPE, e.g. float32 (N, obs_dim); anything else is
    refused with a ValueError), `rewards` (OUT: float32 (N,)), `terminated`,
    `truncated` (OUT: bool (N,)), hands them over once here, and keeps writing actions into the
    same memory; `step()` writes the outputs in place, with the GIL released, no allocation and
    no Python object per step. Autoreset is Gymnasium's SAME_STEP mode (kernel_common.h,
    op_batch_step). The kernel owns `state` (float64 (state_dim, N)), `rng_state` (one
    SplitMix64 word per env), `episode_return`/`episode_length`, the finished-episode reduction
    `stats` (one op_episode_stats record: a structured array of shape (1,) whose fields are
    operant.envs.contract.EPISODE_STATS_DTYPE's) and the ring
    `recent_returns`/`recent_lengths`/`recent_head`: numpy arrays that tests and checkpoints
    may read and write in place (never rebind them).

    `index_offset` k makes this kernel's env i draw from RNG stream (seed, k + i): a kernel
    over rows k.. of a larger batch starts the same episodes as the whole batch's would.
    """

    cdef op_batch _batch
    cdef op_slot_table _slots
    cdef op_stepper _stepper
    cdef readonly int num_envs, max_episode_steps
    cdef readonly object state, rng_state, episode_return, episode_length
    cdef readonly object stats, recent_returns, recent_lengths, recent_head
    cdef object _buffers  # the caller's buffers, kept alive as long as the kernel
    cdef object _slot_arrays  # arrays bound by bind_slots, alive while bound

    def __init__(self, int num_envs, actions, obs, rewards, terminated, truncated, final_obs,
                 int max_episode_steps=MAX_EPISODE_STEPS, int64_t index_offset=0):
        (self.state, self.rng_state, self.episode_return, self.episode_length, self.stats,
         self.recent_returns, self.recent_lengths, self.recent_head) = op_batch_bind(
            &self._batch, num_envs, STATE_DIM, OBS_DTYPE, OBS_SHAPE, ACTION_DIM, NUM_ACTIONS,
            max_episode_steps, actions, obs, rewards, terminated, truncated, final_obs,
            index_offset)
        self._buffers = (actions, obs, rewards, terminated, truncated, final_obs)
        self.num_envs = num_envs
        self.max_episode_steps = max_episode_steps
        self._stepper.batch = &self._batch
        self._stepper.step = <op_kernel_step_fn>_step
        op_slots_init(&self._batch, &self._slots)

    def bind_slots(self, obs=None, rewards=None, terminated=None, truncated=None, actions=None,
                   final_obs=None):
        """Bind (slots, N, ...) arrays whose slots `select()` points this kernel at
        (kernel_slots.pxd); None keeps the kernel's own buffer; no argument unbinds them all."""
        self._slot_arrays = op_slots_bind(
            &self._batch, &self._slots, OBS_DTYPE, OBS_SHAPE,
            (obs, rewards, terminated, truncated, actions, final_obs))

    def select(self, int64_t obs_slot, int64_t step_slot):
        """Write the next step's observations into slot `obs_slot` and its rewards, flags and
        final observations into (and read its actions from) slot `step_slot` of the bound
        arrays; -1 is the kernel's own buffer. IndexError for a slot past an array's end."""
        if op_slots_select(&self._batch, &self._slots, obs_slot, step_slot) < 0:
            raise IndexError(f"slot ({obs_slot}, {step_slot}) is past the bound arrays")

    @property
    def obs_address(self):
        """The address the next step writes observation row 0 to (tests compare it)."""
        return <size_t>self._batch.obs

    @property
    def action_slot(self):
        """The slot of the bound actions the next step reads; -1: the kernel's own buffer."""
        return self._slots.step_slot

    def stepper(self):
        """This kernel's step as a C function and its batch, in a capsule for a native thread
        (operant.cext.overlap.StepThread). Whoever holds the capsule keeps the kernel alive."""
        return PyCapsule_New(&self._stepper, b"operant.op_stepper", NULL)

    def reset(self, seed=None):
        """Start a new episode in every env and write `obs`; a seed first re-seeds env i's
        stream from (seed, index_offset + i), no seed continues the streams."""
        op_batch_reset(&self._batch, seed is not None, 0 if seed is None else seed,
                       _reset_one, _write_obs)

    def write_obs(self):
        """Rewrite `obs` from `state` (after a test or a checkpoint injected state)."""
        op_batch_write_obs(&self._batch, _write_obs)

    def step(self):
        """Advance every env by its action in the bound action buffer. Returns -1, or the index
        of the first env whose action is invalid (outside a discrete space; NaN or infinite in
        a continuous one), and then no env has moved."""
        cdef int64_t result
        with nogil:
            result = self.step_nogil()
        return result

    cdef int64_t step_nogil(self) noexcept nogil:
        return _step(&self._batch)

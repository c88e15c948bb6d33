# cython: language_level=3
"""The grid world as a batch kernel: N envs x K agents stepped in one nogil call.

Layering: operant.envs.grid.vector (the Gymnasium / BatchEnv face) -> GridKernel (this file: owns the
state arrays, checks the caller's buffers, points grid.h's struct at both) -> grid_step in
grid.h (the rules, phase by phase over the batch, the two token encoders, SAME_STEP autoreset,
the episode reduction). The rules are in grid.h's opening comment and docs/envs.md; the
configuration is operant.envs.grid.config.GridConfig, checked there before it gets here.

Rows are agents: row r is agent r % K of env r // K. Buffers (the caller's, bound once):
  actions     IN   int64 (rows,)            0 .. 8 (grid.h: GRID_NUM_ACTIONS)
  obs         OUT  uint8 (rows, tokens, 3)  tokens (location, feature, value), 0xFF padded
  final_obs   OUT  uint8 (rows, tokens, 3)  the terminal observation of rows that ended
  rewards     OUT  float32 (rows,)
  terminated, truncated  OUT  bool (rows,)  (the grid only truncates)
"""

cimport cython
from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t

from kernel_common cimport op_episode_stats, op_episode_stats_record

cdef extern from "grid.h" nogil:
    ctypedef struct grid_batch:
        int64_t num_envs, agents, width, height, cells, row_words
        int64_t window, tokens, max_steps, regrow, num_walls, num_resources
        const uint8_t *layout
        const int32_t *layout_free
        int64_t layout_free_count
        int encoder, validate, profile
        uint64_t *rng
        int64_t *step_count
        uint8_t *cell
        int32_t *occupant
        uint64_t *row_bits
        int32_t *queue_cell
        int64_t *queue_due
        int64_t *queue_head
        int64_t *queue_tail
        int32_t *agent_row
        int32_t *agent_col
        uint8_t *agent_dir
        double *episode_return
        const int64_t *actions
        uint8_t *obs
        uint8_t *final_obs
        float *rewards
        uint8_t *terminated
        uint8_t *truncated
        op_episode_stats *row_stats
        op_episode_stats *env_stats
        double *ring_returns
        double *ring_lengths
        double *env_ring_returns
        double *env_ring_lengths
        uint64_t *ring_head
        uint64_t *env_ring_head
        uint64_t ring_capacity
        int32_t *scratch
        int32_t *order
        uint8_t *check_obs
        uint64_t *mismatches
        uint64_t *timing
    int GRID_PHASES
    int GRID_NUM_ACTIONS
    int64_t grid_step(grid_batch *b)
    void grid_reset(grid_batch *b, int reseed, uint64_t seed)

import numpy as np

PHASES = ("reset", "regrowth", "actions", "rewards", "observations", "truncation")
"""Profiling phases in step order (grid.h's GRID_PHASE_*): `timing[i]` is PHASES[i]'s ns."""
NUM_ACTIONS = GRID_NUM_ACTIONS
ENCODERS = ("scan", "sparse")

# Arrays that make up the kernel's state (what a checkpoint saves), in a stable order.
STATE = ("rng_state", "step_count", "cell", "occupant", "row_bits", "queue_cell", "queue_due",
         "queue_head", "queue_tail", "agent_row", "agent_col", "agent_dir", "episode_return",
         "row_stats", "env_stats", "ring_returns", "ring_lengths", "env_ring_returns",
         "env_ring_lengths", "ring_head", "env_ring_head")


def _check_buffer(name, array, dtype, shape):
    if not isinstance(array, np.ndarray) or array.dtype != dtype or array.shape != shape \
            or not array.flags.c_contiguous or not array.flags.writeable:
        raise ValueError(f"buffer {name} must be a writeable C-contiguous {np.dtype(dtype)} "
                         f"array of shape {shape}, got {getattr(array, 'dtype', type(array))} "
                         f"{getattr(array, 'shape', '')}")
    return array


cdef class GridKernel:
    """`num_envs` grid worlds of `config.agents` agents (a checked GridConfig), stepped by
    `step()` with the GIL released, no allocation and no Python object per step.

    `encoder` picks the observation path ("sparse", the default: occupancy bits per map row,
    visiting only occupied cells; "scan": every window cell). `validate` runs the other one
    too and adds the bytes where they differ to `mismatches[0]`; `profile` adds each phase's
    nanoseconds to `timing` (PHASES order). The state arrays (STATE) are numpy arrays that
    tests and checkpoints may read and write in place (never rebind them).
    """

    cdef grid_batch _b
    cdef readonly int num_envs, agents, tokens
    cdef readonly object rng_state, step_count, cell, occupant, row_bits, queue_cell, queue_due
    cdef readonly object queue_head, queue_tail, agent_row, agent_col, agent_dir
    cdef readonly object episode_return, row_stats, env_stats, ring_returns, ring_lengths
    cdef readonly object env_ring_returns, env_ring_lengths, ring_head, env_ring_head
    cdef readonly object mismatches, timing
    cdef dict _keep  # the caller's buffers, the layout and the scratch arrays, by name

    def __init__(self, int num_envs, config, actions, obs, rewards, terminated, truncated,
                 final_obs, str encoder="sparse", bint validate=False, bint profile=False,
                 int ring_capacity=1024):
        if num_envs <= 0:
            raise ValueError(f"num_envs must be positive, got {num_envs}")
        if encoder not in ENCODERS:
            raise ValueError(f"encoder must be one of {ENCODERS}, got {encoder!r}")
        config.check()
        K, cells = config.agents, config.cells
        rows, row_shape = num_envs * K, (num_envs * config.agents, config.tokens, 3)
        self.num_envs, self.agents, self.tokens = num_envs, K, config.tokens
        layout = config.layout_cells()
        self._keep = {
            "actions": _check_buffer("actions", actions, np.int64, (rows,)),
            "obs": _check_buffer("obs", obs, np.uint8, row_shape),
            "final_obs": _check_buffer("final_obs", final_obs, np.uint8, row_shape),
            "rewards": _check_buffer("rewards", rewards, np.float32, (rows,)),
            "terminated": _check_buffer("terminated", terminated, np.bool_, (rows,)),
            "truncated": _check_buffer("truncated", truncated, np.bool_, (rows,)),
            "layout": np.zeros(1, np.uint8) if layout is None else layout,
            "free": (np.zeros(1, np.int32) if layout is None
                     else np.flatnonzero(layout == 0).astype(np.int32)),
            "scratch": np.zeros(cells, np.int32), "order": np.zeros(K, np.int32),
            "check_obs": np.zeros(config.tokens * 3, np.uint8)}
        self._allocate(num_envs, rows, cells, config.map_height, (config.map_width + 63) // 64,
                       ring_capacity)
        self._bind(config, ENCODERS.index(encoder), validate, profile, ring_capacity)

    cdef _allocate(self, num_envs, rows, cells, height, words, ring_capacity):
        """The kernel's own arrays (STATE, the counters), zeroed."""
        self.rng_state = np.zeros(num_envs, np.uint64)
        self.step_count = np.zeros(num_envs, np.int64)
        self.cell = np.zeros((num_envs, cells), np.uint8)
        self.occupant = np.zeros((num_envs, cells), np.int32)
        self.row_bits = np.zeros((num_envs, height, words), np.uint64)
        self.queue_cell = np.zeros((num_envs, cells), np.int32)
        self.queue_due = np.zeros((num_envs, cells), np.int64)
        self.queue_head = np.zeros(num_envs, np.int64)
        self.queue_tail = np.zeros(num_envs, np.int64)
        self.agent_row = np.zeros(rows, np.int32)
        self.agent_col = np.zeros(rows, np.int32)
        self.agent_dir = np.zeros(rows, np.uint8)
        self.episode_return = np.zeros(rows, np.float64)
        self.row_stats = op_episode_stats_record()
        self.env_stats = op_episode_stats_record()
        self.ring_returns = np.zeros(ring_capacity, np.float64)
        self.ring_lengths = np.zeros(ring_capacity, np.float64)
        self.env_ring_returns = np.zeros(ring_capacity, np.float64)
        self.env_ring_lengths = np.zeros(ring_capacity, np.float64)
        self.ring_head = np.zeros(1, np.uint64)
        self.env_ring_head = np.zeros(1, np.uint64)
        self.mismatches = np.zeros(1, np.uint64)
        self.timing = np.zeros(GRID_PHASES, np.uint64)

    cdef _bind(self, config, int encoder, bint validate, bint profile, int ring_capacity):
        """Point grid.h's struct at the configuration, the kernel's arrays and _keep's."""
        cdef grid_batch *b = &self._b
        keep = self._keep
        b.num_envs, b.agents = self.num_envs, self.agents
        b.width, b.height, b.cells = config.map_width, config.map_height, config.cells
        b.row_words, b.window, b.tokens = self.row_bits.shape[2], config.window, config.tokens
        b.max_steps, b.regrow = config.max_episode_steps, config.regrow_steps
        b.num_walls, b.num_resources = config.num_walls, config.num_resources
        b.layout = NULL if config.layout is None else <const uint8_t *>_u8(keep["layout"])
        b.layout_free = <const int32_t *>_i32(keep["free"])
        b.layout_free_count = len(keep["free"]) if config.layout is not None else 0
        b.encoder, b.validate, b.profile = encoder, validate, profile
        b.rng, b.step_count = _u64(self.rng_state), _i64(self.step_count)
        b.cell, b.occupant, b.row_bits = _u8(self.cell), _i32(self.occupant), _u64(self.row_bits)
        b.queue_cell, b.queue_due = _i32(self.queue_cell), _i64(self.queue_due)
        b.queue_head, b.queue_tail = _i64(self.queue_head), _i64(self.queue_tail)
        b.agent_row, b.agent_col = _i32(self.agent_row), _i32(self.agent_col)
        b.agent_dir, b.episode_return = _u8(self.agent_dir), _f64(self.episode_return)
        b.actions = <const int64_t *>_i64(keep["actions"])
        b.obs, b.final_obs = _u8(keep["obs"]), _u8(keep["final_obs"])
        b.rewards = <float *>_f32(keep["rewards"])
        b.terminated = _u8(keep["terminated"].view(np.uint8))
        b.truncated = _u8(keep["truncated"].view(np.uint8))
        b.row_stats = <op_episode_stats *>_f64(self.row_stats.view(np.float64))
        b.env_stats = <op_episode_stats *>_f64(self.env_stats.view(np.float64))
        b.ring_returns, b.ring_lengths = _f64(self.ring_returns), _f64(self.ring_lengths)
        b.env_ring_returns = _f64(self.env_ring_returns)
        b.env_ring_lengths = _f64(self.env_ring_lengths)
        b.ring_head, b.env_ring_head = _u64(self.ring_head), _u64(self.env_ring_head)
        b.ring_capacity = ring_capacity
        b.scratch, b.order = _i32(keep["scratch"]), _i32(keep["order"])
        b.check_obs = _u8(keep["check_obs"])
        b.mismatches, b.timing = _u64(self.mismatches), _u64(self.timing)

    def reset(self, seed=None):
        """New episodes everywhere; a seed (0 .. 2**64 - 1) first re-seeds env e's stream
        from (seed, e), None continues the streams."""
        cdef uint64_t s = 0 if seed is None else seed
        cdef int reseed = seed is not None
        with nogil:
            grid_reset(&self._b, reseed, s)

    @cython.boundscheck(False)
    @cython.wraparound(False)
    def step(self):
        """Step every env with the actions in the bound buffer. Returns -1, or the first row
        whose action is outside 0 .. 8 (then nothing moved)."""
        cdef int64_t bad
        with nogil:
            bad = grid_step(&self._b)
        return bad


# Raw pointers into arrays the kernel keeps referenced (memoryviews only to take addresses).
cdef uint8_t *_u8(array) except NULL:
    cdef uint8_t[::1] view = array.reshape(-1)
    return &view[0]


cdef int32_t *_i32(array) except NULL:
    cdef int32_t[::1] view = array.reshape(-1)
    return &view[0]


cdef int64_t *_i64(array) except NULL:
    cdef int64_t[::1] view = array.reshape(-1)
    return &view[0]


cdef uint64_t *_u64(array) except NULL:
    cdef uint64_t[::1] view = array.reshape(-1)
    return &view[0]


cdef double *_f64(array) except NULL:
    cdef double[::1] view = array.reshape(-1)
    return &view[0]


cdef float *_f32(array) except NULL:
    cdef float[::1] view = array.reshape(-1)
    return &view[0]

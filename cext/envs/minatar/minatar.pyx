# cython: language_level=3
"""MinAtar's games as one batch kernel: N envs of one game stepped in one nogil call.

Layering: operant.envs.minatar.vector (the Gymnasium / BatchEnv face) -> MinAtarKernel (this file:
owns the state arrays, checks the caller's buffers through kernel_common.pxd's op_batch_bind,
points minatar.h's struct at both) -> ma_step in minatar.h (each game's rules, MinAtar's
statement by statement, run through kernel_common.h's batch loop: action check, sticky actions,
SAME_STEP autoreset, the episode reduction).

Buffers (the caller's, bound once):
  actions     IN   int64 (N,)              index into the env's action set (GAMES[game]
                                           ["minimal_actions"] by default)
  obs         OUT  uint8 (N, C, 10, 10)    channels first, 0 or 1 (GAMES[game]["channels"])
  final_obs   OUT  uint8 (N, C, 10, 10)    the terminal observation of envs that ended
  rewards     OUT  float32 (N,)
  terminated, truncated  OUT  bool (N,)    truncated only at `max_episode_steps`

State (the kernel's, numpy arrays that tests, parity checks and checkpoints read and write in
place; never rebind them), structure of arrays over envs:
  scalars     int32 (S, N)          GAMES[game]["scalars"] names the rows; a transposed view
                                    of (N, S) memory (minatar.h)
  maps        uint8 (M, N, 10, 10)  GAMES[game]["maps"] (one placeholder map when M is 0)
  slots       int32 (F, N, K)       GAMES[game]["slot_fields"] x K = GAMES[game]["slots"]; a
                                    transposed view of (N, K, F) memory, (K, N, F) for
                                    Seaquest (`slot_major`, minatar.h)
  rng_state   uint64 (N,)           SplitMix64, env i's stream from (seed, index_offset + i)
and the episode accounting every kernel has (episode_return, episode_length, stats, the
recent_returns / recent_lengths ring and its head).
"""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t

from kernel_common cimport op_batch, op_batch_bind, op_kernel_step_fn, op_stepper
from kernel_slots cimport op_slot_table, op_slots_bind, op_slots_init, op_slots_select
from cpython.pycapsule cimport PyCapsule_New

cdef extern from "minatar.h" nogil:
    ctypedef struct ma_batch:
        op_batch base
        int64_t game, channels, maps_per_env, slots_per_env
        int64_t action_map[6]
        double sticky_prob
        int64_t ramping
        int32_t *scalars
        int64_t scalars_per_env
        uint8_t *maps
        int32_t *slots
        uint8_t *packed
    int64_t ma_step(ma_batch *m)
    void ma_copy_out(const ma_batch *m, uint8_t *obs, uint8_t *final_obs)
    void ma_reset(ma_batch *m, int reseed, uint64_t seed)
    void ma_write_obs(ma_batch *m)
    int64_t ma_step_batch(op_batch *b)
    int64_t fs_packed_bytes(int64_t frame_bytes)
    int fs_pack_init(int level)

import numpy as np

fs_pack_init(2)

NO_TIME_LIMIT = 2**31 - 1
"""`max_episode_steps` that never truncates (MinAtar's games have no time limit of their own;
Freeway ends itself after 2,500 frames)."""

ACTION_NAMES = ("noop", "left", "up", "right", "down", "fire")
"""MinAtar's full action set, in its order (Environment.env.action_map 'n','l','u','r','d','f')."""

# Each game as minatar.h lays it out: the game's index there, its observation channels (in
# MinAtar's order), the names of its scalar rows, maps and slot fields, the slots per env, and
# its minimal action set as MinAtar's full action codes (Env.minimal_action_set()).
GAMES = {
    "breakout": dict(
        index=0,
        channels=("paddle", "ball", "trail", "brick"),
        scalars=("last_action", "ball_x", "ball_y", "ball_dir", "pos", "last_x", "last_y",
                 "strike"),
        maps=("brick_map",),
        slot_fields=(),
        slots=0,
        minimal_actions=(0, 1, 3),
    ),
    "freeway": dict(
        index=1,
        channels=("chicken", "car", "speed1", "speed2", "speed3", "speed4", "speed5"),
        scalars=("last_action", "pos", "move_timer", "terminate_timer"),
        maps=(),
        slot_fields=("x", "timer", "speed"),
        slots=8,
        minimal_actions=(0, 2, 4),
    ),
    "space_invaders": dict(
        index=2,
        channels=("cannon", "alien", "alien_left", "alien_right", "friendly_bullet",
                  "enemy_bullet"),
        scalars=("last_action", "pos", "alien_dir", "enemy_move_interval", "alien_move_timer",
                 "alien_shot_timer", "ramp_index", "shot_timer"),
        maps=("alien_map", "f_bullet_map", "e_bullet_map"),
        slot_fields=(),
        slots=0,
        minimal_actions=(0, 1, 3, 5),
    ),
    "asterix": dict(
        index=3,
        channels=("player", "enemy", "trail", "gold"),
        scalars=("last_action", "player_x", "player_y", "spawn_speed", "spawn_timer",
                 "move_speed", "move_timer", "ramp_timer", "ramp_index"),
        maps=(),
        slot_fields=("active", "x", "lr", "gold"),
        slots=8,
        minimal_actions=(0, 1, 2, 3, 4),
    ),
    "seaquest": dict(
        index=4,
        channels=("sub_front", "sub_back", "friendly_bullet", "trail", "enemy_bullet",
                  "enemy_fish", "enemy_sub", "oxygen_guage", "diver_guage", "diver"),
        scalars=("last_action", "oxygen", "diver_count", "sub_x", "sub_y", "sub_or",
                 "e_spawn_speed", "e_spawn_timer", "d_spawn_timer", "move_speed", "ramp_index",
                 "shot_timer", "surface", "n_f_bullets", "n_e_bullets", "n_fish", "n_subs",
                 "n_divers"),
        maps=(),
        # five ordered lists (minatar.h, Seaquest): entry k of a list in slot k
        slot_fields=("f_bullet_x", "f_bullet_y", "f_bullet_dir",
                     "e_bullet_x", "e_bullet_y", "e_bullet_dir",
                     "fish_x", "fish_y", "fish_lr", "fish_timer",
                     "sub_x", "sub_y", "sub_lr", "sub_timer", "sub_shot_timer",
                     "diver_x", "diver_y", "diver_lr", "diver_timer"),
        slots=64,
        slot_major=True,
        minimal_actions=(0, 1, 2, 3, 4, 5),
    ),
}

# The kernel's own arrays that make up its state (what a checkpoint saves), in a stable order.
STATE = ("scalars", "maps", "slots", "rng_state", "episode_return", "episode_length", "stats",
         "recent_returns", "recent_lengths", "recent_head")


cdef class MinAtarKernel:
    """`num_envs` envs of MinAtar's `game` (a key of GAMES), stepped by `step()` with the GIL
    released, no allocation and no Python object per step.

    `action_set` lists MinAtar's full action codes the actions index (default: the game's
    minimal action set; `range(6)` is the full set). `sticky_action_prob` is MinAtar's
    (default 0.1; 0 draws nothing), `difficulty_ramping` too (default on).
    """

    cdef ma_batch _m
    cdef op_slot_table _slots
    cdef op_stepper _stepper
    cdef readonly str game
    cdef readonly int num_envs, max_episode_steps, channels
    cdef readonly object scalars, maps, slots, state, rng_state, episode_return, episode_length
    cdef readonly object stats, recent_returns, recent_lengths, recent_head, action_set
    cdef object _buffers  # the caller's buffers, kept alive as long as the kernel
    cdef object _slot_arrays  # arrays bound by bind_slots, alive while bound
    cdef object _packed_ring  # the ring bound by bind_packed, alive while bound

    def __init__(self, str game, int num_envs, actions, obs, rewards, terminated, truncated,
                 final_obs, double sticky_action_prob=0.1, bint difficulty_ramping=True,
                 action_set=None, int max_episode_steps=NO_TIME_LIMIT,
                 int64_t index_offset=0):
        if game not in GAMES:
            raise ValueError(f"unknown MinAtar game {game!r}; games: {', '.join(GAMES)}")
        layout = GAMES[game]
        if not 0.0 <= sticky_action_prob <= 1.0:
            raise ValueError(f"sticky_action_prob must be in [0, 1], got {sticky_action_prob}")
        action_set = tuple(layout["minimal_actions"] if action_set is None else action_set)
        if not 1 <= len(action_set) <= 6 or any(
                not 0 <= int(code) < 6 for code in action_set):
            raise ValueError(f"action_set must list 1 to 6 of MinAtar's action codes 0..5, "
                             f"got {action_set}")
        channels = len(layout["channels"])
        (self.state, self.rng_state, self.episode_return, self.episode_length, self.stats,
         self.recent_returns, self.recent_lengths, self.recent_head) = op_batch_bind(
            &self._m.base, num_envs, 1, np.uint8, (channels, 10, 10), 0, len(action_set),
            max_episode_steps, actions, obs, rewards, terminated, truncated, final_obs,
            index_offset)
        scalars_memory = np.zeros((num_envs, len(layout["scalars"])), np.int32)
        self.scalars = scalars_memory.T
        self.maps = np.zeros((max(len(layout["maps"]), 1), num_envs, 10, 10), np.uint8)
        # minatar.h keeps an entry's fields side by side and, for most games, an env's entries
        # together: (N, slots, fields) in memory; Seaquest's slot by slot, (slots, N, fields)
        # (its lists are nearly always short: slot 0 of every env is one stream). Seen here
        # as (fields, N, slots) either way.
        shape = (max(layout["slots"], 1), max(len(layout["slot_fields"]), 1))
        if layout.get("slot_major"):
            slots_memory = np.zeros((shape[0], num_envs, shape[1]), np.int32)
            self.slots = slots_memory.transpose(2, 1, 0)
        else:
            slots_memory = np.zeros((num_envs, *shape), np.int32)
            self.slots = slots_memory.transpose(2, 0, 1)
        cdef int32_t[:, ::1] scalars_view = scalars_memory
        cdef uint8_t[:, :, :, ::1] maps_view = self.maps
        cdef int32_t[:, :, ::1] slots_view = slots_memory
        self._m.game = layout["index"]
        self._m.channels = channels
        self._m.maps_per_env = len(layout["maps"])
        self._m.slots_per_env = max(layout["slots"], 1)
        for k in range(6):
            self._m.action_map[k] = action_set[k] if k < len(action_set) else 0
        self._m.sticky_prob = sticky_action_prob
        self._m.ramping = difficulty_ramping
        self._m.scalars = &scalars_view[0, 0]
        self._m.scalars_per_env = len(layout["scalars"])
        self._m.maps = &maps_view[0, 0, 0, 0]
        self._m.slots = &slots_view[0, 0, 0]
        self._buffers = (actions, obs, rewards, terminated, truncated, final_obs)
        self.game = game
        self.num_envs = num_envs
        self.max_episode_steps = max_episode_steps
        self.channels = channels
        self.action_set = action_set
        self._stepper.batch = &self._m.base
        self._stepper.step = <op_kernel_step_fn>ma_step_batch
        op_slots_init(&self._m.base, &self._slots)

    def bind_slots(self, obs=None, rewards=None, terminated=None, truncated=None, actions=None,
                   final_obs=None):
        """Bind (slots, N, ...) arrays whose slots `select()` points this kernel at
        (kernel_slots.pxd); None keeps the kernel's own buffer; no argument unbinds them all."""
        self._slot_arrays = op_slots_bind(
            &self._m.base, &self._slots, np.uint8, (self.channels, 10, 10),
            (obs, rewards, terminated, truncated, actions, final_obs))

    def select(self, int64_t obs_slot, int64_t step_slot):
        """Write the next step's observations into slot `obs_slot` and its rewards, flags and
        final observations into (and read its actions from) slot `step_slot` of the bound
        arrays; -1 is the kernel's own buffer. IndexError for a slot past an array's end."""
        if op_slots_select(&self._m.base, &self._slots, obs_slot, step_slot) < 0:
            raise IndexError(f"slot ({obs_slot}, {step_slot}) is past the bound arrays")

    def bind_packed(self, ring=None):
        """Bind a frame stack's packed ring, uint8 (slots, N, fs_packed_bytes(C * 100))
        (operant.cext.frame_stack): each step then also writes its rows as bits into the slot
        the stack's kernel aims this one at (`packed_target`), a block of rows at a time right
        after stepping them. None unbinds it."""
        self._packed_ring = None
        self._m.packed = NULL
        if ring is None:
            return
        width = fs_packed_bytes(self._m.base.obs_row_bytes)
        if not isinstance(ring, np.ndarray) or ring.dtype != np.uint8 or ring.ndim != 3 \
                or ring.shape[1:] != (self.num_envs, width) or not ring.flags.c_contiguous:
            raise ValueError(f"a packed ring must be C-contiguous uint8 (slots, "
                             f"{self.num_envs}, {width}), got {getattr(ring, 'shape', ring)}")
        self._packed_ring = ring

    def packed_target(self):
        """Where this kernel reads the packed slot it writes next (a uint8_t ** in a capsule),
        for a frame stack's kernel to aim at each next slot itself (operant.cext.frame_stack:
        FrameStackKernel.aim, which keeps this kernel alive while it holds the pointer)."""
        return PyCapsule_New(&self._m.packed, b"operant.packed_target", NULL)

    @property
    def obs_address(self):
        """The address the next step writes observation row 0 to (tests compare it)."""
        return <size_t>self._m.base.obs

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
        ma_reset(&self._m, seed is not None, 0 if seed is None else seed)

    def write_obs(self):
        """Rewrite `obs` from the state arrays. Needed after state is set from outside (a test,
        a parity check): a step writes only the cells that change, from the row it finds."""
        ma_write_obs(&self._m)

    def step(self):
        """Advance every env by its action in the bound action buffer. Returns -1, or the index
        of the first env whose action is outside the action set, and then no env has moved."""
        cdef int64_t result
        with nogil:
            result = ma_step(&self._m)
        return result

    cdef bint _fits(self, uint8_t[:, :, :, ::1] rows):
        return (rows.shape[0] == self.num_envs and rows.shape[1] == self.channels
                and rows.shape[2] == 10 and rows.shape[3] == 10)

    def step_copy(self, uint8_t[:, :, :, ::1] obs, uint8_t[:, :, :, ::1] final_obs):
        """step(), then its frames copied (copy=True's step, operant.envs.minatar.vector): every
        observation row into `obs`, and the terminal row of each env that ended into the same
        row of `final_obs` (its other rows untouched). Both are the caller's uint8 (N, C, 10,
        10) arrays; the kernel's own buffers are written as step() writes them. Returns what
        step() does (and then copies nothing)."""
        cdef int64_t result
        if not (self._fits(obs) and self._fits(final_obs)):
            shape = (self.num_envs, self.channels, 10, 10)
            got = ((obs.shape[0], obs.shape[1], obs.shape[2], obs.shape[3]),
                   (final_obs.shape[0], final_obs.shape[1], final_obs.shape[2],
                    final_obs.shape[3]))
            raise ValueError(f"obs and final_obs must be uint8 {shape}, got {got[0]} and "
                             f"{got[1]}")
        with nogil:
            result = ma_step(&self._m)
            if result < 0:
                ma_copy_out(&self._m, &obs[0, 0, 0, 0], &final_obs[0, 0, 0, 0])
        return result

"""Frame stacking for any host env family: `make_env(..., frame_stack=k)`, config
`env.frame_stack = k`.

k = 1 is no wrapper at all: the kernel writes straight into the buffer the policy reads (the
rollout storage's row, operant.trainer.loop.collect), no copy and no extra memory. k > 1 wraps the
env in `FrameStackEnv`, an operant.envs.contract.BatchEnv whose observation is the last k
observations concatenated along the first axis, oldest first: uint8 (C, H, W) frames become
(k * C, H, W) (the channels of frame t - k + 1 first, those of frame t last), float32 (D,)
vectors become (k * D,). A new episode's stack starts as k copies of its first observation
(Gymnasium's FrameStackObservation with `padding_type="reset"`); `final_obs` holds the stack
that ends in the terminal observation.

Over an env made with `autoreset_mode=AutoresetMode.NEXT_STEP` (what `operant eval --video`
records), `step()` follows Gymnasium's NEXT_STEP mode: the step that ends a row's episode
returns the stack that ends in its terminal observation, and the next step, its reset, returns
a new stack of the next episode's first observation (the padding above), reward 0 and no flags.
The frames are then what the inner env's `step()` returns, copied into the ring; such a stack
is Gymnasium's face only: `step_bound()` and slot binding, the trainer's SAME_STEP path,
refuse it.

The frames live in a ring, `(k, rows, *frame)`, one slot per step for all rows at once
(operant.cext.frame_stack): a native env's kernel writes its observations straight into the
next slot (its buffers rebound, cext/common/kernel_slots.pxd), any other env's are copied in (F
bytes a row, F the bytes of one observation), and nothing slides. A new episode copies nothing
either: each row's age in the ring says which stack positions are padding, read from the
episode's first frame.

Binary frames (a Box(0, 1) of uint8 or bool: MinAtar's) are kept in the ring as bits, a row
F / 8 bytes rounded up to whole words (operant.cext.frame_stack, cext/envs/face/frame_pack.h):
MinAtar's kernel keeps its own observation rows by difference, so its frames have to reach the ring
as a copy, and as bits that copy writes F / 8 bytes; its kernel packs each block of rows it has just
stepped into the ring's slot itself (`bind_packed`), while they are in cache. Whatever reads
the ring unpacks the same bytes.

Bytes moved per row and step: the F the kernel writes, as at k = 1 (and F read and F / 8 written
for a packed ring); for a row whose episode ended, its final stack (k * F). Canonical stacks
(oldest first, k * F a row) are written only where someone reads them: into the rollout
storage's rows when a trainer binds the env (`bind_slots`: the bytes its copy moves at k = 1
without a ring), and into `obs` after each step while `live_obs` is true (the default, so `obs`
is always the current stacks, as the contract says). A trainer's binding, or `live_obs = False`
(a benchmark of what a trainer pays, or any consumer of the ring), also writes final stacks for
truncated rows only, the ones a trainer bootstraps from; `obs` is then written by `step()`,
`reset()` and `state_dict()` only, and `step()` (Gymnasium's face, a copy for the caller) writes
every ended row's.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from operant.envs.contract import BindsSlots, EpisodeStats, NotCopyable, ObsSpec, check_state
from operant.envs.face.forwarding import EnvLayer
from operant.envs.registry import EnvError

STACK_KEY = "frame_stack.obs"
"""The stacks' name in `state_dict()` (the inner env's names are kept as they are)."""
RESTART_KEY = "frame_stack.restart"
"""NEXT_STEP: the rows whose next step starts a new stack, by that name in `state_dict()`."""
OWN_KEYS = (STACK_KEY, RESTART_KEY)


def check_frame_stack(frame_stack: Any) -> int:
    """The checked depth; EnvError naming env.frame_stack otherwise."""
    if isinstance(frame_stack, bool) or not isinstance(frame_stack, int) or frame_stack < 1:
        raise EnvError(
            f"env.frame_stack = {frame_stack!r}: it must be a whole number of observations, "
            "at least 1 (1 stacks nothing)"
        )
    return frame_stack


def stack_env(env: Any, frame_stack: int) -> Any:
    """`env` itself for frame_stack = 1, else `FrameStackEnv(env, frame_stack)`."""
    depth = check_frame_stack(frame_stack)
    return env if depth == 1 else FrameStackEnv(env, depth)


def _binary(space: Any) -> bool:
    """Whether every value of `space` is 0 or 1 by its declaration (a Box of uint8 or bool
    bounded by 0 and 1: MinAtar's frames), so a ring may keep its frames as bits."""
    return (
        isinstance(space, spaces.Box)
        and space.dtype in (np.dtype(np.uint8), np.dtype(np.bool_))
        and bool(np.all(space.low == 0))
        and bool(np.all(space.high == 1))
    )


def _bytes(array: np.ndarray) -> np.ndarray:
    """A (rows, ...) C-contiguous array as (rows, bytes per row) uint8, the same memory."""
    return array.reshape(array.shape[0], -1).view(np.uint8)


def _slot_bytes(array: np.ndarray) -> np.ndarray:
    """A (slots, rows, ...) array whose slots are C-contiguous as (slots, rows, bytes)."""
    return array.reshape(*array.shape[:2], -1).view(np.uint8)


class FrameStackEnv(NotCopyable, EnvLayer):
    """The last `depth` observations of `env`'s rows, stacked along the first axis. A
    Gymnasium VectorEnv (EnvLayer), so Gymnasium's vector wrappers take it. Declares
    operant.envs.contract.BindsSlots itself (`binds_slots` where its inner env binds)."""

    binds_obs = True  # the stacks it writes into observation slots are whole

    def __init__(self, env: Any, depth: int):
        from operant.cext.frame_stack import FrameStackKernel, packed_bytes

        inner = env.obs_spec
        if not isinstance(env.obs, np.ndarray) or not inner.shape:
            raise EnvError(
                f"env.frame_stack = {depth}: stacking needs a host env with array observations "
                f'({env.impl} implementation given); use env.impl = "native"'
            )
        mode = env.metadata.get("autoreset_mode", AutoresetMode.SAME_STEP)
        if mode not in (AutoresetMode.SAME_STEP, AutoresetMode.NEXT_STEP):
            raise EnvError(f"env.frame_stack = {depth} needs an autoreset mode, got {mode}")
        self.next_step = mode == AutoresetMode.NEXT_STEP
        self._layer_over(env)
        self.depth = depth
        self.impl, self.resumable, self.layout = env.impl, env.resumable, env.layout
        self.act_spec = env.act_spec
        shape = (depth * inner.shape[0], *inner.shape[1:])
        self.obs_spec = ObsSpec(shape, inner.dtype, inner.scale)
        rows = env.layout.num_rows
        self.obs = np.zeros((rows, *shape), dtype=inner.dtype)
        self.final_obs = np.zeros_like(self.obs)
        self.actions, self.rewards = env.actions, env.rewards
        self.terminated, self.truncated = env.terminated, env.truncated
        # A native env writes the ring itself; another (or one that keeps its observation
        # rows by difference, or one stepped NEXT_STEP) is copied from its own buffer, as bits
        # where its space says every value is 0 or 1.
        self.binds_slots = not self.next_step and isinstance(env, BindsSlots) and env.binds_slots
        self.writes_ring = self.binds_slots and env.binds_obs
        self.packed = not self.writes_ring and _binary(env.single_observation_space)
        if self.packed:
            frame = int(np.prod(inner.shape)) * np.dtype(inner.dtype).itemsize
            self.ring = np.zeros((depth, rows, packed_bytes(frame)), dtype=np.uint8)
        else:
            self.ring = np.zeros((depth, rows, *inner.shape), dtype=inner.dtype)
        if self.writes_ring:
            env.bind_slots(obs=self.ring)
        # NEXT_STEP: the frames are what the inner env's step() returns, copied here, and a
        # row starts a new stack on the step after its episode ended (`restart`).
        self.frames = np.zeros_like(env.obs) if self.next_step else env.obs
        self.restart = np.zeros_like(env.terminated)
        restarts = (self.restart, np.zeros_like(env.truncated))
        self.kernel = FrameStackKernel(
            _slot_bytes(self.ring),
            None if self.writes_ring else _bytes(self.frames),
            _bytes(env.final_obs),
            _bytes(self.final_obs),
            *(restarts if self.next_step else (env.terminated, env.truncated)),
            _bytes(self.obs),
            packed=self.packed,
        )
        # A kernel that can write the ring's bits itself does, right after each block of rows
        # it steps (MinAtar's: operant.cext.minatar.MinAtarKernel.bind_packed); not its core's
        # frames under NEXT_STEP, whose step() returns others.
        self.inner_packs = (
            self.packed and not self.next_step and callable(getattr(env, "bind_packed", None))
        )
        if self.inner_packs:
            env.bind_packed(self.ring)
            self.kernel.aim(env.kernel, env.kernel.packed_target())
        self.live_obs = True
        self._obs_slot, self._step_slot, self._selected_step = -1, -1, -1
        self._describe(env)

    def _describe(self, env: Any) -> None:
        depth = self.depth
        self.num_envs = env.num_envs
        self.metadata = env.metadata
        self.render_mode = None
        self.spec = getattr(env, "spec", None)
        single = env.single_observation_space
        self.single_observation_space = spaces.Box(
            np.concatenate([np.broadcast_to(single.low, single.shape)] * depth),
            np.concatenate([np.broadcast_to(single.high, single.shape)] * depth),
            dtype=single.dtype,
        )
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.single_action_space = env.single_action_space
        self.action_space = env.action_space

    # -- the rollout storage's slots (operant.trainer.loop.collect; a native inner env only) ------
    def bind_slots(
        self,
        obs: np.ndarray | None = None,
        rewards: np.ndarray | None = None,
        terminated: np.ndarray | None = None,
        truncated: np.ndarray | None = None,
        actions: np.ndarray | None = None,
        final_obs: np.ndarray | None = None,
    ) -> None:
        """As operant.envs.native.slots.SlotBinding: the inner kernel writes rewards and flags into
        (and reads actions from) the step slots; the canonical stacks go to the obs slots and
        the final stacks to the step slots (both (slots, rows, *obs_spec.shape)); the ring
        stays the inner kernel's (and its own final frames, which the final stacks end in)."""
        if not self.binds_slots:
            raise EnvError(f"{self.impl} envs cannot bind slots under env.frame_stack")
        self.env.bind_slots(
            obs=self.ring if self.writes_ring else None,
            rewards=rewards,
            terminated=terminated,
            truncated=truncated,
            actions=actions,
        )
        self.kernel.bind(
            terminated,
            truncated,
            None if obs is None else _slot_bytes(obs),
            None if final_obs is None else _slot_bytes(final_obs),
        )
        self._obs_slot, self._step_slot, self._selected_step = -1, -1, -1

    def slot_selectors(self) -> tuple[Any, ...]:
        return (self.select_slots,)

    def select_slots(self, obs_slot: int, step_slot: int) -> None:
        self._obs_slot, self._step_slot = obs_slot, step_slot

    # -- stepping ------------------------------------------------------------------------
    def reset(self, *, seed: Any = None, options: dict[str, Any] | None = None):
        if self.binds_slots:
            self.env.select_slots(self.kernel.next_slot if self.writes_ring else -1, -1)
            self._selected_step = -1
        obs, _ = self.env.reset(seed=seed, options=options)
        if self.next_step:
            np.copyto(self.frames, obs)
            self.restart.fill(False)
        self.kernel.fill()
        self.kernel.write_stacks(-1)
        return self.obs, {}

    def step_bound(self) -> None:
        if self.next_step:
            raise EnvError(
                "a NEXT_STEP frame stack steps through step() (Gymnasium's face); step_bound(), "
                "the trainer's, needs the default SAME_STEP autoreset"
            )
        self._select_ring()
        self.env.step_bound()
        kernel = self.kernel
        # Bound to a trainer's storage, or not keeping `obs` current: the final stacks of
        # truncated rows only (the ones a trainer bootstraps from).
        kernel.push(self._step_slot, self.live_obs and self._step_slot < 0)
        if self._obs_slot >= 0 or self.live_obs:
            kernel.write_stacks(self._obs_slot)

    def _select_ring(self) -> None:
        """Point a native inner env's kernel at the ring's next slot (and the step slot); one
        that keeps its own observation rows only when the step slot changed (a microsecond of
        Python a step, which for a small env was a tenth of the step)."""
        if self.writes_ring:
            self.env.select_slots(self.kernel.next_slot, self._step_slot)
        elif self.binds_slots and self._step_slot != self._selected_step:
            self.env.select_slots(-1, self._step_slot)
            self._selected_step = self._step_slot

    def step(self, actions: Any) -> tuple[Any, ...]:
        """Gymnasium's vector step. SAME_STEP: the stacks, with the terminal stacks under
        info["final_obs"] for rows that ended. NEXT_STEP: the stacks of the observations the
        inner env's step() returns (the terminal stack where an episode ended), a row's next
        step (its reset) starting a new stack."""
        if self.next_step:
            return self._step_next(actions)
        self._select_ring()
        _, rewards, terminated, truncated, info = self.env.step(actions)
        self.kernel.push(self._step_slot)
        self.kernel.write_stacks(-1)
        if "final_obs" in info:
            info = {**info, "final_obs": self.final_obs.copy()}
        return self.obs.copy(), rewards, terminated, truncated, info

    def _step_next(self, actions: Any) -> tuple[Any, ...]:
        """NEXT_STEP: the inner env steps as Gymnasium's NEXT_STEP mode; its observations go
        onto the stacks, and the rows whose last step ended (`restart`: this step was their
        reset) start a new stack with theirs, the padding a new episode gets."""
        obs, rewards, terminated, truncated, info = self.env.step(actions)
        np.copyto(self.frames, obs)
        self.kernel.push(-1, False)  # restarts the rows in `restart`; no final stacks
        self.kernel.write_stacks(-1)
        np.logical_or(terminated, truncated, out=self.restart)
        return self.obs.copy(), rewards, terminated, truncated, info

    def drain_episode_stats(self) -> EpisodeStats:
        return self.env.drain_episode_stats()

    def recent_returns(self, count: int) -> np.ndarray:
        return self.env.recent_returns(count)

    def state_dict(self) -> dict[str, Any]:
        """The inner env's state and the stacks (`obs`, written first: the ring in canonical
        order; the inner env's `obs` is not used while its kernel writes the ring)."""
        self.kernel.write_stacks(-1)
        own = {RESTART_KEY: self.restart} if self.next_step else {}
        return {**self.env.state_dict(), STACK_KEY: self.obs, **own}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        check_state(state, self.state_dict())
        inner = {name: value for name, value in state.items() if name not in OWN_KEYS}
        self.env.load_state_dict(inner)
        np.copyto(self.obs, state[STACK_KEY])
        if self.next_step:
            np.copyto(self.restart, state[RESTART_KEY])
        # The stacks hold their padding as frames: every position reads its own slot.
        self.kernel.load(_bytes(self.obs))

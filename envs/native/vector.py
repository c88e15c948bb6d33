"""Gymnasium's vector API over a native (Cython) batch kernel.

The env allocates every buffer once and hands it to the kernel at construction; the kernel
writes observations, rewards and flags into them in place. Two ways in:

- `step(actions)`: Gymnasium's API for other libraries. Checks the actions' shape and dtype,
  copies them into the bound action buffer (continuous actions as float32), and returns copies
  of the outputs when `copy=True` (Gymnasium's default) or the live buffers when `copy=False`.
- `step_bound()`: for the trainer. The caller has already written the actions into
  `self.actions` (a torch tensor can share that memory); nothing is allocated or copied.

Either way the kernel refuses action values outside the space (discrete) or not finite
(continuous; out-of-range values are clipped by the env itself, as in Gymnasium) before any env
moves, and this raises InvalidActionError naming the env and the value.

Autoreset is Gymnasium's SAME_STEP mode: an env that ends on a step already holds its next
episode's first observation in `obs`; the terminal observation is in `final_obs` (and in
`info["final_obs"]`, masked by `info["_final_obs"]`, beside Gymnasium's `final_info` and
`_final_info`). `autoreset_mode=AutoresetMode.NEXT_STEP`
makes `step()` (not `step_bound()`) follow Gymnasium's NEXT_STEP mode instead
(operant.envs.face.autoreset). `reset(seed=...)` takes an int or a list of per-env seeds
(operant.envs.face.seeding); `render_mode="rgb_array"` or `"human"` draws with Gymnasium's renderer
(operant.envs.face.render).

The env implements operant.envs.contract.BatchEnv: its episode statistics are the kernel's
`op_episode_stats` record, read by field name, and its explicit state (`state_dict()`,
`load_state_dict()`) is the kernel's arrays and the observation buffer under stable names.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from operant.envs.contract import (
    ActSpec,
    EpisodeStats,
    NotCopyable,
    ObsSpec,
    RowLayout,
    clear_stats,
    positive_count,
    refuse_reset_options,
    restore_state,
    time_limit,
)
from operant.envs.face.autoreset import (
    HELD_LENGTH,
    Held,
    NextStepFace,
    next_step_state,
    step_next_step_face,
    with_autoreset_mode,
)
from operant.envs.face.autoreset import autoreset_mode as parse_autoreset_mode
from operant.envs.face.render import RenderFace
from operant.envs.face.seeding import check_seed, per_env_streams, seed_np_random
from operant.envs.native.slots import SlotBinding
from operant.envs.registry import (
    EnvEntry,
    InvalidActionError,
    check_action_batch,
    invalid_action_message,
)

# Attributes of a kernel that make up an env's state (cext/common/kernel_common.pxi): what a
# checkpoint saves and restores, besides the observation buffer. `stats`, a structured record,
# is saved as its 8 float64 words (the form checkpoints have always stored it in).
KERNEL_STATE = (
    "state",
    "rng_state",
    "episode_return",
    "episode_length",
    "stats",
    "recent_returns",
    "recent_lengths",
    "recent_head",
)


def recent_from_ring(ring: np.ndarray, head: int, count: int) -> np.ndarray:
    """The last `count` values written to a ring whose total write count is `head`, oldest first."""
    capacity = ring.shape[0]
    count = max(0, min(count, head, capacity))
    return ring[np.arange(head - count, head) % capacity]


def load_actions(env: Any, actions: Any) -> None:
    """A batch of actions into a numpy face's `actions` buffer, refused in one line
    (InvalidActionError) for its shape or dtype; the values are the kernel's to check."""
    buffer = env.actions
    if actions is buffer:
        return  # written in place by the caller: nothing to check or copy
    if (
        type(actions) is np.ndarray
        and actions.dtype == buffer.dtype
        and actions.shape == buffer.shape
    ):
        np.copyto(buffer, actions)  # the common case: no conversion, nothing to refuse
        return
    try:
        array = np.asarray(actions)
    except (TypeError, ValueError) as error:
        raise InvalidActionError(
            f"actions must be an array, got {type(actions).__name__}: {error}"
        ) from None
    check_action_batch(
        array.shape,
        array.dtype.kind in "iu",
        array.dtype.kind == "f",
        buffer.shape,
        env.single_action_space,
        array.dtype,
    )
    np.copyto(buffer, array, casting="unsafe")


def step_outputs(env: Any, info: dict[str, Any]) -> tuple[Any, ...]:
    """Gymnasium's step result from a numpy face's buffers: copies when the env was made with
    `copy=True` (Gymnasium's default), else the live buffers the next step overwrites."""
    if env.copy:
        return (
            env.obs.copy(),
            env.rewards.copy(),
            env.terminated.copy(),
            env.truncated.copy(),
            info,
        )
    return env.obs, env.rewards, env.terminated, env.truncated, info


def _as_words(*flags: np.ndarray) -> tuple[np.ndarray, ...] | None:
    """uint64 views of bool arrays (8 flags a word; a bool is 0 or 1, so a bitwise OR of words
    is the logical OR of each flag), or None where the length is not a multiple of 8."""
    if any(len(array) % 8 or not array.flags.c_contiguous for array in flags):
        return None
    return tuple(array.view(np.uint64) for array in flags)


class NumpyFace(VectorEnv):
    """A Gymnasium VectorEnv over numpy buffers that `allocate_buffers` lays out (the native,
    MinAtar and reference faces): what they, their mixins and helpers read."""

    copy: bool
    """Whether `step()` returns copies of the buffers (Gymnasium's default) or the buffers."""
    discrete: bool
    """Whether the action space is Discrete (int64 actions) rather than a Box (float32)."""
    actions: np.ndarray
    obs: np.ndarray
    final_obs: np.ndarray
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray


def allocate_buffers(env: NumpyFace, num_envs: int, obs_spec: ObsSpec) -> None:
    """The buffers every numpy-backed env exposes, allocated once: `actions` (IN: int64 (N,)
    for a Discrete space, float32 (N, *shape) for a Box), `obs` and `final_obs` ((N,
    *obs_spec.shape) of obs_spec.dtype), `rewards` (float32 (N,)), `terminated` and
    `truncated` (bool (N,))."""
    env.discrete = isinstance(env.single_action_space, spaces.Discrete)
    if env.discrete:
        env.actions = np.zeros(num_envs, dtype=np.int64)
    else:
        # (a space without a shape, a Tuple, is left for ActSpec to refuse in one line)
        shape = env.single_action_space.shape or ()
        env.actions = np.zeros((num_envs, *shape), dtype=np.float32)
    env.obs = np.zeros((num_envs, *obs_spec.shape), dtype=obs_spec.dtype)
    env.rewards = np.zeros(num_envs, dtype=np.float32)
    env.terminated = np.zeros(num_envs, dtype=np.bool_)
    env.truncated = np.zeros(num_envs, dtype=np.bool_)
    env.final_obs = np.zeros_like(env.obs)


class NativeVectorEnv(NotCopyable, SlotBinding, RenderFace, NumpyFace):
    """N copies of one environment stepped by a compiled kernel."""

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}
    impl = "native"
    resumable = True

    def __init__(
        self,
        entry: EnvEntry,
        num_envs: int,
        copy: bool = True,
        max_episode_steps: int | None = None,
        autoreset_mode: AutoresetMode | str = AutoresetMode.SAME_STEP,
        render_mode: str | None = None,
    ):
        kernel_class = entry.native
        if kernel_class is None:
            raise ValueError(f"{entry.id} has no native implementation")
        self._kernel_class: Callable[..., Any] = kernel_class
        num_envs = positive_count("num_envs", num_envs)
        self.entry = entry
        self.num_envs = num_envs
        self.copy = copy
        self.single_observation_space, self.single_action_space = entry.spaces()
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.obs_spec = ObsSpec.from_space(self.single_observation_space)
        self.act_spec = ActSpec.from_space(self.single_action_space)
        self.layout = RowLayout(num_envs)
        self.spec = None
        allocate_buffers(self, num_envs, self.obs_spec)
        self._done = np.zeros(num_envs, dtype=np.bool_)
        # The flags as eight bools a word, for step(): OR-ing and testing 8x fewer elements.
        self._done_words = _as_words(self.terminated, self.truncated, self._done)
        self.max_episode_steps = time_limit(max_episode_steps, entry.max_episode_steps)
        self.kernels = self._bind_kernels()
        # Episodes each kernel has ended so far, for step() (load_state_dict copies into these
        # same arrays).
        self._episode_heads = tuple(kernel.recent_head for kernel in self.kernels)
        self._done_stale = False  # _done holds a past step's flags (step() refreshes it)
        self._seeded = False
        self.autoreset_mode = parse_autoreset_mode(autoreset_mode)
        self.metadata = with_autoreset_mode(type(self).metadata, self.autoreset_mode)
        self._next_step = (
            NextStepFace(self, self._held_state())
            if self.autoreset_mode == AutoresetMode.NEXT_STEP
            else None
        )
        self._init_render(entry.id, render_mode)

    def _bind_kernels(self) -> tuple[Any, ...]:
        """The kernels that step this env's buffers: here one, over all of them."""
        self.kernel = self._kernel_over(0, self.num_envs)
        return (self.kernel,)

    def _kernel_rows(self) -> tuple[tuple[int, int], ...]:
        """The rows (lo, hi) each of self.kernels steps."""
        return ((0, self.num_envs),)

    def _held_state(self) -> list[Held]:
        """Every kernel's per-env arrays, for NEXT_STEP's ignored steps."""
        return [
            Held(array, axis, lo, hi, held)
            for (lo, hi), kernel in zip(self._kernel_rows(), self.kernels)
            for array, axis, held in (
                (kernel.state, 1, None),
                (kernel.rng_state, 0, None),
                (kernel.episode_return, 0, None),
                (kernel.episode_length, 0, HELD_LENGTH),
            )
        ]

    def _render_states(self) -> np.ndarray:
        return np.concatenate([kernel.state for kernel in self.kernels], axis=1)

    def _kernel_over(self, lo: int, hi: int) -> Any:
        """A kernel bound to rows lo:hi of the buffers, its envs seeded as rows lo:hi."""
        return self._kernel_class(
            hi - lo,
            self.actions[lo:hi],
            self.obs[lo:hi],
            self.rewards[lo:hi],
            self.terminated[lo:hi],
            self.truncated[lo:hi],
            self.final_obs[lo:hi],
            max_episode_steps=self.max_episode_steps,
            index_offset=lo,
        )

    @property
    def time_limit(self) -> int | None:
        """operant.envs.contract.DeclaresTimeLimit: the episode step limit."""
        return self.max_episode_steps

    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ):
        """Reset every env. An int seed re-seeds env i's stream from (seed, i); a list of
        per-env seeds env i's from (seed[i], 0), keeping it where seed[i] is None
        (operant.envs.face.seeding). No seed on the first reset seeds from the OS's entropy; later
        resets without one continue."""
        refuse_reset_options(
            options,
            f"the native {self.entry.id}",
            "; impl=\"reference\" (Gymnasium's own env) takes Gymnasium's options",
        )
        seed = check_seed(seed, self.num_envs)
        seed_np_random(self, seed)
        if isinstance(seed, list):
            streams = per_env_streams(seed, None if self._seeded else secrets.randbits(64))
            for (lo, hi), kernel in zip(self._kernel_rows(), self.kernels):
                for row in range(lo, hi):
                    if streams[row] is not None:
                        kernel.rng_state[row - lo] = streams[row]
            seed = None
        elif seed is None and not self._seeded:
            seed = secrets.randbits(64)
        for kernel in self.kernels:
            kernel.reset(seed)
        self._seeded = True
        obs = self.obs if self._next_step is None else self._next_step.reset()
        if self.render_mode is not None:
            self._rendered_reset()
        return (obs.copy() if self.copy else obs), {}

    def step(self, actions: Any) -> tuple[Any, ...]:
        if actions is not self.actions:  # else written in place: nothing to check or copy
            self._load_actions(actions)
        if self._next_step is not None:
            return step_next_step_face(self)
        heads = self._episode_heads
        ended_before = heads[0][0] if len(heads) == 1 else sum(head[0] for head in heads)
        self.step_bound()
        info: dict[str, Any] = {}
        # The kernels count every episode they end (recent_head): a step that ended none needs
        # no pass over the flags (at a few envs, most steps), and one that did needs no
        # reduction to find out.
        ended = (heads[0][0] if len(heads) == 1 else sum(head[0] for head in heads)) != ended_before
        if ended or self.render_mode is not None or self._done_stale:
            if self._done_words is not None:
                terminated, truncated, done = self._done_words
                np.bitwise_or(terminated, truncated, out=done)
            else:
                np.logical_or(self.terminated, self.truncated, out=self._done)
            self._done_stale = ended
        if ended:
            # copy=False: live buffers, as the rest of the result (the next step overwrites).
            copy = self.copy
            info["final_obs"] = self.final_obs.copy() if copy else self.final_obs
            info["_final_obs"] = self._done.copy() if copy else self._done
            # Gymnasium's SAME_STEP keys beside them: the ended envs' own infos (none here)
            info["final_info"], info["_final_info"] = {}, info["_final_obs"]
        if self.render_mode is not None:
            self._rendered_step(~self._done, np.zeros_like(self._done), None)
        if not self.copy:
            return self.obs, self.rewards, self.terminated, self.truncated, info
        return step_outputs(self, info)

    def step_bound(self) -> None:
        """Step with the actions already in `self.actions`; outputs land in the buffers."""
        bad = self.kernel.step()
        if bad >= 0:
            raise InvalidActionError(
                invalid_action_message(
                    self.single_action_space, bad, self._action_rows()[bad].tolist()
                )
            )

    def _load_actions(self, actions) -> None:
        load_actions(self, actions)

    # Episode statistics reduced inside the kernel: Python sees sums and counts.
    def drain_episode_stats(self) -> EpisodeStats:
        """Finished-episode statistics since the last drain, then clear them."""
        stats = self.kernel.stats
        result = EpisodeStats.from_record(stats)
        clear_stats(stats)
        return result

    def recent_returns(self, count: int) -> np.ndarray:
        """Returns of the last `count` finished episodes (fewer if fewer have finished)."""
        return recent_from_ring(self.kernel.recent_returns, int(self.kernel.recent_head[0]), count)

    # -- explicit state (BatchEnv contract; checkpoints use these) ---------------------------
    def _state_prefixes(self) -> tuple[str, ...]:
        """The name each kernel's arrays are saved under, in self.kernels order."""
        return ("kernel",)

    def state_dict(self) -> dict[str, np.ndarray]:
        """The live arrays that hold this env's state: every kernel's (`<prefix>.<name>`, with
        `stats` as a float64 (8,) view of its record) and the observations (`obs`)."""
        arrays = {
            f"{prefix}.{name}": getattr(kernel, name)
            for prefix, kernel in zip(self._state_prefixes(), self.kernels)
            for name in KERNEL_STATE
        }
        for prefix in self._state_prefixes():
            arrays[f"{prefix}.stats"] = arrays[f"{prefix}.stats"].view(np.float64)
        arrays["obs"] = self.obs
        return {**arrays, **next_step_state(self._next_step)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Copy arrays with state_dict()'s names, dtypes and shapes into the live ones (a
        ValueError names the first that is missing, extra or different, and then nothing is
        copied); later resets without a seed continue the restored streams."""
        restore_state(state, self.state_dict())
        self._seeded = True

    def close_extras(self, **kwargs) -> None:
        self._close_render()

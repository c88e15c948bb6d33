"""The env contract: what an env family gives the training loop, and nothing more.

The loop (operant.trainer) sees *rows*: a row is one env, or one agent of an env. An env
family (classic-control kernels, their torch twins, Gymnasium's envs through the reference
implementation, pixel games, many-agent worlds) implements `BatchEnv` below; the trainer,
its storage, its collectors, checkpoints and the policy registry depend on this module alone,
never on a family's other attributes.

- `ObsSpec`: one row's observation, any shape and dtype (`float32 (4,)` for CartPole,
  `uint8 (C, H, W)` for a frame, `uint8 (T, 3)` for tokens). Buffers hold `(rows, *shape)`.
- `ActSpec`: one row's action: Discrete (`int64`, shape `()`) or Box (`float32`, `shape`).
- `RowLayout`: `num_envs` envs of `agents_per_env` agents; row r belongs to env
  `r // agents_per_env`. Rows of one env are adjacent.
- `EpisodeStats`: finished-episode statistics in one named layout (`EPISODE_STATS_DTYPE`),
  the same fields written by the C kernels (kernel_common.h's `op_episode_stats`), the torch
  envs and the numpy accounting (`operant.envs.face.episodes`). With more than one agent per env, a
  row's episode is an agent's episode, and `per_env` holds the envs' episodes (an env's return
  is the sum of its agents' returns).
- `BatchEnv`: the protocol (buffers, `step_bound`, `reset`, statistics, explicit state).

Importing this module imports numpy and Gymnasium's spaces, never torch.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, overload, runtime_checkable

import numpy as np
from gymnasium import spaces

EPISODE_STAT_FIELDS = (
    "episodes",
    "return_sum",
    "return_min",
    "return_max",
    "length_sum",
    "length_min",
    "length_max",
)
"""The finished-episode statistics every family reduces, in this order (the C struct's too)."""

EPISODE_STATS_DTYPE = np.dtype(
    [(name, np.float64) for name in EPISODE_STAT_FIELDS] + [("reserved", np.float64)]
)
"""One record of episode statistics as numpy sees the C struct: 8 float64 fields (64 bytes, a
cache line). Min fields start at +inf and max fields at -inf after a drain, so the first
episode sets them."""


@dataclass(frozen=True)
class ObsSpec:
    """One row's observation: `shape` and `dtype`, as the buffers hold it, and `scale`, the
    factor a policy multiplies its values by (1/255 for a Python env's byte images whose space
    runs from 0 to 255, operant.envs.reference.obs_rows; 1 for everything else: MinAtar's cells are
    0 or 1 already)."""

    shape: tuple[int, ...]
    dtype: np.dtype
    scale: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(size) for size in self.shape))
        object.__setattr__(self, "dtype", np.dtype(self.dtype))
        object.__setattr__(self, "scale", float(self.scale))

    @property
    def row_bytes(self) -> int:
        """Bytes of one row's observation (what the C batch advances by per row)."""
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    @property
    def is_float(self) -> bool:
        """Floating-point observations (the ones a running normaliser makes sense for)."""
        return self.dtype.kind == "f"

    @classmethod
    def from_space(cls, space: spaces.Space[Any]) -> ObsSpec:
        if not isinstance(space, spaces.Box):
            raise TypeError(
                f"operant trains on Box observations (any shape and dtype), got {space}"
            )
        return cls(tuple(space.shape), space.dtype)


@dataclass(frozen=True)
class ActSpec:
    """One row's action. Discrete: int64 scalars in [0, num_actions). Box: float32 arrays of
    `shape`, clipped by the trainer to [`low`, `high`] before the env sees them."""

    shape: tuple[int, ...]
    dtype: np.dtype
    num_actions: int
    """Discrete: the number of actions. Box: the number of action dimensions."""
    low: np.ndarray | None = None
    high: np.ndarray | None = None

    @property
    def discrete(self) -> bool:
        return self.dtype.kind in "iu"

    @classmethod
    def from_space(cls, space: spaces.Space[Any]) -> ActSpec:
        if isinstance(space, spaces.Discrete):
            return cls((), np.dtype(np.int64), int(space.n))
        if isinstance(space, spaces.Box):
            return cls(
                tuple(space.shape),
                np.dtype(np.float32),
                int(np.prod(space.shape)),
                np.asarray(space.low, dtype=np.float32),
                np.asarray(space.high, dtype=np.float32),
            )
        raise TypeError(
            f"operant trains Discrete and Box action spaces, got {space}: map it onto one "
            "with a gymnasium.ActionWrapper (MultiDiscrete([a, b]) onto Discrete(a * b), "
            "say) and register the wrapped env"
        )


FLAT_BOX_HINT = (
    "operant trains on flat Box observations: wrap it in gymnasium.wrappers.FlattenObservation "
    "and register the wrapped env"
)


@dataclass(frozen=True)
class RowLayout:
    """How rows map to envs: `num_envs` envs of `agents_per_env` adjacent rows each."""

    num_envs: int
    agents_per_env: int = 1

    @property
    def num_rows(self) -> int:
        return self.num_envs * self.agents_per_env

    def env_of(self, rows: np.ndarray) -> np.ndarray:
        """The env each of `rows` belongs to."""
        return np.asarray(rows) // self.agents_per_env


@dataclass(frozen=True)
class EpisodeStats:
    """Finished episodes since the last drain (zeros when none finished). `per_env` is set
    only when rows are agents (agents_per_env > 1): the same fields over whole envs."""

    episodes: int
    return_sum: float
    return_min: float
    return_max: float
    length_sum: float
    length_min: float
    length_max: float
    per_env: EpisodeStats | None = None

    @classmethod
    def from_record(cls, record: np.ndarray, per_env: EpisodeStats | None = None) -> EpisodeStats:
        """From one `EPISODE_STATS_DTYPE` record (a structured scalar or 1-element array),
        or a float64 array of its 8 words."""
        record = np.asarray(record)
        if record.dtype != EPISODE_STATS_DTYPE:
            record = np.ascontiguousarray(record, dtype=np.float64).view(EPISODE_STATS_DTYPE)
        record = record.reshape(())
        if record["episodes"] == 0:
            return cls(0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, per_env)
        fields = {name: float(record[name]) for name in EPISODE_STAT_FIELDS[1:]}
        return cls(episodes=int(record["episodes"]), per_env=per_env, **fields)

    @classmethod
    def merge(cls, parts: list[EpisodeStats]) -> EpisodeStats:
        """The statistics of the union of disjoint sets of episodes."""
        seen = [part for part in parts if part.episodes]
        if not seen:
            return cls(0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
        envs = [part.per_env for part in seen if part.per_env is not None]
        return cls(
            sum(part.episodes for part in seen),
            sum(part.return_sum for part in seen),
            min(part.return_min for part in seen),
            max(part.return_max for part in seen),
            sum(part.length_sum for part in seen),
            min(part.length_min for part in seen),
            max(part.length_max for part in seen),
            per_env=cls.merge(envs) if envs else None,
        )

    @property
    def return_mean(self) -> float:
        return self.return_sum / self.episodes if self.episodes else float("nan")

    @property
    def length_mean(self) -> float:
        return self.length_sum / self.episodes if self.episodes else float("nan")


MAX_COUNT = 2**62
"""The largest env count or time limit an env takes (past it the kernels' int64 counters,
and NEXT_STEP's held length, -2**62, would not hold)."""


def positive_count(name: str, value: Any) -> int:
    """`value` as an int where it is a positive integer (a numpy integer too, as Gymnasium
    takes; not a bool, a float or a string); ValueError naming `name` otherwise."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    count = int(value)
    if not 0 < count <= MAX_COUNT:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return count


@overload
def time_limit(value: Any, default: int) -> int: ...


@overload
def time_limit(value: Any, default: int | None) -> int | None: ...


def time_limit(value: Any, default: int | None) -> int | None:
    """A `max_episode_steps` option checked: None keeps `default` (the env's registered
    limit), else a positive integer (0, 2.5 or "7" are refused, as Gymnasium's TimeLimit
    refuses them)."""
    return default if value is None else positive_count("max_episode_steps", value)


def refuse_reset_options(options: dict[str, Any] | None, what: str, instead: str = "") -> None:
    """Envs whose kernels draw their start states one way take no reset options: a non-empty
    `options` (Gymnasium's classic-control `low`/`high`, `x_init`/`y_init`, a `reset_mask`)
    is refused in one line rather than ignored."""
    if options:
        raise ValueError(
            f"reset(options={options!r}): {what} takes no reset options (its start states are "
            f"drawn as Gymnasium's defaults){instead}"
        )


def to_host(value: Any) -> np.ndarray:
    """A step's output as numpy: an array as it is, a torch env's tensor copied to the host
    (duck-typed: this module does not import torch)."""
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "detach"):
        value = value.detach().cpu()
    return np.asarray(value)


def cleared_stats() -> np.ndarray:
    """A fresh statistics record (what a drain leaves behind)."""
    record = np.zeros((), dtype=EPISODE_STATS_DTYPE)
    clear_stats(record)
    return record


def clear_stats(record: np.ndarray) -> None:
    """Reset a statistics record in place: counts and sums 0, minima +inf, maxima -inf."""
    for name in EPISODE_STAT_FIELDS:
        record[name] = (
            np.inf if name.endswith("_min") else -np.inf if name.endswith("_max") else 0.0
        )
    record["reserved"] = 0.0


def check_state(state: dict[str, Any], targets: dict[str, Any]) -> None:
    """What `load_state_dict` checks before it copies anything: `state` has exactly the names
    of `targets` (an env's `state_dict()`), each an array (or tensor) of the same type, dtype
    and shape. Raises ValueError naming the first difference."""
    missing, extra = sorted(set(targets) - set(state)), sorted(set(state) - set(targets))
    if missing or extra:
        raise ValueError(
            f"env state {(missing or extra)[0]!r} is "
            f"{'missing' if missing else 'not part of this env'}; this env's state "
            f"is {', '.join(targets)}"
        )
    for name, target in targets.items():
        value = state[name]
        if (
            not isinstance(value, type(target))
            or value.dtype != target.dtype
            or tuple(value.shape) != tuple(target.shape)
        ):
            raise ValueError(
                f"env state {name!r} must be a {type(target).__name__} of "
                f"{target.dtype} {tuple(target.shape)}, got "
                f"{type(value).__name__} of {getattr(value, 'dtype', '?')} "
                f"{tuple(getattr(value, 'shape', ()))}"
            )


def restore_state(state: dict[str, Any], targets: dict[str, Any]) -> None:
    """`load_state_dict`'s work for an env whose `state_dict()` is `targets`, its live arrays
    (or tensors): `check_state`, then each of `state`'s values copied into its target in
    place, so nothing is copied when a check fails."""
    check_state(state, targets)
    for name, target in targets.items():
        if isinstance(target, np.ndarray):
            np.copyto(target, state[name])
        else:  # a torch tensor, on any device (the contract imports no torch)
            target.copy_(state[name])


@runtime_checkable
class BatchEnv(Protocol):
    """A batch of envs whose rows the training loop steps through caller-visible buffers.

    Buffers (numpy arrays for host families, torch tensors for device-resident ones), all
    allocated once at construction and never rebound, leading dimension `layout.num_rows`:
      `obs`, `final_obs`   OUT  `(rows, *obs_spec.shape)` of `obs_spec.dtype`
      `actions`            IN   `(rows, *act_spec.shape)` of `act_spec.dtype`
      `rewards`            OUT  float32 `(rows,)`
      `terminated`, `truncated`  OUT  bool `(rows,)`
    Autoreset is Gymnasium's SAME_STEP mode: after a step that ended row r's episode, `obs[r]`
    already holds the next episode's first observation, `final_obs[r]` the terminal one, and
    the flags and reward describe the ending. The rows of one env end together.

    `step_bound()` steps every row with the actions already in `actions`, writing the
    outputs in place; it raises `InvalidActionError` (and moves no env) on an action outside
    the space. `reset(seed=S)` re-seeds row streams from (S, env index); no seed continues them.

    Statistics: `drain_episode_stats()` returns the episodes finished since the last drain
    (rows' episodes; `per_env` for multi-agent envs) and clears them; `recent_returns(k)` the
    returns of the last k finished row episodes, oldest first.

    State: `state_dict()` is a dict of arrays or tensors under stable names, and
    `load_state_dict(state)` copies such a dict back in place (checking names, dtypes and
    shapes, raising ValueError naming the first mismatch). When `resumable` is False the
    dict cannot hold everything (Gymnasium's own envs keep arbitrary Python state) and a
    resumed run re-seeds the env instead.
    """

    impl: str
    resumable: ClassVar[bool]
    obs_spec: ObsSpec
    act_spec: ActSpec
    layout: RowLayout
    obs: Any
    final_obs: Any
    actions: Any
    rewards: Any
    terminated: Any
    truncated: Any

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any: ...

    def step_bound(self) -> None: ...

    def drain_episode_stats(self) -> EpisodeStats: ...

    def recent_returns(self, count: int) -> np.ndarray: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


# -- optional capabilities: what a family declares beyond BatchEnv, tested with isinstance ----
# A layer over an env (operant.envs.face.forwarding.EnvLayer) forwards a family's extras, but not
# a capability that changes how the trainer drives it (DRIVING: slot binding, half stepping): a
# layer has that capability only by declaring it itself, as the frame stack binds slots.


@runtime_checkable
class BindsSlots(Protocol):
    """The env's kernels write straight into rows of the trainer's rollout storage
    (operant.trainer.loop.collect): `bind_slots(obs=..., rewards=..., terminated=...,
    truncated=..., actions=..., final_obs=...)` takes numpy arrays `(slots, rows, ...)` (None
    keeps the env's own buffer; no argument unbinds), `select_slots(obs_slot, step_slot)`
    aims the next step at those slots (-1: the env's own buffers), `slot_selectors()` are the
    kernels' own selects, for a caller that steps them apart (the overlapped halves).
    `binds_slots`: whether binding works here (a frame stack over a Python env declares the
    methods but cannot); `binds_obs`: whether observations may move to slots (false for a
    kernel that writes its observation rows by difference). Fulfilled by
    operant.envs.native.slots.SlotBinding (NativeVectorEnv, MinAtar's) and the frame stack."""

    binds_slots: bool
    binds_obs: bool

    def bind_slots(self, **arrays: Any) -> None: ...

    def select_slots(self, obs_slot: int, step_slot: int) -> None: ...

    def slot_selectors(self) -> tuple[Any, ...]: ...


SLOT_BINDING = frozenset(
    ("binds_slots", "binds_obs", "bind_slots", "select_slots", "slot_selectors")
)


@runtime_checkable
class StepsInHalves(Protocol):
    """The env's rows are stepped as two halves, either of them on a thread of the env's own,
    so the trainer's policy works on one half while the other's envs move (the overlapped
    collector, operant.trainer.loop.collect.OverlappedCollector): `halves` are the two row
    ranges `(lo, hi)`, `start_half(which)` steps half `which` (its action rows written
    already) and returns at once, `finish_half(which)` waits for that step and raises
    `InvalidActionError` as `step_bound` does. Fulfilled by
    operant.envs.native.overlap.SplitNativeVectorEnv (`env.overlap = true`)."""

    halves: tuple[tuple[int, int], ...]

    def start_half(self, which: int) -> None: ...

    def finish_half(self, which: int) -> None: ...


HALF_STEPPING = frozenset(("halves", "start_half", "finish_half"))

DRIVING = SLOT_BINDING | HALF_STEPPING
"""The members of the capabilities that change how the trainer drives an env, which a layer
over an env (operant.envs.face.forwarding.EnvLayer) does not forward: it has one only by
declaring it itself."""


@runtime_checkable
class DeclaresTimeLimit(Protocol):
    """The env says whether its episodes have a time limit: `time_limit` is its step limit,
    or None where episodes may never end (MinAtar's games), which `operant eval` then cuts
    at its own limit."""

    time_limit: int | None


@runtime_checkable
class NamesChannels(Protocol):
    """The observation's channels have names (MinAtar's: the game's objects), which the
    monitor's frame view shows; one name per channel of one frame."""

    channels: tuple[str, ...]


@runtime_checkable
class StacksFrames(Protocol):
    """The observation is the last `depth` frames stacked along its first axis (the frame
    stack's layer: k frames of C channels)."""

    depth: int


@runtime_checkable
class ProfilesStep(Protocol):
    """The env can time its step's phases: with `profiling` on, `step_timing` holds the
    nanoseconds per phase since construction (the grid's), which the trainer reports."""

    profiling: bool
    step_timing: dict[str, int]


@runtime_checkable
class ShadowChecked(Protocol):
    """`operant bench env_only --validate`: the family checks a twin of this env against its
    reference itself and returns the report (MinAtar's, against the minatar package)."""

    def shadow_check(self, steps: int) -> dict[str, Any]: ...


@runtime_checkable
class ComparesEncoders(Protocol):
    """Built with `validate=True`, the env encodes every observation twice and counts the
    bytes where the encoders disagree (`obs_mismatches`, since construction): the grid's
    check where no Gymnasium env exists."""

    obs_mismatches: int


class NotCopyable:
    """An env whose state lives outside Python objects (a C kernel's buffers, worker processes
    and shared memory): pickling or copying it is refused in one line saying what to do,
    where Cython's refusal named the kernel's fields (`self._m,self._stepper cannot be
    converted to a Python object for pickling`)."""

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise TypeError(
            f"{type(self).__name__} cannot be pickled or copied: its state lives in a native "
            "kernel's buffers or in worker processes, not in Python objects. Build the env in "
            "the process that steps it (make_env or gymnasium.make there, as AsyncVectorEnv "
            "and SubprocVecEnv do), and copy its state between envs with state_dict() and "
            "load_state_dict()"
        )

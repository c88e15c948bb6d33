"""The one place that maps env ids to implementations.

Adding an environment touches only `ENVS` below (and its kernel in cext/). Implementations:
`native` (Cython kernel), `torch` (batched tensor ops on any device), `reference`
(Gymnasium's own env through its vector API: any installed Gymnasium id), and `auto`
(native when the kernel exists, else reference).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
from gymnasium import spaces

IMPLS = ("auto", "native", "torch", "reference")


class EnvError(ValueError):
    """A user asked for an env or implementation that does not exist; message says what does."""


class InvalidActionError(ValueError):
    """Actions passed to `step` had the wrong shape, dtype or value."""


@dataclass(frozen=True)
class EpisodeStats:
    """Finished episodes since the last drain (zeros when none finished)."""

    episodes: int
    return_sum: float
    return_min: float
    return_max: float
    length_sum: float
    length_min: float
    length_max: float

    @classmethod
    def from_array(cls, stats: np.ndarray) -> "EpisodeStats":
        return cls(int(stats[0]), float(stats[1]), float(stats[2]), float(stats[3]),
                   float(stats[4]), float(stats[5]), float(stats[6]))

    @property
    def return_mean(self) -> float:
        return self.return_sum / self.episodes if self.episodes else float("nan")

    @property
    def length_mean(self) -> float:
        return self.length_sum / self.episodes if self.episodes else float("nan")


def _kernel(module: str, name: str) -> Callable[..., Any] | None:
    """The kernel class, or None when the extension is not built (then `auto` falls back)."""
    try:
        return getattr(importlib.import_module(f"operant.cext.{module}"), name)
    except ImportError:
        return None


@dataclass(frozen=True)
class EnvEntry:
    id: str
    observation_space: Callable[[], spaces.Space]
    action_space: Callable[[], spaces.Space]
    max_episode_steps: int
    native_kernel: tuple[str, str] | None = None
    reward_threshold: float | None = None

    @property
    def native(self) -> Callable[..., Any] | None:
        return _kernel(*self.native_kernel) if self.native_kernel else None


def _cartpole_obs_space() -> spaces.Box:
    high = np.array([2.4 * 2, np.finfo(np.float32).max, 12 * 2 * np.pi / 360 * 2,
                     np.finfo(np.float32).max], dtype=np.float32)
    return spaces.Box(-high, high, dtype=np.float32)


ENVS: dict[str, EnvEntry] = {
    "CartPole-v1": EnvEntry(
        id="CartPole-v1",
        observation_space=_cartpole_obs_space,
        action_space=lambda: spaces.Discrete(2),
        max_episode_steps=500,
        native_kernel=("cartpole", "CartPoleKernel"),
        reward_threshold=475.0,
    ),
}


def lookup(env_id: str) -> EnvEntry:
    """The entry for `env_id` (with or without the `operant/` namespace)."""
    key = env_id.removeprefix("operant/")
    try:
        return ENVS[key]
    except KeyError:
        raise EnvError(f"unknown env id {env_id!r}; operant has: {', '.join(ENVS)} "
                       f"(any Gymnasium id trains with env.impl = \"reference\")") from None


def resolve_impl(env_id: str, impl: str) -> str:
    """Which implementation `impl` means for `env_id`; raises EnvError when unavailable."""
    if impl not in IMPLS:
        raise EnvError(f"unknown env impl {impl!r}; choose one of: {', '.join(IMPLS)}")
    key = env_id.removeprefix("operant/")
    entry = ENVS.get(key)
    if impl == "auto" and entry is not None and entry.native is not None:
        return "native"
    if impl in ("auto", "reference"):
        _check_gymnasium_id(key)
        return "reference"
    if entry is None:
        lookup(env_id)
    if impl == "native" and entry.native is None:
        raise EnvError(f"{key} has no native kernel in this build; use env.impl = \"reference\"")
    if impl == "torch":
        raise EnvError(f"{key} has no torch implementation yet; use env.impl = \"native\"")
    return impl


def _check_gymnasium_id(env_id: str) -> None:
    import gymnasium

    try:
        gymnasium.spec(env_id)
    except gymnasium.error.Error as error:
        raise EnvError(f"unknown env id {env_id!r}: neither operant ({', '.join(ENVS)}) nor "
                       f"Gymnasium has it ({error})") from None


def make_env(env_id: str, num_envs: int, impl: str = "auto", copy: bool = True, **kwargs):
    """A vector env for `env_id` with the chosen implementation."""
    chosen = resolve_impl(env_id, impl)
    if chosen == "native":
        from operant.trainer.envs.native import NativeVectorEnv

        return NativeVectorEnv(lookup(env_id), num_envs, copy=copy, **kwargs)
    from operant.trainer.envs.reference import ReferenceVectorEnv

    return ReferenceVectorEnv(env_id.removeprefix("operant/"), num_envs, copy=copy, **kwargs)


def gymnasium_vector_entry_point(num_envs: int = 1, *, env_id: str, impl: str = "auto",
                                 copy: bool = True, **kwargs):
    """What `gymnasium.make_vec("operant/<id>", vectorization_mode="vector_entry_point")` calls."""
    return make_env(env_id, num_envs, impl=impl, copy=copy, **kwargs)

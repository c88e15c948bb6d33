"""Operant's vector envs as stable-baselines3 `VecEnv`s: `make_vec_env` and `OperantVecEnv`.

    from stable_baselines3 import PPO
    from operant.compat.sb3 import make_vec_env

    env = make_vec_env("CartPole-v1", n_envs=8, seed=0)   # VecMonitor(OperantVecEnv(...))
    PPO("MlpPolicy", env).learn(100_000)

An Operant env is one Gymnasium `VectorEnv` holding all N envs, stepped by one kernel call. It
autoresets in Gymnasium's SAME_STEP mode, which is SB3's own convention: after a step that ends
env i, `obs[i]` is already the next episode's first observation, and the terminal one is in
`infos[i]["terminal_observation"]`. So the adapter only changes the shape of the answer (a
`done` flag and a list of per-env info dicts, as SB3's DummyVecEnv gives them); no env is
stepped or reset one by one.

SB3's per-env calls (`get_attr`, `set_attr`, `env_method`) reach that one vector env: see each
method for what that means. stable-baselines3 is an optional dependency: importing this module
without it raises ImportError naming the pip command.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from typing import Any, Protocol, cast

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv, VectorWrapper

try:
    from stable_baselines3.common.vec_env import VecEnv, VecMonitor
    from stable_baselines3.common.vec_env.base_vec_env import (
        VecEnvIndices,
        VecEnvObs,
        VecEnvStepReturn,
    )
except ModuleNotFoundError as error:
    if not (error.name or "").startswith("stable_baselines3"):
        raise
    raise ImportError(
        "operant.compat.sb3 needs stable-baselines3: pip install stable-baselines3"
    ) from None

from operant.envs import make_env
from operant.envs.face.vector_spec import single_spec

__all__ = ["OperantVecEnv", "make_vec_env"]

# What SB3 asks a single env for, and where a vector env keeps the single-env answer.
_SINGLE_ENV_ATTRIBUTES = {
    "observation_space": "single_observation_space",
    "action_space": "single_action_space",
}


def _numpy(value: Any) -> np.ndarray:
    """A numpy array of `value` (torch tensors, from impl "torch", come back to the host)."""
    if hasattr(value, "detach"):
        value = value.detach().cpu()
    return np.asarray(value)


def _per_env(info: dict[str, Any], infos: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Add Gymnasium's vector info (a dict of batched values, each masked by "_<key>") into
    SB3's list of per-env dicts, and return that list. Nested dicts (such as
    RecordEpisodeStatistics's "episode") become nested per-env dicts; "final_obs" and
    "final_info" are the caller's to place."""
    for key, value in info.items():
        if key.startswith("_") or key in ("final_obs", "final_info"):
            continue
        mask = info.get(f"_{key}")
        rows = range(len(infos)) if mask is None else np.flatnonzero(_numpy(mask))
        if isinstance(value, dict):
            values: Any = _per_env(value, [{} for _ in infos])
        else:
            values = _numpy(value)
        for i in rows:
            infos[i][key] = values[i]
    return infos


class _PerEnvSeeds(Protocol):
    """A vector env whose `reset` also takes a seed per env: Gymnasium's Sync and Async vector
    envs and every Operant one do, and its VectorWrapper passes the seed on, though
    `VectorEnv.reset`'s annotation names a single seed only."""

    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]: ...


class OperantVecEnv(VecEnv):
    """An SB3 `VecEnv` over one Gymnasium vector env that autoresets in SAME_STEP mode (any
    Operant env, optionally under Gymnasium vector wrappers).

    Returns what SB3's DummyVecEnv returns: observations, float32 rewards and bool dones as
    fresh arrays (SB3 keeps references to them), and one info dict per env, holding
    `TimeLimit.truncated` (the episode was cut by the time limit, not ended by the task) on
    every step and, on the step that ends an episode, `terminal_observation`.
    """

    actions: np.ndarray
    """What `step_async` was given, for `step_wait` (declared here as DummyVecEnv does)."""

    def __init__(self, vector_env: VectorEnv):
        if getattr(vector_env, "info_mode", None) == "none":
            raise ValueError(
                "OperantVecEnv needs the terminal observations in info (SB3's "
                'terminal_observation): make the env with info_mode "stats" (the default) or '
                '"full", not "none"'
            )
        mode = vector_env.metadata.get("autoreset_mode")
        if mode != AutoresetMode.SAME_STEP:
            raise ValueError(
                f"OperantVecEnv needs a vector env that autoresets in SAME_STEP "
                f"mode (SB3's convention), got autoreset_mode={mode!r}; create the "
                "env without autoreset_mode, or with AutoresetMode.SAME_STEP"
            )
        self.vector_env = vector_env
        super().__init__(
            vector_env.num_envs, vector_env.single_observation_space, vector_env.single_action_space
        )
        # The env's own metadata wins, as in DummyVecEnv (it uses its first env's).
        self.metadata = {**self.metadata, **vector_env.metadata}
        # VecMonitor writes spec.id into monitor.csv's header (it read "None")
        self.spec = getattr(vector_env, "spec", None)

    def reset(self) -> VecEnvObs:
        """Reset every env, with the seeds `seed()` set and the options `set_options()` set
        (each used once, as in DummyVecEnv). SB3's seeds `seed + i` for env i are passed to
        the vector env as its one seed, which seeds env i's stream from (seed, i)."""
        env = cast(_PerEnvSeeds, self.vector_env)
        obs, info = env.reset(seed=self._reset_seed(), options=self._reset_option())
        self.reset_infos = _per_env(info, [{} for _ in range(self.num_envs)])
        self._reset_seeds()
        self._reset_options()
        return self._observations(obs)

    def _reset_seed(self) -> int | list[int | None] | None:
        seeds = self._seeds
        if all(seed is None for seed in seeds):
            return None
        first = seeds[0]
        if first is not None and seeds == list(range(first, first + self.num_envs)):
            return int(first)
        # Seeds other than seed()'s consecutive ones: the vector env's per-env form.
        return list(seeds)

    def _reset_option(self) -> dict[str, Any] | None:
        options = self._options
        if not any(options):
            return None
        if any(option != options[0] for option in options):
            raise ValueError(
                "set_options() gave the envs different options; an Operant vector "
                "env resets all its envs with one options dict: pass one dict"
            )
        return options[0]

    def step_async(self, actions: np.ndarray) -> None:
        """Keep a copy of `actions` (one per env) for `step_wait`."""
        self.actions = np.array(actions)

    def step_wait(self) -> VecEnvStepReturn:
        actions = self.actions
        shape = self.vector_env.action_space.shape
        if shape is not None and actions.size == np.prod(shape, dtype=int):
            actions = actions.reshape(shape)  # SB3 may hand Discrete actions as (N, 1)
        obs, rewards, terminated, truncated, info = self.vector_env.step(actions)
        terminated, truncated = _numpy(terminated), _numpy(truncated)
        dones = terminated | truncated
        infos = _per_env(
            info,
            [
                {"TimeLimit.truncated": time_limit}
                for time_limit in (truncated & ~terminated).tolist()
            ],
        )
        ended = np.flatnonzero(dones)
        if ended.size:
            self._place_episode_ends(ended, info, infos)
        return (
            self._observations(obs),
            _numpy(rewards).astype(np.float32, copy=False),
            dones,
            infos,
        )

    def _place_episode_ends(
        self, ended: np.ndarray, info: dict[str, Any], infos: list[dict[str, Any]]
    ) -> None:
        """For each env that ended: the terminal observation and the ending step's own info
        into its step info, and what the vector env reported after its reset into
        `reset_infos` (where DummyVecEnv keeps a reset's info)."""
        final_obs = _numpy(info["final_obs"])
        final_infos = _per_env(info.get("final_info", {}), [{} for _ in infos])
        shape = self.observation_space.shape
        for i in ended:
            self.reset_infos[i] = dict(infos[i])
            del self.reset_infos[i]["TimeLimit.truncated"]  # the step's, not the reset's
            infos[i].update(final_infos[i])
            infos[i]["terminal_observation"] = np.array(final_obs[i]).reshape(shape)

    def _observations(self, obs: Any) -> np.ndarray:
        # An Operant env's observation space has a shape (Box, Discrete, MultiDiscrete...).
        shape = cast("tuple[int, ...]", self.observation_space.shape)
        return _numpy(obs).reshape((self.num_envs, *shape))

    def close(self) -> None:
        self.vector_env.close()

    # -- SB3's per-env calls, on one vector env that holds every env ---------------------------
    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        """The vector env's attribute, once per index; `observation_space` and `action_space`
        are the single env's, as DummyVecEnv's envs report them, and so is `spec` (the id's
        EnvSpec, as `gymnasium.make` gives it). AttributeError if absent."""
        value = getattr(self.vector_env, _SINGLE_ENV_ATTRIBUTES.get(attr_name, attr_name))
        if attr_name == "spec":
            value = single_spec(value)
        return [value for _ in self._get_indices(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        """Set the attribute on the vector env, which is every env at once: `indices` must
        name all of them (or be None); a subset raises ValueError."""
        self._require_all(indices, f"set_attr({attr_name!r})")
        setattr(self.vector_env, attr_name, value)

    def env_method(
        self, method_name: str, *method_args, indices: VecEnvIndices = None, **method_kwargs
    ) -> list[Any]:
        """Call the vector env's method once, whatever `indices` name (it acts on every env it
        holds), and give each index its result: `render` renders once, not N times."""
        indices = list(self._get_indices(indices))
        result = getattr(self.vector_env, method_name)(*method_args, **method_kwargs)
        return [result for _ in indices]

    def env_is_wrapped(self, wrapper_class: type, indices: VecEnvIndices = None) -> list[bool]:
        """Whether the vector env is, or is under, a `wrapper_class` (a Gymnasium vector
        wrapper); a single-env wrapper such as SB3's Monitor never is."""
        env: Any = self.vector_env
        wrapped = isinstance(env, wrapper_class)
        while not wrapped and isinstance(env, VectorWrapper):
            env = env.env
            wrapped = isinstance(env, wrapper_class)
        return [wrapped for _ in self._get_indices(indices)]

    def get_images(self) -> Sequence[np.ndarray | None]:
        """One frame per env from the vector env's `render()`, when its render_mode is
        "rgb_array" (else a warning and None per env, as DummyVecEnv does)."""
        if self.render_mode != "rgb_array":
            warnings.warn(
                f"The render mode is {self.render_mode}, but this method assumes it "
                "is `rgb_array` to obtain images.",
                stacklevel=2,
            )
            return [None for _ in range(self.num_envs)]
        frames = self.vector_env.render()
        if frames is None:
            return [None for _ in range(self.num_envs)]
        return list(cast("Sequence[np.ndarray]", frames))  # render_mode "rgb_array": arrays

    def _require_all(self, indices: VecEnvIndices, call: str) -> None:
        asked = sorted(set(self._get_indices(indices)))
        if asked != list(range(self.num_envs)):
            raise ValueError(
                f"{call} on envs {asked}: an Operant vector env holds all "
                f"{self.num_envs} envs in one object, so this applies to all of "
                "them at once; pass indices=None"
            )


def make_vec_env(
    env_id: str,
    n_envs: int = 1,
    seed: int | None = None,
    impl: str = "auto",
    monitor: bool = True,
    monitor_dir: str | os.PathLike | None = None,
    **env_kwargs: Any,
) -> VecEnv:
    """SB3's `make_vec_env` for an Operant env: `n_envs` envs of `env_id` (with or without the
    `operant/` prefix; any Gymnasium id with impl="reference") in one Operant vector env,
    adapted by OperantVecEnv.

    As SB3's own make_vec_env does: `seed` seeds the first reset (`seed + i` for env i; a
    random seed when None) and the action space; episodes are recorded for SB3's logs
    (`rollout/ep_rew_mean`) and `evaluate_policy` by a VecMonitor around the env, writing
    `monitor.csv` into `monitor_dir` when given (`monitor=False` returns the bare
    OperantVecEnv). Other keyword arguments go to the env's constructor.
    """
    vec_env: VecEnv = OperantVecEnv(make_env(env_id, n_envs, impl=impl, **env_kwargs))
    if seed is not None:
        vec_env.action_space.seed(seed)
    vec_env.seed(seed)
    if monitor:
        if monitor_dir is not None:
            os.makedirs(monitor_dir, exist_ok=True)
        vec_env = VecMonitor(vec_env, filename=None if monitor_dir is None else str(monitor_dir))
    return vec_env

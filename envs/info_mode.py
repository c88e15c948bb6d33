"""What Gymnasium's `step()` puts in `info`: `make_env(..., info_mode=...)`, config
`env.info_mode`.

- `"stats"` (the default): the env as it is. `info` holds only what SAME_STEP autoreset needs
  (`final_obs` and its mask `_final_obs` where an episode ended); episode statistics are
  reduced in the kernel and read with `drain_episode_stats()` / `recent_returns(k)`, never
  through per-env Python objects. The trainer reads them so in every mode.
- `"full"`: `InfoModeEnv` adds Gymnasium's `RecordEpisodeStatistics` keys for the envs whose
  episode ended: `info["episode"] = {"r": float32 (N,), "l": int32 (N,)}` and the mask
  `info["_episode"]` (bool (N,)), tracked with a few numpy operations per step.
- `"none"`: `InfoModeEnv` returns an empty `info`, without the terminal observations'
  copy: the fastest Gymnasium step, for loops that need nothing but the arrays.

`step_bound()`, what the trainer calls, builds no `info` at all, so the mode changes nothing
there. docs/envs.md ("info_mode") has the measured cost of each.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from operant.envs.registry import EnvError

InfoMode = Literal["full", "stats", "none"]
INFO_MODES: tuple[str, ...] = ("full", "stats", "none")


def with_info_mode(env: Any, info_mode: str) -> Any:
    """`env` itself for "stats", else `InfoModeEnv(env, info_mode)`; EnvError naming
    env.info_mode for another value."""
    if info_mode not in INFO_MODES:
        raise EnvError(
            f"env.info_mode = {info_mode!r}: choose one of {', '.join(map(repr, INFO_MODES))}"
        )
    return env if info_mode == "stats" else InfoModeEnv(env, info_mode)


class InfoModeEnv:
    """`env` with `step()`'s info as `info_mode` says; everything else is `env`'s."""

    def __init__(self, env: Any, info_mode: str):
        self.env, self.info_mode = env, info_mode
        rows = env.layout.num_rows
        self._returns = np.zeros(rows, np.float64)
        self._lengths = np.zeros(rows, np.int64)
        self._done = np.zeros(rows, np.bool_)

    def reset(self, *, seed: Any = None, options: dict[str, Any] | None = None):
        self._returns[:] = 0.0
        self._lengths[:] = 0
        return self.env.reset(seed=seed, options=options)

    def step(self, actions: Any) -> tuple[Any, ...]:
        env = self.env
        if self.info_mode == "none":
            if actions is not env.actions:
                np.copyto(env.actions, np.asarray(actions), casting="same_kind")
            env.step_bound()
            copy = getattr(env, "copy", False)
            outputs = (env.obs, env.rewards, env.terminated, env.truncated)
            if copy:
                outputs = tuple(array.copy() for array in outputs)
            return (*outputs, {})
        obs, rewards, terminated, truncated, info = env.step(actions)
        self._returns += rewards
        self._lengths += 1
        done = np.logical_or(terminated, truncated, out=self._done)
        if done.any():
            info = {
                **info,
                "episode": {
                    "r": np.where(done, self._returns, 0.0).astype(np.float32),
                    "l": np.where(done, self._lengths, 0).astype(np.int32),
                },
                "_episode": done.copy(),
            }
            self._returns[done] = 0.0
            self._lengths[done] = 0
        return obs, rewards, terminated, truncated, info

    def __getattr__(self, name: str) -> Any:
        if name == "env":
            raise AttributeError(name)
        return getattr(self.env, name)

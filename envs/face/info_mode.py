"""What Gymnasium's `step()` puts in `info`: `make_env(..., info_mode=...)`, config
`env.info_mode`.

- `"stats"` (the default): the env as it is. `info` holds only what SAME_STEP autoreset needs
  (`final_obs` and its mask `_final_obs` where an episode ended, with Gymnasium's
  `final_info`, `{}`, and `_final_info` beside them); episode statistics are
  reduced in the kernel and read with `drain_episode_stats()` / `recent_returns(k)`, never
  through per-env Python objects. The trainer reads them so in every mode.
- `"full"`: `InfoModeEnv` adds Gymnasium's `RecordEpisodeStatistics` keys for the envs whose
  episode ended, counted as that wrapper counts them in either autoreset mode:
  `info["episode"] = {"r": float64 (N,), "l": int64 (N,), "t": float64 (N,) seconds}` and
  the mask `info["_episode"]` (bool (N,)), tracked with a few numpy operations per step (a
  torch env's outputs come to the host for it).
- `"none"`: `InfoModeEnv` returns an empty `info`; a host env that autoresets SAME_STEP
  steps without the terminal observations' copy: the fastest Gymnasium step, for loops that
  need nothing but the arrays (under NEXT_STEP, with frames, or on torch, the env's own
  `step()` runs and its info is dropped).

`step_bound()`, what the trainer calls, builds no `info` at all, so the mode changes nothing
there. docs/envs.md ("info_mode") has the measured cost of each.
"""

from __future__ import annotations

import time
from typing import Any, Literal

import numpy as np
from gymnasium.vector import AutoresetMode

from operant.envs.contract import StepsInHalves, to_host
from operant.envs.face.forwarding import EnvLayer
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
    if info_mode == "stats":
        return env
    return (HalvesInfoModeEnv if isinstance(env, StepsInHalves) else InfoModeEnv)(env, info_mode)


class InfoModeEnv(EnvLayer):
    """`env` with `step()`'s info as `info_mode` says; everything else is `env`'s. A
    Gymnasium VectorEnv (EnvLayer), so Gymnasium's vector wrappers take it."""

    def __init__(self, env: Any, info_mode: str):
        self._layer_over(env)
        self.info_mode = info_mode
        rows = env.layout.num_rows
        self._returns = np.zeros(rows, np.float64)
        self._lengths = np.zeros(rows, np.int64)
        self._started = np.zeros(rows, np.float64)
        self._prev_done = np.zeros(rows, np.bool_)
        self._next_step_mode = env.metadata.get("autoreset_mode") == AutoresetMode.NEXT_STEP
        # The step without info, through the core where nothing needs the env's own step():
        # a host env that autoresets SAME_STEP and draws no frames.
        self._bare = (
            getattr(env, "_next_step", False) is None
            and getattr(env, "render_mode", None) is None
            and isinstance(env.actions, np.ndarray)
            and callable(getattr(env, "_load_actions", None))
        )

    def reset(self, *, seed: Any = None, options: dict[str, Any] | None = None):
        self._returns[:] = 0.0
        self._lengths[:] = 0
        self._started[:] = time.perf_counter()
        self._prev_done[:] = False
        return self.env.reset(seed=seed, options=options)

    def step(self, actions: Any) -> tuple[Any, ...]:
        if self.info_mode == "none":
            return self._step_without_info(actions)
        obs, rewards, terminated, truncated, info = self.env.step(actions)
        return (
            obs,
            rewards,
            terminated,
            truncated,
            self._with_episodes(info, to_host(rewards), to_host(terminated), to_host(truncated)),
        )

    def _step_without_info(self, actions: Any) -> tuple[Any, ...]:
        env = self.env
        if not self._bare:
            obs, rewards, terminated, truncated, _ = env.step(actions)
            return obs, rewards, terminated, truncated, {}
        if actions is not env.actions:
            env._load_actions(actions)  # refused in one line, as by step()
        env.step_bound()
        outputs = (env.obs, env.rewards, env.terminated, env.truncated)
        if getattr(env, "copy", False):
            outputs = tuple(array.copy() for array in outputs)
        return (*outputs, {})

    def _with_episodes(
        self, info: dict[str, Any], rewards: Any, terminated: Any, truncated: Any
    ) -> dict[str, Any]:
        """Gymnasium's RecordEpisodeStatistics keys, counted as it counts them: under
        NEXT_STEP the reset step (the one after an episode's end) is no episode's."""
        returns, lengths, started = self._returns, self._lengths, self._started
        if self._next_step_mode:
            # the reset step (after an episode's end) starts the counts afresh
            reset = self._prev_done
            if reset.any():
                np.copyto(returns, 0.0, where=reset)
                np.copyto(lengths, 0, where=reset)
                np.copyto(started, time.perf_counter(), where=reset)
                lengths -= reset  # (and its reward is 0: the += below adds nothing)
        returns += rewards
        lengths += 1
        done = np.logical_or(terminated, truncated, out=self._prev_done)
        if not done.any():
            return info
        now = time.perf_counter()
        info = {
            **info,
            "episode": {
                "r": np.where(done, returns, 0.0),
                "l": np.where(done, lengths, 0),
                "t": np.where(done, np.round(now - started, 6), 0.0),
            },
            "_episode": done.copy(),
        }
        if not self._next_step_mode:
            np.copyto(returns, 0.0, where=done)
            np.copyto(lengths, 0, where=done)
            np.copyto(started, now, where=done)
        return info


class HalvesInfoModeEnv(InfoModeEnv):
    """InfoModeEnv over an env that steps in halves (the overlapped rollout's), declaring
    operant.envs.contract.StepsInHalves itself, as a layer must: `step()`'s info changes
    nothing on the trainer's path, so its halves are the inner env's."""

    def __init__(self, env: StepsInHalves, info_mode: str):
        super().__init__(env, info_mode)
        self.halves = env.halves
        self._split = env

    def start_half(self, which: int) -> None:
        self._split.start_half(which)

    def finish_half(self, which: int) -> None:
        self._split.finish_half(which)

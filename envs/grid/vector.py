"""Grid-v0: the many-agent grid world's face (operant.cext.grid's kernel), agents as rows.

`GridVectorEnv(num_envs, **config)` is `num_envs` worlds of `agents` agents each, a Gymnasium
`VectorEnv` over `num_envs * agents` rows (row r is agent r % K of env r // K; Gymnasium's
`num_envs` attribute counts rows, `layout` says how they group) that implements
operant.envs.contract.BatchEnv. Rules, actions and the token features: docs/envs.md ("Grid").

- observation row: uint8 (tokens, 3), MettaGrid's token format, 0xFF padded;
- action row: Discrete(9): noop, move N/E/S/W, face N/E/S/W;
- all agents of an env are truncated together at `max_episode_steps`; rewards are per agent;
  episode statistics per agent (rows) and per env (`per_env`: the sum of its agents').

Two switches are read once, at construction (an explicit argument wins):
- `OPERANT_OBS_VALIDATION=1` (`validate`): every step writes each observation with both
  encoders and counts the bytes where they differ (`obs_mismatches`);
- `OPERANT_PROFILING=1` (`profile`): nanoseconds per step phase, summed since construction, in
  `step_timing` (a dict in grid.h's phase order). Off, the kernel pays one predictable branch
  per phase per step, outside every loop.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Sequence
from dataclasses import fields
from typing import Any, TypeGuard

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
)
from operant.envs.face.autoreset import autoreset_mode
from operant.envs.face.seeding import check_seed, per_env_streams, seed_np_random
from operant.envs.grid.config import GridConfig, GridConfigError
from operant.envs.native.vector import load_actions, recent_from_ring, step_outputs
from operant.envs.registry import EnvError, InvalidActionError

NUM_ACTIONS = 9
ACTION_NAMES = (
    "noop",
    "move_north",
    "move_east",
    "move_south",
    "move_west",
    "face_north",
    "face_east",
    "face_south",
    "face_west",
)
CONFIG_FIELDS = tuple(field.name for field in fields(GridConfig))


def _switch(name: str, value: bool | None) -> bool:
    return bool(value) if value is not None else os.environ.get(name, "") == "1"


def _gymnasium_options(config: dict[str, Any]) -> None:
    """Take Gymnasium's vector options out of `config`: what Grid-v0 does anyway is accepted
    (SAME_STEP autoreset, no render mode), anything else refused in one line saying so."""
    if "autoreset_mode" in config:
        mode = autoreset_mode(config.pop("autoreset_mode"))
        if mode != AutoresetMode.SAME_STEP:
            raise GridConfigError(
                f"Grid-v0 autoresets SAME_STEP only (a world's agents restart in the step that "
                f"ends it), got autoreset_mode={mode}"
            )
    if config.pop("render_mode", None) is not None:
        raise GridConfigError("Grid-v0 draws no frames: render_mode must be None")


class GridVectorEnv(NotCopyable, VectorEnv):
    """`num_envs` grid worlds stepped by one kernel; BatchEnv over their agents."""

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}
    impl = "native"
    resumable = True

    def __init__(
        self,
        num_envs: int,
        copy: bool = True,
        *,
        encoder: str = "sparse",
        validate: bool | None = None,
        profile: bool | None = None,
        **config: Any,
    ):
        from operant.cext.grid import PHASES, GridKernel

        num_envs = positive_count("num_envs", num_envs)
        _gymnasium_options(config)
        unknown = sorted(set(config) - set(CONFIG_FIELDS))
        if unknown:
            raise GridConfigError(
                f"Grid-v0 has no option {unknown[0]!r}; options: {', '.join(CONFIG_FIELDS)}"
            )
        if config.get("max_episode_steps") is None:
            config.pop("max_episode_steps", None)
        self.config = GridConfig(**config).check()
        agents, tokens = self.config.agents, self.config.tokens
        self.layout = RowLayout(num_envs, agents)
        self.num_envs = rows = self.layout.num_rows
        self.copy = copy
        self.single_observation_space = spaces.Box(0, 255, (tokens, 3), np.uint8)
        self.single_action_space = spaces.Discrete(NUM_ACTIONS)
        self.observation_space = batch_space(self.single_observation_space, rows)
        self.action_space = batch_space(self.single_action_space, rows)
        self.obs_spec = ObsSpec((tokens, 3), np.dtype(np.uint8))
        self.act_spec = ActSpec((), np.dtype(np.int64), NUM_ACTIONS)
        self.spec = None
        self.actions = np.zeros(rows, np.int64)
        self.obs = np.full((rows, tokens, 3), 0xFF, np.uint8)
        self.final_obs = np.full_like(self.obs, 0xFF)
        self.rewards = np.zeros(rows, np.float32)
        self.terminated = np.zeros(rows, np.bool_)
        self.truncated = np.zeros(rows, np.bool_)
        self.validating = _switch("OPERANT_OBS_VALIDATION", validate)
        self.profiling = _switch("OPERANT_PROFILING", profile)
        self.kernel = GridKernel(
            num_envs,
            self.config,
            self.actions,
            self.obs,
            self.rewards,
            self.terminated,
            self.truncated,
            self.final_obs,
            encoder=encoder,
            validate=self.validating,
            profile=self.profiling,
        )
        self._phases = PHASES
        self._seeded = False

    @property
    def obs_mismatches(self) -> int:
        """Bytes where the two encoders disagreed, since construction (0 unless validating)."""
        return int(self.kernel.mismatches[0])

    @property
    def step_timing(self) -> dict[str, int]:
        """Nanoseconds per step phase since construction (zeros unless profiling)."""
        return {phase: int(ns) for phase, ns in zip(self._phases, self.kernel.timing)}

    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ):
        """New episodes in every env (world). An int seed re-seeds world e's stream from
        (seed, e); a list, one seed per world (not per row: a world's agents share its
        stream), world e's from (seed[e], 0), kept where None (operant.envs.face.seeding); no seed
        on the first reset draws one from the OS; later resets without one continue."""
        refuse_reset_options(options, "Grid-v0")
        worlds, agents = self.layout.num_envs, self.layout.agents_per_env
        if _row_seeds(seed, worlds * agents, worlds):
            # one seed a row, as generic vector code builds them (`range(env.num_envs)`): a
            # world takes its first agent's
            seed = list(seed)[::agents]
        try:
            seed = check_seed(seed, worlds)
            seed_np_random(self, seed)
        except ValueError as error:
            raise ValueError(
                f"Grid-v0 ({worlds} worlds of {agents} agents): {error} (one a world, or one "
                f"a row: {worlds * agents})"
            ) from None
        if isinstance(seed, list):
            streams = per_env_streams(seed, None if self._seeded else secrets.randbits(64))
            for world, stream in enumerate(streams):
                if stream is not None:
                    self.kernel.rng_state[world] = stream
            seed = None
        elif seed is None and not self._seeded:
            seed = secrets.randbits(64)
        self.kernel.reset(seed)
        self._seeded = True
        return (self.obs.copy() if self.copy else self.obs), {}

    def step(self, actions: Any) -> tuple[Any, ...]:
        load_actions(self, actions)
        self.step_bound()
        info: dict[str, Any] = {}
        if self.truncated.any():
            info["final_obs"] = self.final_obs.copy()
            info["_final_obs"] = self.truncated.copy()
            info["final_info"], info["_final_info"] = {}, info["_final_obs"]
        return step_outputs(self, info)

    def step_bound(self) -> None:
        """Step with the actions already in `self.actions`; outputs land in the buffers."""
        bad = self.kernel.step()
        if bad >= 0:
            raise InvalidActionError(
                f"action {int(self.actions[bad])} for row {bad} (agent "
                f"{bad % self.layout.agents_per_env} of env "
                f"{bad // self.layout.agents_per_env}) is outside "
                f"Discrete({NUM_ACTIONS})"
            )

    def drain_episode_stats(self) -> EpisodeStats:
        kernel = self.kernel
        per_env = EpisodeStats.from_record(kernel.env_stats)
        stats = EpisodeStats.from_record(kernel.row_stats, per_env=per_env)
        clear_stats(kernel.row_stats)
        clear_stats(kernel.env_stats)
        return stats

    def recent_returns(self, count: int) -> np.ndarray:
        return recent_from_ring(self.kernel.ring_returns, int(self.kernel.ring_head[0]), count)

    def state_dict(self) -> dict[str, Any]:
        """The kernel's state arrays (row_stats / env_stats as their 8 float64 words) and the
        observation buffer."""
        from operant.cext.grid import STATE

        state = {name: getattr(self.kernel, name) for name in STATE}
        for name in ("row_stats", "env_stats"):
            state[name] = state[name].view(np.float64)
        state["obs"] = self.obs
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        restore_state(state, self.state_dict())
        self._seeded = True

    def close(self, **kwargs: Any) -> None:
        pass


def make_grid(num_envs: int, copy: bool = True, **kwargs: Any) -> GridVectorEnv:
    """What `make_env("Grid-v0", num_envs, ...)` calls (register_family's factory)."""
    return GridVectorEnv(num_envs, copy=copy, **kwargs)


def no_single_env(**kwargs: Any) -> Any:
    """`gymnasium.make("operant/Grid-v0")`'s entry point: a grid world has many agents, so
    there is no single-agent Gymnasium env to return; says what to use instead."""
    raise EnvError(
        "operant/Grid-v0 has many agents per world, so gymnasium.make has no single env to "
        'return: use gymnasium.make_vec("operant/Grid-v0", num_envs=N, '
        'vectorization_mode="vector_entry_point") (agents as rows) or the PettingZoo face, '
        "operant.envs.grid.pettingzoo.GridParallelEnv"
    )


def _row_seeds(seed: Any, rows: int, worlds: int) -> TypeGuard[Sequence[int | None] | np.ndarray]:
    """Whether `seed` is a list of one seed a row (rows > worlds: a world has several)."""
    return rows != worlds and isinstance(seed, (list, tuple, np.ndarray)) and len(seed) == rows

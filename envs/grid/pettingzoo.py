"""Grid-v0 as a PettingZoo `ParallelEnv`: one world, its agents by name (needs `pettingzoo`,
which Operant does not depend on: `pip install pettingzoo`).

`GridParallelEnv(**config)` takes GridConfig's fields (operant.envs.grid.config). Agents are
"agent_0" .. "agent_{K-1}"; each observes uint8 (tokens, 3) and acts in Discrete(9), as a row
of operant.envs.grid.vector.GridVectorEnv does (this face is that env with one world). An episode
ends for every agent at once, truncated at `max_episode_steps`: that step returns the
terminal observations, `agents` becomes empty, and `reset()` starts the next episode, as
PettingZoo's API asks.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np
from pettingzoo import ParallelEnv

from operant.envs.grid.vector import GridVectorEnv


class GridParallelEnv(ParallelEnv):
    """One grid world, PettingZoo's parallel API."""

    metadata = {"name": "operant_grid_v0", "render_modes": []}

    def __init__(self, **config: Any):
        self.vector = GridVectorEnv(1, copy=False, **config)
        self.possible_agents = [f"agent_{k}" for k in range(self.vector.layout.agents_per_env)]
        self.agents: list[str] = []
        self.render_mode = None

    def observation_space(self, agent: str):
        return self.vector.single_observation_space

    def action_space(self, agent: str):
        return self.vector.single_action_space

    def _by_agent(self, rows: np.ndarray) -> dict[str, Any]:
        return {agent: rows[k].copy() for k, agent in enumerate(self.possible_agents)}

    def reset(self, seed: int | None = None, options: dict | None = None):
        """A new episode; a seed re-seeds the world's stream, None continues it."""
        self.vector.reset(seed=seed)
        self.agents = list(self.possible_agents)
        return self._by_agent(self.vector.obs), {agent: {} for agent in self.agents}

    def step(self, actions: dict[str, int]):
        """Every live agent's action by name (all of them: the world steps them together).
        After the episode's end (`agents` empty) an empty dict steps nothing, as PettingZoo's
        own envs do, and actions are refused: the world waits for `reset()`."""
        if not self.agents:
            if actions:
                raise ValueError(
                    "no agent is live (the episode ended, or reset() was not called): call "
                    "reset() before stepping"
                )
            return {}, {}, {}, {}, {}
        vector = self.vector
        vector.step(self._actions(actions))
        ended = bool(vector.truncated[0])
        obs = self._by_agent(vector.final_obs if ended else vector.obs)
        rewards = {agent: float(vector.rewards[k]) for k, agent in enumerate(self.agents)}
        terminations = {agent: False for agent in self.agents}
        truncations = {agent: ended for agent in self.agents}
        infos: dict[str, dict] = {agent: {} for agent in self.agents}
        if ended:
            self.agents = []
        return obs, rewards, terminations, truncations, infos

    def _actions(self, actions: dict[str, Any]) -> np.ndarray:
        """Every agent's action as an integer, in row order; one line for a missing agent, a
        name that is no agent's, or a value that is not an integer (1.7 is not taken as 1)."""
        unknown = sorted(map(str, set(actions) - set(self.possible_agents)))
        if unknown:
            raise ValueError(
                f"actions for {', '.join(unknown)}, which are no agents of this world "
                f"(agent_0 .. agent_{len(self.possible_agents) - 1})"
            )
        missing = sorted(set(self.agents) - set(actions))
        if missing:
            raise ValueError(
                f"actions are missing for {', '.join(missing)}; every live agent acts at every step"
            )
        try:
            return np.array([operator.index(actions[agent]) for agent in self.possible_agents])
        except TypeError:
            bad = next(a for a in self.possible_agents if not _is_index(actions[a]))
            raise ValueError(
                f"the action of {bad} must be an integer in 0 .. 8, got {actions[bad]!r}"
            ) from None


def _is_index(value: Any) -> bool:
    try:
        operator.index(value)
    except TypeError:
        return False
    return True

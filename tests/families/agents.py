"""Agents-v0: K = 4 agents per env, written against operant.envs.contract alone.

Rows are envs x agents (`RowLayout(num_envs, 4)`; row r is agent r % 4 of env r // 4). At
every step each agent is shown a cue (one of 3) and rewarded 1 for naming it (Discrete(3));
rewards are per agent. All agents of an env end together: the env terminates when every one
of its agents is wrong in the same step, and is truncated after `max_episode_steps` (8).
An agent's observation is float32 (8,): the cue one-hot (3), its agent index one-hot (4),
and the fraction of the episode gone.

Per-agent and per-env episodes come from operant.envs.face.episodes (an env's return is the sum
of its agents'). Importing the module registers the family as "Agents-v0" and the policy
"agent-mlp" (a small MLP shared by all agents, chosen with policy.kind = "agent-mlp"; "auto"
would choose the built-in MLP for these flat float32 observations).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from operant.envs import register_family
from operant.envs.contract import ActSpec, EpisodeStats, ObsSpec, RowLayout
from operant.envs.face.episodes import EpisodeAccounting
from operant.trainer.policies.registry import HeadsPolicy, register_policy
from tests.families.common import check_discrete, draw, load_arrays, seed_streams

AGENTS = 4
CUES = 3
HORIZON = 8
OBS_SIZE = CUES + AGENTS + 1


class AgentsEnv:
    """`num_envs` envs of 4 agents each: `4 * num_envs` rows (BatchEnv)."""

    impl = "native"
    resumable = True

    def __init__(self, num_envs: int, max_episode_steps: int | None = None):
        self.layout = RowLayout(num_envs, AGENTS)
        rows = self.layout.num_rows
        self.obs_spec = ObsSpec((OBS_SIZE,), np.float32)
        self.act_spec = ActSpec((), np.dtype(np.int64), CUES)
        self.horizon = max_episode_steps or HORIZON
        self.obs = np.zeros((rows, OBS_SIZE), dtype=np.float32)
        self.final_obs = np.zeros_like(self.obs)
        self.actions = np.zeros(rows, dtype=np.int64)
        self.rewards = np.zeros(rows, dtype=np.float32)
        self.terminated = np.zeros(rows, dtype=np.bool_)
        self.truncated = np.zeros(rows, dtype=np.bool_)
        self.rng = np.zeros(num_envs, dtype=np.uint64)
        self.cue = np.zeros((num_envs, AGENTS), dtype=np.int64)
        self.step_count = np.zeros(num_envs, dtype=np.int64)
        self.episodes = EpisodeAccounting(self.layout)
        self._seeded = False
        # The agent-index part of every observation never changes.
        self._by_env()[..., CUES : CUES + AGENTS] = np.eye(AGENTS, dtype=np.float32)

    def _by_env(self, buffer: np.ndarray | None = None) -> np.ndarray:
        """A row buffer seen as (envs, agents, ...)."""
        buffer = self.obs if buffer is None else buffer
        return buffer.reshape(self.layout.num_envs, AGENTS, *buffer.shape[1:])

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        if seed is not None or not self._seeded:
            seed_streams(self.rng, seed)
            self._seeded = True
        self.step_count[:] = 0
        self._draw(np.ones(self.layout.num_envs, dtype=np.bool_))
        self.episodes.reset_episodes()
        return self.obs, {}

    def step_bound(self) -> None:
        check_discrete(self.actions, CUES)
        right = self._by_env(self.actions) == self.cue
        self.rewards[:] = right.reshape(-1)
        self.step_count += 1
        env_terminated = ~right.any(axis=1)
        env_truncated = ~env_terminated & (self.step_count >= self.horizon)
        self._by_env(self.terminated)[:] = env_terminated[:, None]
        self._by_env(self.truncated)[:] = env_truncated[:, None]
        self._draw(np.ones(self.layout.num_envs, dtype=np.bool_))
        done = env_terminated | env_truncated
        if done.any():
            self._by_env(self.final_obs)[done] = self._by_env()[done]
            self.step_count[done] = 0
            self._draw(done)
        self.episodes.record(self.rewards, self.terminated, self.truncated)

    def _draw(self, envs: np.ndarray) -> None:
        """New cues for the agents of `envs` (a mask): their streams advance once."""
        streams = self.rng[envs]
        words = draw(streams)
        self.rng[envs] = streams
        shifts = np.arange(AGENTS, dtype=np.uint64) * np.uint64(8)
        self.cue[envs] = ((words[:, None] >> shifts) % np.uint64(CUES)).astype(np.int64)
        view = self._by_env()
        view[envs, :, :CUES] = np.eye(CUES, dtype=np.float32)[self.cue[envs]]
        view[envs, :, -1] = (self.step_count[envs] / self.horizon)[:, None]

    def drain_episode_stats(self) -> EpisodeStats:
        return self.episodes.drain()

    def recent_returns(self, count: int) -> np.ndarray:
        return self.episodes.recent_returns(count)

    def state_dict(self) -> dict[str, Any]:
        arrays = {"rng": self.rng, "cue": self.cue, "step_count": self.step_count, "obs": self.obs}
        arrays.update(
            {f"episodes.{name}": value for name, value in self.episodes.state_dict().items()}
        )
        return arrays

    def load_state_dict(self, state: dict[str, Any]) -> None:
        load_arrays(self.state_dict(), state, "Agents-v0")
        self._seeded = True

    def close(self) -> None:
        pass


class AgentMLP(HeadsPolicy):
    """One hidden layer shared by all agents (the agent index is in the observation)."""

    def __init__(self, obs_size: int, num_actions: int, hidden: int = 32):
        super().__init__()
        self.num_actions = num_actions
        self.body = nn.Sequential(nn.Linear(obs_size, hidden), nn.Tanh())
        self.actor = nn.Linear(hidden, num_actions)
        self.critic = nn.Linear(hidden, 1)

    def heads(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.body(obs)
        return self.actor(x), self.critic(x).squeeze(-1)


def _reads_agents(obs_spec: ObsSpec, act_spec: ActSpec) -> bool:
    return obs_spec.shape == (OBS_SIZE,) and obs_spec.dtype == np.float32 and act_spec.discrete


register_family("Agents-v0", lambda num_envs, copy=True, **kwargs: AgentsEnv(num_envs, **kwargs))
register_policy(
    "agent-mlp",
    _reads_agents,
    lambda config, obs_spec, act_spec: AgentMLP(OBS_SIZE, act_spec.num_actions),
)

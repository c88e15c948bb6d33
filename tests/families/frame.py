"""Frames-v0: a uint8 C x H x W pixel family, written against operant.envs.contract alone.

Each env shows a 2 x 8 x 8 frame: channel 0 has one lit pixel (255), in the left half or the
right half; channel 1 is filled with 15 x the steps taken in the episode. The action
(Discrete(2)) guesses the half: reward 1 for a right guess; a wrong guess terminates the
episode, and an episode that reaches `max_episode_steps` (16) right guesses is truncated. A
random policy returns about 1; a policy that reads the frame returns 16.

Numpy buffers allocated once, a per-env xorshift64 stream, SAME_STEP autoreset, episode
statistics by operant.envs.face.episodes, explicit state. Importing the module registers the
family as "Frames-v0" and the policy "tiny-cnn" for uint8 (C, H, W) observations.
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

FRAME = (2, 8, 8)
HORIZON = 16


class FramesEnv:
    """`num_envs` frame envs, one row each (operant.envs.contract.BatchEnv)."""

    impl = "native"
    resumable = True

    def __init__(self, num_envs: int, max_episode_steps: int | None = None):
        self.layout = RowLayout(num_envs)
        self.obs_spec = ObsSpec(FRAME, np.uint8)
        self.act_spec = ActSpec((), np.dtype(np.int64), 2)
        self.horizon = max_episode_steps or HORIZON
        self.obs = np.zeros((num_envs, *FRAME), dtype=np.uint8)
        self.final_obs = np.zeros_like(self.obs)
        self.actions = np.zeros(num_envs, dtype=np.int64)
        self.rewards = np.zeros(num_envs, dtype=np.float32)
        self.terminated = np.zeros(num_envs, dtype=np.bool_)
        self.truncated = np.zeros(num_envs, dtype=np.bool_)
        self.rng = np.zeros(num_envs, dtype=np.uint64)
        self.side = np.zeros(num_envs, dtype=np.int64)
        self.row = np.zeros(num_envs, dtype=np.int64)
        self.col = np.zeros(num_envs, dtype=np.int64)
        self.step_count = np.zeros(num_envs, dtype=np.int64)
        self.episodes = EpisodeAccounting(self.layout)
        self._seeded = False

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        if seed is not None or not self._seeded:
            seed_streams(self.rng, seed)
            self._seeded = True
        self.step_count[:] = 0
        self._draw(np.ones(self.layout.num_envs, dtype=np.bool_))
        self.episodes.reset_episodes()
        return self.obs, {}

    def step_bound(self) -> None:
        check_discrete(self.actions, 2)
        right = self.actions == self.side
        self.rewards[:] = right
        self.step_count += 1
        np.logical_not(right, out=self.terminated)
        np.logical_and(right, self.step_count >= self.horizon, out=self.truncated)
        everyone = np.ones(self.layout.num_envs, dtype=np.bool_)
        self._draw(everyone)
        done = self.terminated | self.truncated
        if done.any():
            self.final_obs[done] = self.obs[done]
            self.step_count[done] = 0
            self._draw(done)
        self.episodes.record(self.rewards, self.terminated, self.truncated)

    def _draw(self, rows: np.ndarray) -> None:
        """A new frame for `rows` (a mask): their streams advance once."""
        streams = self.rng[rows]
        words = draw(streams)
        self.rng[rows] = streams
        side = (words & np.uint64(1)).astype(np.int64)
        self.side[rows] = side
        self.row[rows] = ((words >> np.uint64(1)) % np.uint64(8)).astype(np.int64)
        self.col[rows] = side * 4 + ((words >> np.uint64(4)) % np.uint64(4)).astype(np.int64)
        index = np.flatnonzero(rows)
        self.obs[index] = 0
        self.obs[index, 0, self.row[index], self.col[index]] = 255
        clock = np.minimum(self.step_count[index] * 15, 255).astype(np.uint8)
        self.obs[index, 1] = clock[:, None, None]

    def drain_episode_stats(self) -> EpisodeStats:
        return self.episodes.drain()

    def recent_returns(self, count: int) -> np.ndarray:
        return self.episodes.recent_returns(count)

    def state_dict(self) -> dict[str, Any]:
        arrays = {
            "rng": self.rng,
            "side": self.side,
            "row": self.row,
            "col": self.col,
            "step_count": self.step_count,
            "obs": self.obs,
        }
        arrays.update(
            {f"episodes.{name}": value for name, value in self.episodes.state_dict().items()}
        )
        return arrays

    def load_state_dict(self, state: dict[str, Any]) -> None:
        load_arrays(self.state_dict(), state, "Frames-v0")
        self._seeded = True

    def close(self) -> None:
        pass


class TinyCNN(HeadsPolicy):
    """One 3x3 convolution and a hidden layer; reads uint8 frames, scaled to [0, 1] on the
    fly (no float copy of the rollout is kept)."""

    def __init__(self, obs_spec: ObsSpec, num_actions: int, hidden: int = 32):
        super().__init__()
        channels, height, width = obs_spec.shape
        self.num_actions = num_actions
        self.conv = nn.Conv2d(channels, 8, 3)
        self.hidden = nn.Linear(8 * (height - 2) * (width - 2), hidden)
        self.actor = nn.Linear(hidden, num_actions)
        self.critic = nn.Linear(hidden, 1)

    def heads(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.relu(self.conv(obs.float() / 255.0))
        x = torch.relu(self.hidden(x.flatten(1)))
        return self.actor(x), self.critic(x).squeeze(-1)


def _reads_frames(obs_spec: ObsSpec, act_spec: ActSpec) -> bool:
    return obs_spec.dtype == np.uint8 and len(obs_spec.shape) == 3 and act_spec.discrete


register_family("Frames-v0", lambda num_envs, copy=True, **kwargs: FramesEnv(num_envs, **kwargs))
register_policy(
    "tiny-cnn",
    _reads_frames,
    lambda config, obs_spec, act_spec: TinyCNN(obs_spec, act_spec.num_actions),
)

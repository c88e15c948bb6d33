"""A Gymnasium env for tests/test_distributed.py: CartPole whose rewards turn NaN after 40
steps in the process of torchrun rank 1 only (env id "nan_env:NanOnRankOne-v0")."""

from __future__ import annotations

import os

import gymnasium
from gymnasium.envs.classic_control import CartPoleEnv


class NanOnRankOne(CartPoleEnv):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.steps = 0
        self.poisoned = os.environ.get("RANK") == "1"

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        self.steps += 1
        if self.poisoned and self.steps > 40:
            reward = float("nan")
        return obs, reward, terminated, truncated, info


gymnasium.register("NanOnRankOne-v0", entry_point=NanOnRankOne, max_episode_steps=500)

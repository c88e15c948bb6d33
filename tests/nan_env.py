"""Gymnasium envs whose rewards turn NaN after 40 steps: for tests/test_distributed.py in the
process of torchrun rank 1 only (env id "nan_env:NanOnRankOne-v0"), and in every process
("nan_env:NanAfter40-v0")."""

from __future__ import annotations

import os

import gymnasium
from gymnasium.envs.classic_control import CartPoleEnv


class NanOnRankOne(CartPoleEnv):
    always = False
    """Poisoned in every process, not only rank 1's."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.steps = 0
        self.poisoned = os.environ.get("RANK") == "1" or self.always

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        self.steps += 1
        if self.poisoned and self.steps > 40:
            reward = float("nan")
        return obs, reward, terminated, truncated, info


gymnasium.register("NanOnRankOne-v0", entry_point=NanOnRankOne, max_episode_steps=500)


class NanAfter40(NanOnRankOne):
    always = True


gymnasium.register("NanAfter40-v0", entry_point=NanAfter40, max_episode_steps=500)

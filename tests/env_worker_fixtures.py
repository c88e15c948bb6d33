"""Gymnasium envs for the env-worker tests, registered when this module is imported (as a
worker imports it for the id "env_worker_fixtures:CrashingCartPole-v0")."""

from __future__ import annotations

import gymnasium
from gymnasium.envs.classic_control import CartPoleEnv


class CrashingCartPole(CartPoleEnv):
    """CartPole whose `crash_at`-th step raises ValueError (a bug in a user's env) when it
    was reset with seed `crash_seed`: in a batch reset with seed 0, env `crash_seed`."""

    def __init__(self, crash_at: int = 5, crash_seed: int = 2, **kwargs):
        super().__init__(**kwargs)
        self.crash_at = crash_at
        self.crash_seed = crash_seed
        self.crashes = False
        self.steps = 0

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self.crashes = seed == self.crash_seed
        return super().reset(seed=seed, options=options)

    def step(self, action):
        self.steps += 1
        if self.crashes and self.steps == self.crash_at:
            raise ValueError(f"boom at step {self.steps}")
        return super().step(action)


gymnasium.register(
    "CrashingCartPole-v0", entry_point=f"{__name__}:CrashingCartPole", max_episode_steps=500
)

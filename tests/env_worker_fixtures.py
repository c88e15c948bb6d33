"""Gymnasium envs for the env-worker tests, registered when this module is imported (as a
worker imports it for the id "env_worker_fixtures:CrashingCartPole-v0")."""

from __future__ import annotations

import gymnasium
import numpy as np
from gymnasium import spaces
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
        if seed is not None:  # crash_seed -1: every env crashes
            self.crashes = seed == self.crash_seed or self.crash_seed == -1
        return super().reset(seed=seed, options=options)

    def step(self, action):
        self.steps += 1
        if self.crashes and self.steps == self.crash_at:
            raise ValueError(f"boom at step {self.steps}")
        return super().step(action)


gymnasium.register(
    "CrashingCartPole-v0", entry_point=f"{__name__}:CrashingCartPole", max_episode_steps=500
)
gymnasium.register(  # every env raises at its 5th step: all workers fail at once
    "AllCrashingCartPole-v0",
    entry_point=f"{__name__}:CrashingCartPole",
    max_episode_steps=500,
    kwargs={"crash_seed": -1},
)


class TwoKnobs(gymnasium.Env):
    """An env that acts in MultiDiscrete([2, 3]), which no Operant policy acts in."""

    observation_space = spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = spaces.MultiDiscrete([2, 3])

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(3, np.float32), {}

    def step(self, action):
        return np.zeros(3, np.float32), 0.0, False, False, {}


gymnasium.register("TwoKnobs-v0", entry_point=f"{__name__}:TwoKnobs", max_episode_steps=50)
# CartPole under this module's name with Gymnasium's threshold: "solved" as for CartPole-v1
gymnasium.register(
    "ThresholdCartPole-v0",
    entry_point="gymnasium.envs.classic_control.cartpole:CartPoleEnv",
    max_episode_steps=500,
    reward_threshold=475.0,
)


class RewardAsArray(CartPoleEnv):
    """CartPole whose reward is an array of one number, a common slip in a user's env."""

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, np.array([reward]), terminated, truncated, info


class ObsTooLong(CartPoleEnv):
    """CartPole whose observation carries a fifth number its space does not declare."""

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return np.append(obs, 0.0), reward, terminated, truncated, info


gymnasium.register("RewardAsArray-v0", entry_point=f"{__name__}:RewardAsArray")
gymnasium.register("ObsTooLong-v0", entry_point=f"{__name__}:ObsTooLong")


class UnbuildableCartPole(CartPoleEnv):
    """A user's env that cannot be built (a missing asset)."""

    def __init__(self, **kwargs):
        raise FileNotFoundError("missing ROM file /nope.bin")


class UnreachableCartPole(CartPoleEnv):
    """A user's env whose reset fails (a simulator that cannot be reached)."""

    def reset(self, *, seed=None, options=None):
        raise ConnectionError("cannot connect to the simulator")


gymnasium.register("UnbuildableCartPole-v0", entry_point=f"{__name__}:UnbuildableCartPole")
gymnasium.register("UnreachableCartPole-v0", entry_point=f"{__name__}:UnreachableCartPole")
gymnasium.register(
    "LateCrashingCartPole-v0",
    entry_point=f"{__name__}:CrashingCartPole",
    max_episode_steps=500,
    kwargs={"crash_at": 100},
)


class SlowToBuildCartPole(CartPoleEnv):
    """CartPole whose construction takes 3 s (a simulator starting), after touching the file
    $SLOW_BUILD_MARK so a test knows it has begun."""

    def __init__(self, **kwargs):
        import os
        import time
        from pathlib import Path

        Path(os.environ["SLOW_BUILD_MARK"]).touch()
        time.sleep(3)
        super().__init__(**kwargs)


gymnasium.register("SlowToBuildCartPole-v0", entry_point=f"{__name__}:SlowToBuildCartPole")


class HangingCartPole(CartPoleEnv):
    """CartPole whose 5th step never returns (a simulator that hangs) in the env reset with
    seed 2 (env 2 of a batch reset with seed 0)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.hangs = False
        self.steps = 0

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self.hangs = seed == 2
        return super().reset(seed=seed, options=options)

    def step(self, action):
        import time

        self.steps += 1
        if self.hangs and self.steps == 5:
            time.sleep(3600)
        return super().step(action)


gymnasium.register(
    "HangingCartPole-v0", entry_point=f"{__name__}:HangingCartPole", max_episode_steps=500
)

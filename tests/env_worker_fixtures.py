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
    """CartPole whose `hang_at`-th step (default the 5th) never returns (a simulator that
    hangs) in the env reset with seed 2 (env 2 of a batch reset with seed 0); `stubborn`: in
    a loop that catches every Exception. Each hang touches $HANG_MARK first, where it is set."""

    def __init__(self, hang_at: int = 5, stubborn: bool = False, hang_in: str = "step", **kwargs):
        super().__init__(**kwargs)
        self.hang_at = hang_at
        self.stubborn = stubborn
        self.hang_in = hang_in
        if hang_in == "init":
            _hang()
        self.hangs = False
        self.steps = 0

    def reset(self, *, seed=None, options=None):
        if self.hang_in == "reset":
            _hang()
        if seed is not None:
            self.hangs = seed == 2
        return super().reset(seed=seed, options=options)

    def step(self, action):
        import time

        self.steps += 1
        if self.hangs and self.steps == self.hang_at:
            _hang_begins()
            if self.hang_in == "c":  # in C code that holds the GIL: no handler runs
                sum(range(10**15))
            while self.hang_in == "unkillable":  # swallows even BaseException
                try:
                    time.sleep(0.05)
                except BaseException:
                    pass
            while self.stubborn:  # a retry loop that swallows every Exception
                try:
                    time.sleep(0.05)
                except Exception:
                    pass
            time.sleep(3600)
        return super().step(action)


gymnasium.register(
    "HangingCartPole-v0", entry_point=f"{__name__}:HangingCartPole", max_episode_steps=500
)


def _hang_begins() -> None:
    """Touches $HANG_MARK, where a test set it: the hang begins now (the test need not sleep
    for as long as a loaded machine's imports might take)."""
    import os
    from pathlib import Path

    if "HANG_MARK" in os.environ:
        Path(os.environ["HANG_MARK"]).touch()


def _hang() -> None:
    import time

    _hang_begins()
    time.sleep(3600)


gymnasium.register(  # every env hangs as it is built, or in every reset
    "HangAtInitCartPole-v0", entry_point=f"{__name__}:HangingCartPole", kwargs={"hang_in": "init"}
)
gymnasium.register(
    "HangAtResetCartPole-v0", entry_point=f"{__name__}:HangingCartPole", kwargs={"hang_in": "reset"}
)
gymnasium.register(
    "CHangCartPole-v0", entry_point=f"{__name__}:HangingCartPole", kwargs={"hang_in": "c"}
)
gymnasium.register(
    "UnkillableCartPole-v0",
    entry_point=f"{__name__}:HangingCartPole",
    kwargs={"hang_in": "unkillable"},
)
gymnasium.register(
    "StubbornCartPole-v0",
    entry_point=f"{__name__}:HangingCartPole",
    max_episode_steps=500,
    kwargs={"stubborn": True},
)
gymnasium.register(  # 32 steps per env and update: hangs in the 4th update, after 3 records
    "LateHangingCartPole-v0",
    entry_point=f"{__name__}:HangingCartPole",
    max_episode_steps=500,
    kwargs={"hang_at": 100},
)


class Dot(gymnasium.Env):
    """A byte image, channels last (8, 9, 3) as Gymnasium's image envs are (or channels first
    with `layout="chw"`): a dot falls one row a step from a random column, moved left, not or
    right by the action (0, 1, 2); reward 1 when it lands in column 4. Any column is 4 steps or
    fewer from it and a fall takes 7: every episode can be won. Its three channels hold 255,
    128 and 1 where the dot is."""

    def __init__(self, layout: str = "hwc"):
        shape = (8, 9, 3) if layout == "hwc" else (3, 8, 9)
        self.observation_space = spaces.Box(0, 255, shape, np.uint8)
        self.action_space = spaces.Discrete(3)
        self.layout = layout
        self.x = self.y = 0

    def _obs(self) -> np.ndarray:
        frame = np.zeros((8, 9, 3), np.uint8)
        frame[self.y, self.x] = (255, 128, 1)
        return frame if self.layout == "hwc" else frame.transpose(2, 0, 1).copy()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.x, self.y = int(self.np_random.integers(9)), 0
        return self._obs(), {}

    def step(self, action):
        self.x = min(8, max(0, self.x + int(action) - 1))
        self.y += 1
        landed = self.y == 7
        return self._obs(), float(landed and self.x == 4), landed, False, {}


gymnasium.register("Dot-v0", entry_point=f"{__name__}:Dot")
gymnasium.register("DotCHW-v0", entry_point=f"{__name__}:Dot", kwargs={"layout": "chw"})


class Cells(Dot):
    """Dot's frames as cells of 0 and 1 (MinAtar's kind): the monitor can draw them."""

    def __init__(self):
        super().__init__()
        self.observation_space = spaces.Box(0, 1, (8, 9, 3), np.uint8)

    def _obs(self) -> np.ndarray:
        return (super()._obs() > 0).astype(np.uint8)


gymnasium.register("Cells-v0", entry_point=f"{__name__}:Cells")


class Side(gymnasium.Env):
    """Atari-sized frames, 84 x 84 x 1 grayscale: a bright square on the left or the right;
    the action that names its side pays 1 (the side is drawn again every step); 20 steps."""

    observation_space = spaces.Box(0, 255, (84, 84, 1), np.uint8)
    action_space = spaces.Discrete(2)

    def _obs(self) -> np.ndarray:
        frame = np.zeros((84, 84, 1), np.uint8)
        x = 8 if self.side == 0 else 60
        frame[30:46, x : x + 16] = 255
        return frame

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.side = 0, int(self.np_random.integers(2))
        return self._obs(), {}

    def step(self, action):
        reward = float(int(action) == self.side)
        self.t += 1
        self.side = int(self.np_random.integers(2))
        return self._obs(), reward, False, self.t >= 20, {}


gymnasium.register("Side84-v0", entry_point=f"{__name__}:Side")


class HeavyCartPole(CartPoleEnv):
    """CartPole that holds `megabytes` of its own (touched, so resident): a Python env with
    an emulator's or a simulator's memory (an Atari env takes about 2 MB)."""

    def __init__(self, megabytes: int = 8, **kwargs):
        super().__init__(**kwargs)
        self.ballast = np.ones(megabytes << 20, np.uint8)


gymnasium.register(
    "HeavyCartPole-v0", entry_point=f"{__name__}:HeavyCartPole", max_episode_steps=500
)


class LazyHeavyCartPole(CartPoleEnv):
    """CartPole that takes its `megabytes` on its first step (a renderer or buffer made
    lazily), none before."""

    def __init__(self, megabytes: int = 8, **kwargs):
        super().__init__(**kwargs)
        self.megabytes = megabytes
        self.ballast = None

    def step(self, action):
        if self.ballast is None:
            self.ballast = np.ones(self.megabytes << 20, np.uint8)
        return super().step(action)


gymnasium.register(
    "LazyHeavyCartPole-v0", entry_point=f"{__name__}:LazyHeavyCartPole", max_episode_steps=500
)

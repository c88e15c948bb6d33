"""The `minatar` package behind the MinAtar family's contract: `impl = "reference"` of
`operant/MinAtar-<Game>-v1` (operant.envs.minatar.vector), the oracle the kernel is checked against
(operant.envs.minatar.parity). It needs the optional extra: `pip install "operant-rl[minatar]"`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode

from operant.envs.face.episodes import AccountedPythonEnv, EpisodeAccounting
from operant.envs.face.seeding import check_seed, seed_np_random
from operant.envs.minatar.options import Settings
from operant.envs.minatar.vector import RECENT_CAPACITY, _MinAtarFace
from operant.envs.native.vector import step_outputs
from operant.envs.registry import EnvError, InvalidActionError, invalid_action_message


def minatar_environment_class() -> Any:
    """`minatar.Environment`, or EnvError saying which extra installs it.

    The package's import calls `logging.warning("Cannot import matplotlib and/or seaborn...")`
    where seaborn is missing (only its own display needs it; the `minatar` extra does not
    install it): a line on every run's stderr, and `logging.warning` on a root logger without
    handlers configures one for the whole process. The import runs with that warning dropped
    and with no handler configured behind the caller's back."""
    import logging

    root = logging.getLogger()
    added = [] if root.handlers else [logging.NullHandler()]
    for handler in added:
        root.addHandler(handler)
    root.addFilter(_drop_display_warning)
    try:
        from minatar import Environment
    except ImportError:
        raise EnvError(
            'env.impl = "reference" for MinAtar games runs the minatar package, which is not '
            'installed: pip install "operant-rl[minatar]"'
        ) from None
    finally:
        root.removeFilter(_drop_display_warning)
        for handler in added:
            root.removeHandler(handler)
    return Environment


def _drop_display_warning(record: Any) -> bool:
    return not str(record.msg).startswith("Cannot import ")


class ReferenceMinAtarEnv(AccountedPythonEnv, _MinAtarFace):
    """The `minatar` package behind the same buffers: one `minatar.Environment` per env,
    stepped in a Python loop (its real usage), SAME_STEP autoreset, statistics in numpy."""

    impl = "reference"
    resumable = False  # MinAtar's games keep Python state: a resume re-seeds them

    def __init__(self, game: str, num_envs: int, copy: bool = True, **settings: Any):
        """`settings`: operant.envs.minatar.options.Settings' keywords, as the native env's."""
        environment = minatar_environment_class()
        options = Settings(**settings)
        self.max_episode_steps = self._declare(game, num_envs, copy, options)
        num_envs = self.num_envs
        self.envs = [
            environment(
                game,
                sticky_action_prob=float(options.sticky_action_prob),
                difficulty_ramping=bool(options.difficulty_ramping),
            )
            for _ in range(num_envs)
        ]
        self.episodes = EpisodeAccounting(self.layout, RECENT_CAPACITY)
        self._lengths = np.zeros(num_envs, np.int64)
        self._resetting = np.zeros(num_envs, np.bool_)
        """NEXT_STEP: the envs whose next step is a reset (their action ignored)."""

    def _observe(self, i: int, out: np.ndarray) -> None:
        out[i] = self.envs[i].state().transpose(2, 0, 1)

    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ):
        """Gymnasium's rule: env i is seeded with seed + i (an int) or seed[i] (a list)."""
        seed = check_seed(seed, self.num_envs)
        seed_np_random(self, seed)
        for i, env in enumerate(self.envs):
            env_seed = seed + i if isinstance(seed, int) else seed[i] if seed else None
            if env_seed is not None:
                env.seed(env_seed % 2**32)
                env.last_action = 0  # as a new env's (operant.envs.minatar.vector's reset)
            env.reset()
            self._observe(i, self.obs)
        self._lengths[:] = 0
        self._resetting[:] = False
        self.episodes.reset_episodes()
        return self._showing(((self.obs.copy() if self.copy else self.obs), {}))

    def step(self, actions: Any) -> tuple[Any, ...]:
        if self.autoreset_mode == AutoresetMode.SAME_STEP:
            return super().step(actions)
        self._load_actions(actions)
        self.step_bound()
        return self._showing(step_outputs(self, {}))

    def step_bound(self) -> None:
        actions = self.actions
        bad = np.flatnonzero((actions < 0) | (actions >= len(self.action_set)))
        if len(bad):
            raise InvalidActionError(
                invalid_action_message(self.single_action_space, int(bad[0]), int(actions[bad[0]]))
            )
        next_step = self.autoreset_mode == AutoresetMode.NEXT_STEP
        resetting = self._resetting.copy()
        self._lengths += 1
        for i, env in enumerate(self.envs):
            if resetting[i]:  # NEXT_STEP: this step resets env i, its action ignored
                env.reset()
                self._observe(i, self.obs)
                self.rewards[i] = 0.0
                self.terminated[i] = self.truncated[i] = self._resetting[i] = False
                self._lengths[i] = 0
                continue
            reward, terminal = env.act(self.action_set[actions[i]])
            self.rewards[i] = reward
            self.terminated[i] = terminal
            self.truncated[i] = self._lengths[i] >= self.max_episode_steps
            self._observe(i, self.obs)
            if terminal or self.truncated[i]:
                self.final_obs[i] = self.obs[i]
                if next_step:
                    self._resetting[i] = True
                    continue
                env.reset()
                self._observe(i, self.obs)
                self._lengths[i] = 0
        self.episodes.record(self.rewards, self.terminated, self.truncated, counted=~resetting)

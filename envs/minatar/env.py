"""One MinAtar game as a Gymnasium `Env`: what `gymnasium.make("operant/MinAtar-<Game>-v1")`
returns, for code written against single envs (Gymnasium's wrappers, `check_env`, the `sync`
and `async` vector modes, a loop that calls `step` one action at a time).

It is the vector env (operant.envs.minatar.vector) with one row: the same kernel (or, with
`impl="reference"`, the `minatar` package itself), the same options (`sticky_action_prob`,
`difficulty_ramping`, `full_action_set`), the same uint8 (C, 10, 10) observations. What
differs is Gymnasium's single-env contract: `step` returns the terminal observation on the
step that ends an episode (the vector env's `final_obs` row; the vector env has already begun
the next episode in its buffer) and the caller calls `reset()` next, which starts a new
episode (`reset(seed=s)` from env 0's stream of seed s, as `make_env(id, 1).reset(seed=s)`).
An episode's trajectory is the vector env's with N = 1, step for step
(tests/test_minatar_gym.py). As in MinAtar, the previous action that sticky actions repeat
survives `reset()`.

`render_mode="rgb_array"` returns the last observation as MinAtar's own display draws it
(each square in the colour of the highest-numbered channel set there, black where none is;
MinAtar's cubehelix palette, operant.shared.frame), uint8 (10 s, 10 s, 3) for `render_scale`
s (1 by default: MinAtar's own 10 x 10); `"ansi"` returns it as text, one character per square
(`operant monitor --once`'s frame). The vector env is for training at speed: a Python call per
step costs far more than the kernel's step.
"""

from __future__ import annotations

import functools
from typing import Any

import gymnasium
import numpy as np

from operant.envs.contract import NotCopyable
from operant.envs.face.render import repeat_pixels
from operant.envs.minatar.options import check_render_scale
from operant.envs.minatar.vector import GAME_IDS
from operant.envs.native.vector import load_actions
from operant.envs.registry import EnvError, InvalidActionError, invalid_action_message, make_env
from operant.shared.frame import cells, frame_palette, text_rows

RENDER_MODES = ("rgb_array", "ansi")


class MinAtarEnv(NotCopyable, gymnasium.Env):
    """One env of the MinAtar game `env_id` (a key of operant.envs.minatar.vector.GAME_IDS)."""

    metadata = {"render_modes": list(RENDER_MODES), "render_fps": 30}

    def __init__(
        self,
        env_id: str = "MinAtar-Breakout-v1",
        *,
        impl: str = "native",
        render_mode: str | None = None,
        render_scale: int = 1,
        **options: Any,
    ):
        if env_id not in GAME_IDS:
            raise EnvError(
                f"unknown MinAtar game {env_id!r}; choose one of {', '.join(sorted(GAME_IDS))}"
            )
        if render_mode is not None and render_mode not in RENDER_MODES:
            raise EnvError(
                f"render_mode {render_mode!r} is not one of {env_id}'s: "
                f"{', '.join(RENDER_MODES)} (or None)"
            )
        check_render_scale(render_scale)
        self._vec = make_env(env_id, 1, impl=impl, copy=False, **options)
        self.env_id = env_id
        self.game: str = self._vec.game
        self.channels: tuple[str, ...] = self._vec.channels
        self.observation_space = self._vec.single_observation_space
        self.action_space = self._vec.single_action_space
        self.render_mode = render_mode
        self.render_scale = render_scale
        self._shape = (len(self.channels), 10, 10)
        self._num_actions = len(self._vec.action_set)
        self._ended = False

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        obs, _ = self._vec.reset(seed=seed, options=options)
        self._ended = False
        return obs[0].copy(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        # Straight into the vector env's action buffer and its kernel's step: its generic step()
        # (batch checks, info dict, outputs) cost 3x the minatar package's own step here. An
        # action that is not a plain integer goes through the vector env's checks, and the
        # kernel refuses one out of range: one line either way (InvalidActionError).
        vec = self._vec
        if self._ended:
            # as Gymnasium's classic-control envs say it (they too play on, undefined)
            gymnasium.logger.warn(
                "You are calling 'step()' even though this environment has already returned "
                "terminated = True or truncated = True. You should always call 'reset()' once "
                "you receive it: this MinAtar env plays on into its next episode."
            )
        if type(action) is int or isinstance(action, np.integer):
            if not 0 <= action < self._num_actions:
                raise InvalidActionError(invalid_action_message(self.action_space, 0, int(action)))
            vec.actions[0] = action
        else:
            load_actions(vec, np.reshape(np.asarray(action), 1))
        vec.step_bound()
        terminated, truncated = bool(vec.terminated[0]), bool(vec.truncated[0])
        self._ended = terminated or truncated
        return self._shown().copy(), float(vec.rewards[0]), terminated, truncated, {}

    def _shown(self) -> np.ndarray:
        """The observation the last reset or step returned: on the step that ended an episode
        the terminal one (the vector env's final_obs row; its obs row began the next)."""
        return self._vec.final_obs[0] if self._ended else self._vec.obs[0]

    def render(self) -> np.ndarray | str | None:
        if self.render_mode == "rgb_array":
            return rgb_frame(self._shown(), self.render_scale)
        if self.render_mode == "ansi":
            return "\n".join(text_rows(cells(self._shown().tobytes(), self._shape))) + "\n"
        gymnasium.logger.warn(  # as Gymnasium's own envs say it
            "You are calling render method without specifying any render mode. You can "
            f'specify the render_mode at initialization, e.g. gymnasium.make("operant/'
            f'{self.env_id}", render_mode="rgb_array")'
        )
        return None

    def close(self) -> None:
        self._vec.close()
        super().close()


def rgb_frame(frame: np.ndarray, scale: int = 1) -> np.ndarray:
    """A (C, H, W) frame as MinAtar's display draws it: uint8 (H scale, W scale, 3), each square
    in its highest-numbered set channel's colour (black where none is set)."""
    channels = frame.shape[0]
    weights = np.arange(1, channels + 1, dtype=np.int64).reshape(-1, 1, 1)
    image = _colors(channels)[(frame.astype(bool) * weights).max(axis=0)]
    return repeat_pixels(image, scale)


@functools.cache
def _colors(channels: int) -> np.ndarray:
    """(channels + 1, 3) uint8: black, then MinAtar's colour of each channel (one table per
    channel count, made once: a video draws thousands of frames)."""
    table = np.zeros((channels + 1, 3), np.uint8)
    for index, color in enumerate(frame_palette(channels)):
        table[index + 1] = [int(color[k : k + 2], 16) for k in (1, 3, 5)]
    table.flags.writeable = False
    return table

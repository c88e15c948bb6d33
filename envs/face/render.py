"""`render_mode="rgb_array"` and `"human"` for Operant's own envs (native, overlap, torch),
drawn by Gymnasium's own renderer so that a frame is pixel for pixel Gymnasium's.

`Renderer` keeps one Gymnasium env (unwrapped, made with the same render mode) per rendering
vector env, and draws env i by injecting env i's state into it (as the parity tests do) and
calling its `render()`. Pendulum also draws its last torque: the renderer sets `last_u` as
Gymnasium's `step()` does (the action clipped to the torque bound), or None where env i has not
acted since its episode began (Gymnasium's `reset()` clears it).

What `render()` returns is what Gymnasium's vector envs return:
- "rgb_array": a list of one `(H, W, 3)` uint8 frame per env (Gymnasium's vector
  `RecordVideo` and `HumanRendering` wrappers take it as it is). Rendering every env costs
  one Gymnasium draw each; make the env you render small (`operant eval --video` uses one).
- "human": env 0 drawn in one pygame window after every `reset()` and `step()`, at the env's
  `render_fps` (Gymnasium's own vector envs open one window per env); `render()` returns None.
  It needs a display: with none (on Linux: DISPLAY and WAYLAND_DISPLAY unset, no
  SDL_VIDEODRIVER chosen) making the env fails with one line saying so.

Both need pygame, which Gymnasium's `classic-control` extra installs, and so does Operant's
`render` extra (`pip install "operant-rl[render]"`); without it making the env fails with one
line naming that extra. A NEXT_STEP env that just ended shows its terminal observation, and
is drawn from it (`state_from_obs`), as Gymnasium draws its envs' terminal states.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
from gymnasium.vector import VectorEnv

from operant.envs.contract import to_host
from operant.envs.registry import EnvError

RENDER_MODES = ("rgb_array", "human")


def _angles(obs: np.ndarray) -> np.ndarray:
    """Acrobot's (theta1, theta2, dtheta1, dtheta2) from (cos1, sin1, cos2, sin2, d1, d2)."""
    return np.array(
        [np.arctan2(obs[1], obs[0]), np.arctan2(obs[3], obs[2]), obs[4], obs[5]], dtype=np.float64
    )


STATE_FROM_OBS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "CartPole-v1": lambda obs: np.asarray(obs, dtype=np.float64),
    "MountainCar-v0": lambda obs: np.asarray(obs, dtype=np.float64),
    "MountainCarContinuous-v0": lambda obs: np.asarray(obs, dtype=np.float64),
    "Pendulum-v1": lambda obs: np.array([np.arctan2(obs[1], obs[0]), obs[2]], dtype=np.float64),
    "Acrobot-v1": _angles,
}
"""The state a Gymnasium env draws, from one of its observations (float32 precision)."""


class RendererMissingError(EnvError):
    """Gymnasium's renderer (pygame) is not installed: the extra to install, in one line."""


def check_render_mode(render_mode: str | None) -> None:
    """Refuse, in one line, a render mode Operant's envs cannot draw here: an unknown one,
    any without pygame, and "human" without a display."""
    if render_mode is None:
        return
    if render_mode not in RENDER_MODES:
        raise EnvError(
            f"render_mode must be one of {', '.join(RENDER_MODES)} or None, got {render_mode!r}"
        )
    try:
        import pygame  # noqa: F401
    except ImportError:
        raise RendererMissingError(
            f'render_mode="{render_mode}" draws with Gymnasium\'s renderer, which '
            'needs pygame: pip install "operant-rl[render]"'
        ) from None
    if render_mode == "human" and not _has_display():
        raise EnvError(
            'render_mode="human" needs a display, and there is none here (DISPLAY '
            'and WAYLAND_DISPLAY are unset); use render_mode="rgb_array", or '
            "operant eval RUN --video out.mp4"
        )


def _has_display() -> bool:
    """Whether SDL can open a window here (or was told which driver to use)."""
    return not sys.platform.startswith("linux") or any(
        os.environ.get(name) for name in ("DISPLAY", "WAYLAND_DISPLAY", "SDL_VIDEODRIVER")
    )


def init_headless_display() -> None:
    """With no display, start pygame's display on SDL's "dummy" driver before Gymnasium starts
    it: SDL's own fallback works too, but prints "error: XDG_RUNTIME_DIR is invalid" to stderr
    on a server, which reads like a failure. Frames are software surfaces either way."""
    import pygame

    if pygame.display.get_init() or _has_display():
        return
    os.environ["SDL_VIDEODRIVER"] = "dummy"
    try:
        pygame.display.init()
    finally:
        del os.environ["SDL_VIDEODRIVER"]


class Renderer:
    """Draws states of env `env_id` with one Gymnasium env of the same id and render mode."""

    def __init__(self, env_id: str, render_mode: str):
        import gymnasium

        check_render_mode(render_mode)
        self.env_id = env_id
        self.render_mode = render_mode
        # Any: a classic-control env of the id's own class, whose `state` (and Pendulum's
        # `last_u`, `max_torque`) the draws set and read, which gymnasium.Env does not declare
        self.gym_env: Any = gymnasium.make(env_id, render_mode=render_mode).unwrapped
        self.gym_env.reset(seed=0)
        if render_mode == "rgb_array":
            init_headless_display()
        self.metadata = dict(self.gym_env.metadata)

    def draw(self, state: np.ndarray, last_action: np.ndarray | None = None) -> Any:
        """Gymnasium's `render()` of its env in `state` (float64, the env's own state layout)
        having last taken `last_action` (None: no action since its reset)."""
        gym_env = self.gym_env
        gym_env.state = np.array(state, dtype=np.float64)
        if hasattr(gym_env, "last_u"):
            gym_env.last_u = (
                None
                if last_action is None
                else np.clip(last_action, -gym_env.max_torque, gym_env.max_torque)[0]
            )
        return gym_env.render()

    def close(self) -> None:
        self.gym_env.close()


class RenderFace(VectorEnv):
    """The render part of a family's Gymnasium face. A family calls `_init_render` in its
    constructor, `_rendered_step` after `step()` and `_rendered_reset` after `reset()`, and
    provides `_render_states()`: (state_dim, N) float64 on the host."""

    render_mode: str | None
    _renderer: Renderer | None
    actions: Any
    """The family's action buffer (a numpy array, or a torch env's tensor): what each env
    last did, which Pendulum's frame draws."""

    def _init_render(self, env_id: str, render_mode: str | None) -> None:
        self.render_mode = render_mode
        self._renderer = None if render_mode is None else Renderer(env_id, render_mode)
        if self._renderer is not None:
            self.metadata = {
                **self.metadata,
                "render_modes": list(RENDER_MODES),
                "render_fps": self._renderer.metadata["render_fps"],
            }
        self._acted = np.zeros(self.num_envs, dtype=np.bool_)
        self._terminal = np.zeros(self.num_envs, dtype=np.bool_)
        self._terminal_obs: np.ndarray | None = None

    def _render_states(self) -> np.ndarray:
        raise NotImplementedError

    def _rendered_reset(self) -> None:
        if self._renderer is None:
            return
        self._acted[:] = False
        self._terminal[:] = False
        if self.render_mode == "human":
            self.render()

    def _rendered_step(self, acted: Any, terminal: Any, shown_obs: Any) -> None:
        """After a step: `acted`, the envs that moved this step and did not reset since;
        `terminal`, the envs showing their terminal observation (`shown_obs`)."""
        if self._renderer is None:
            return
        self._acted[:] = to_host(acted)
        self._terminal[:] = to_host(terminal)
        self._terminal_obs = to_host(shown_obs) if self._terminal.any() else None
        if self.render_mode == "human":
            self.render()

    # A list, as documented (docs/envs.md) and as Gymnasium's vector wrappers take it, where
    # VectorEnv's annotation says a tuple.
    def render(self) -> list[np.ndarray] | None:  # type: ignore[override]
        """One frame per env ("rgb_array"), or env 0 drawn in its window ("human")."""
        if self._renderer is None:
            import gymnasium

            gymnasium.logger.warn(
                "You are calling render method without specifying any render "
                'mode: make the env with render_mode="rgb_array"'
            )
            return None
        states = self._render_states()
        actions = to_host(self.actions).reshape(self.num_envs, -1)
        count = 1 if self.render_mode == "human" else self.num_envs
        frames = []
        for i in range(count):
            state = states[:, i]
            if self._terminal[i] and self._terminal_obs is not None:
                state = STATE_FROM_OBS[self._renderer.env_id](self._terminal_obs[i])
            frames.append(self._renderer.draw(state, actions[i] if self._acted[i] else None))
        return None if self.render_mode == "human" else frames

    def _close_render(self) -> None:
        if self._renderer is not None:
            self._renderer.close()


def repeat_pixels(image: np.ndarray, factor: int) -> np.ndarray:
    """`image` (H, W, ...) with each pixel repeated factor x factor times (nearest neighbour:
    MinAtar's 10 x 10 frames made visible)."""
    if factor == 1:
        return image
    return np.repeat(np.repeat(image, factor, axis=0), factor, axis=1)

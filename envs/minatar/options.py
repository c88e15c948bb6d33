"""MinAtar's options, what a MinAtar vector env takes besides its game and size (Settings:
MinAtar's own, the autoreset mode, the frames' rendering), and their checks: a bad one is a
ValueError (an EnvError for render_scale) naming it, before a kernel is made."""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode

from operant.envs.contract import positive_count, time_limit
from operant.envs.registry import EnvError

OPTIONS = ("sticky_action_prob", "difficulty_ramping", "max_episode_steps", "full_action_set")
"""The games' options (`env.options` in a config, keywords of make_env)."""
RENDERING = ("render_mode", "render_scale")
"""make_env's keywords for `render()`'s frames (not a training config's)."""


def check_render_scale(scale: Any) -> int:
    """`render_scale` as a frame's pixels a side per grid square: a positive integer."""
    if isinstance(scale, bool) or not isinstance(scale, int) or scale < 1:
        raise EnvError(f"render_scale must be a positive integer, got {scale!r}")
    return scale


NO_TIME_LIMIT = 2**31 - 1
MA_LAST_ACTION = 0
"""Every game's scalar 0: the last effective action, repeated by a sticky draw."""


def check_options(
    num_envs: int,
    sticky_action_prob: float,
    max_episode_steps: int | None,
    **switches: Any,
) -> int:
    """The checked time limit (NO_TIME_LIMIT for None); ValueError naming a bad option.
    `switches` (difficulty_ramping, full_action_set) must be true or false: a string "false"
    was truthy, and switched ramping on or the full action set in."""
    positive_count("num_envs", num_envs)
    real = isinstance(sticky_action_prob, numbers.Real) and not isinstance(sticky_action_prob, bool)
    if not real or not 0.0 <= float(sticky_action_prob) <= 1.0:
        raise ValueError(f"sticky_action_prob must be in [0, 1], got {sticky_action_prob!r}")
    for name, value in switches.items():
        if not isinstance(value, (bool, np.bool_)):
            raise ValueError(f"{name} must be true or false, got {value!r}")
    limit = time_limit(max_episode_steps, NO_TIME_LIMIT)
    if limit is None or limit > NO_TIME_LIMIT:
        raise ValueError(
            f"max_episode_steps must be a positive integer or None, got {max_episode_steps!r}"
        )
    return limit


@dataclass(frozen=True)
class Settings:
    """A MinAtar vector env's keywords (make_env's, or a config's env.options), both
    implementations': MinAtar's options, the autoreset mode and the frames' rendering."""

    sticky_action_prob: float = 0.1
    difficulty_ramping: bool = True
    max_episode_steps: int | None = None
    full_action_set: bool = False
    autoreset_mode: AutoresetMode | str = AutoresetMode.SAME_STEP
    render_mode: str | None = None
    render_scale: int = 1

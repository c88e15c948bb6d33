"""Frame stacking for any host env family: `make_env(..., frame_stack=k)`, config
`env.frame_stack = k`.

k = 1 is no wrapper at all: the kernel writes straight into the buffer the policy reads.
k > 1 wraps the env in `FrameStackEnv`, an operant.envs.contract.BatchEnv whose observation
is the last k observations concatenated along the first axis, oldest first: uint8 (C, H, W)
frames become (k * C, H, W) (the channels of frame t - k + 1 first, those of frame t last),
float32 (D,) vectors become (k * D,). The stacks live in one buffer allocated at construction
(`obs`, `final_obs`: rows x k observations); operant.cext.frame_stack slides them in C after
every inner step, without allocating: k * F bytes per row and step (F the bytes of one
observation), the same as writing the stack once. A new episode's stack starts as k copies of
its first observation (Gymnasium's FrameStackObservation pads with the reset frame too, with
`padding_type="reset"`); `final_obs` holds the stack that ends in the terminal observation.

Why slide rather than keep a ring whose head moves: the contract's buffers never move, and a
ring read in place would hand the policy the frames in an order that rotates every step, so
every consumer (the policy, the rollout storage, a checkpoint) would have to know the phase.
The slide moves the same bytes a ring's reader would have to reorder anyway, and the rollout
storage copies the whole stack each step regardless.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from operant.envs.contract import EpisodeStats, ObsSpec, check_state
from operant.envs.registry import EnvError

STACK_KEY = "frame_stack.obs"
"""The stacks' name in `state_dict()` (the inner env's names are kept as they are)."""


def check_frame_stack(frame_stack: Any) -> int:
    """The checked depth; EnvError naming env.frame_stack otherwise."""
    if isinstance(frame_stack, bool) or not isinstance(frame_stack, int) or frame_stack < 1:
        raise EnvError(
            f"env.frame_stack = {frame_stack!r}: it must be a whole number of observations, "
            "at least 1 (1 stacks nothing)"
        )
    return frame_stack


def stack_env(env: Any, frame_stack: int) -> Any:
    """`env` itself for frame_stack = 1, else `FrameStackEnv(env, frame_stack)`."""
    depth = check_frame_stack(frame_stack)
    return env if depth == 1 else FrameStackEnv(env, depth)


def _bytes(array: np.ndarray) -> np.ndarray:
    """A (rows, ...) C-contiguous array as (rows, bytes per row) uint8, the same memory."""
    return array.reshape(array.shape[0], -1).view(np.uint8)


class FrameStackEnv:
    """The last `depth` observations of `env`'s rows, stacked along the first axis."""

    def __init__(self, env: Any, depth: int):
        from operant.cext.frame_stack import FrameStackKernel

        inner = env.obs_spec
        if not isinstance(env.obs, np.ndarray) or not inner.shape:
            raise EnvError(
                f"env.frame_stack = {depth}: stacking needs a host env with array observations "
                f'({env.impl} implementation given); use env.impl = "native"'
            )
        mode = env.metadata.get("autoreset_mode", AutoresetMode.SAME_STEP)
        if mode != AutoresetMode.SAME_STEP:
            raise EnvError(f"env.frame_stack = {depth} needs SAME_STEP autoreset, got {mode}")
        self.env, self.depth = env, depth
        self.impl, self.resumable, self.layout = env.impl, env.resumable, env.layout
        self.act_spec = env.act_spec
        shape = (depth * inner.shape[0], *inner.shape[1:])
        self.obs_spec = ObsSpec(shape, inner.dtype)
        rows = env.layout.num_rows
        self.obs = np.zeros((rows, *shape), dtype=inner.dtype)
        self.final_obs = np.zeros_like(self.obs)
        self.actions, self.rewards = env.actions, env.rewards
        self.terminated, self.truncated = env.terminated, env.truncated
        self.kernel = FrameStackKernel(
            _bytes(env.obs),
            _bytes(env.final_obs),
            env.terminated,
            env.truncated,
            _bytes(self.obs),
            _bytes(self.final_obs),
            depth,
        )
        self.num_envs = env.num_envs
        self.metadata = env.metadata
        self.render_mode = None
        self.spec = None
        single = env.single_observation_space
        self.single_observation_space = spaces.Box(
            np.concatenate([np.broadcast_to(single.low, single.shape)] * depth),
            np.concatenate([np.broadcast_to(single.high, single.shape)] * depth),
            dtype=single.dtype,
        )
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.single_action_space = env.single_action_space
        self.action_space = env.action_space

    def reset(self, *, seed: Any = None, options: dict[str, Any] | None = None):
        self.env.reset(seed=seed, options=options)
        self.kernel.fill()
        return self.obs, {}

    def step_bound(self) -> None:
        self.env.step_bound()
        self.kernel.push()

    def step(self, actions: Any) -> tuple[Any, ...]:
        """Gymnasium's vector step (SAME_STEP): the stacks, with the terminal stacks under
        info["final_obs"] for rows that ended."""
        _, rewards, terminated, truncated, info = self.env.step(actions)
        self.kernel.push()
        if "final_obs" in info:
            info = {**info, "final_obs": self.final_obs.copy()}
        return self.obs.copy(), rewards, terminated, truncated, info

    def drain_episode_stats(self) -> EpisodeStats:
        return self.env.drain_episode_stats()

    def recent_returns(self, count: int) -> np.ndarray:
        return self.env.recent_returns(count)

    def state_dict(self) -> dict[str, Any]:
        """The inner env's state and the stacks (its `obs` is the newest frame of each)."""
        return {**self.env.state_dict(), STACK_KEY: self.obs}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        check_state(state, self.state_dict())
        inner = {name: value for name, value in state.items() if name != STACK_KEY}
        self.env.load_state_dict(inner)
        np.copyto(self.obs, state[STACK_KEY])

    def close(self, **kwargs: Any) -> None:
        self.env.close(**kwargs)

    def __getattr__(self, name: str) -> Any:
        # What a family declares beyond the contract (a game's channels, step_timing, ...).
        if name == "env":
            raise AttributeError(name)
        return getattr(self.env, name)

"""`render_mode="rgb_array"` (and "human") on every env and family: frames are Gymnasium's
own pixels for the same state, one per env, and the errors a user can cause are one line."""

from __future__ import annotations

import sys

import gymnasium
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode

import operant.envs  # noqa: F401  (registers operant/<id> with Gymnasium)
from operant.envs import ENVS, EnvError, make_env

pytest.importorskip("pygame", reason="rendering needs pygame (the render extra)")

SIZES = {
    "CartPole-v1": (400, 600, 3),
    "MountainCar-v0": (400, 600, 3),
    "MountainCarContinuous-v0": (400, 600, 3),
    "Pendulum-v1": (500, 500, 3),
    "Acrobot-v1": (500, 500, 3),
}


def _host(value) -> np.ndarray:
    return value.cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)


def _state(env) -> np.ndarray:
    if env.impl == "torch":
        return env.state.numpy()
    return np.concatenate([kernel.state for kernel in env.kernels], axis=1)


def _gymnasium_frame(env_id: str, state: np.ndarray, last_action=None) -> np.ndarray:
    gym_env = gymnasium.make(env_id, render_mode="rgb_array").unwrapped
    gym_env.reset(seed=0)
    gym_env.state = np.array(state, dtype=np.float64)
    if last_action is not None:  # what Pendulum's step stores for its torque arrow
        gym_env.last_u = np.clip(last_action, -gym_env.max_torque, gym_env.max_torque)[0]
    frame = gym_env.render()
    gym_env.close()
    return frame


def _actions(env, rng) -> np.ndarray:
    space = env.single_action_space
    if isinstance(space, gymnasium.spaces.Discrete):
        return rng.integers(0, space.n, size=env.num_envs)
    return rng.uniform(space.low, space.high, size=(env.num_envs, 1)).astype(np.float32)


@pytest.mark.parametrize("impl", ["native", "overlap", "torch"])
@pytest.mark.parametrize("env_id", list(ENVS))
def test_frames_are_gymnasiums_pixels_for_the_same_state(env_id, impl):
    options = {"overlap": True} if impl == "overlap" else {"impl": impl}
    env = make_env(env_id, 2, render_mode="rgb_array", **options)
    assert env.render_mode == "rgb_array"
    assert env.metadata["render_fps"] == gymnasium.make(env_id).metadata["render_fps"]
    env.reset(seed=3)
    frames = env.render()
    assert len(frames) == 2 and all(frame.shape == SIZES[env_id] for frame in frames)
    for i, frame in enumerate(frames):
        np.testing.assert_array_equal(frame, _gymnasium_frame(env_id, _state(env)[:, i]))
    rng = np.random.default_rng(0)
    for _ in range(7):
        actions = _actions(env, rng)
        env.step(actions)
    frames = env.render()
    state = _state(env)
    for i, frame in enumerate(frames):
        last = actions[i] if env_id == "Pendulum-v1" else None
        np.testing.assert_array_equal(frame, _gymnasium_frame(env_id, state[:, i], last))
    assert not np.array_equal(frames[0], _gymnasium_frame(env_id, np.zeros(state.shape[0])))
    env.close()


def test_a_next_step_env_draws_its_terminal_state_then_the_next_episode():
    env = make_env(
        "CartPole-v1",
        1,
        impl="native",
        render_mode="rgb_array",
        autoreset_mode=AutoresetMode.NEXT_STEP,
    )
    env.reset(seed=0)
    terminated = np.zeros(1, dtype=bool)
    while not terminated[0]:
        obs, _, terminated, _, _ = env.step(np.ones(1, dtype=np.int64))
    terminal_frame = env.render()[0]
    np.testing.assert_array_equal(terminal_frame, _gymnasium_frame("CartPole-v1", obs[0]))
    obs, *_ = env.step(np.ones(1, dtype=np.int64))  # the reset step
    np.testing.assert_array_equal(
        env.render()[0], _gymnasium_frame("CartPole-v1", env.kernel.state[:, 0])
    )
    assert not np.array_equal(env.render()[0], terminal_frame)


@pytest.mark.parametrize("env_id", list(ENVS))
def test_reference_frames_are_gymnasiums_own(env_id):
    env = make_env(env_id, 2, impl="reference", render_mode="rgb_array")
    env.reset(seed=1)
    frames = env.render()
    assert len(frames) == 2 and frames[0].shape == SIZES[env_id]
    assert env.metadata["render_fps"] == gymnasium.make(env_id).metadata["render_fps"]


def test_make_vec_passes_render_mode_through():
    env = gymnasium.make_vec(
        "operant/Acrobot-v1",
        num_envs=3,
        vectorization_mode="vector_entry_point",
        render_mode="rgb_array",
    )
    env.reset(seed=0)
    frames = env.render()
    assert len(frames) == 3 and frames[2].dtype == np.uint8
    assert len({frame.tobytes() for frame in frames}) == 3


def test_render_without_a_render_mode_warns_and_returns_none():
    env = make_env("CartPole-v1", 2, impl="native")
    env.reset(seed=0)
    with pytest.warns(UserWarning, match="render_mode"):
        assert env.render() is None


@pytest.mark.parametrize("impl", ["native", "torch", "reference"])
def test_human_mode_without_a_display_is_refused_in_one_line(impl, monkeypatch):
    for name in ("DISPLAY", "WAYLAND_DISPLAY", "SDL_VIDEODRIVER"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(sys, "platform", "linux")
    with pytest.raises(EnvError, match=r'render_mode="human" needs a display.*DISPLAY') as refused:
        make_env("CartPole-v1", 2, impl=impl, render_mode="human")
    assert "\n" not in str(refused.value)


def test_human_mode_draws_env_0_where_a_display_exists(monkeypatch):
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")  # SDL's display that needs no screen
    env = make_env("Pendulum-v1", 3, impl="native", render_mode="human")
    env.reset(seed=0)
    env.step(np.ones((3, 1), dtype=np.float32))
    assert env.render() is None
    assert env._renderer.gym_env.screen is not None
    env.close()


@pytest.mark.parametrize("impl", ["native", "torch", "reference"])
def test_without_pygame_render_mode_names_the_extra(impl, monkeypatch):
    monkeypatch.setitem(sys.modules, "pygame", None)  # import pygame now raises ImportError
    with pytest.raises(EnvError, match=r'needs pygame: pip install "operant-rl\[render\]"'):
        make_env("CartPole-v1", 2, impl=impl, render_mode="rgb_array")


def test_an_unknown_render_mode_is_refused():
    with pytest.raises(
        EnvError,
        match=r"render_mode must be one of rgb_array, human or None, "
        r"got 'rgb'",
    ):
        make_env("CartPole-v1", 2, impl="torch", render_mode="rgb")

"""`gymnasium.make("operant/MinAtar-<Game>-v1")`: one MinAtar env with Gymnasium's single-env
contract (operant.envs.minatar.env), over the same kernel as the vector env."""

from __future__ import annotations

import warnings

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import operant.envs  # noqa: F401  (registers the ids)
from operant.envs import EnvError, InvalidActionError, make_env
from operant.envs.minatar.env import MinAtarEnv, rgb_frame
from operant.envs.minatar.vector import GAME_IDS
from operant.shared.frame import cells, frame_palette, text_rows

IDS = sorted(GAME_IDS)


@pytest.mark.parametrize("env_id", IDS)
def test_check_env_passes(env_id):
    env = gymnasium.make(f"operant/{env_id}", render_mode="rgb_array")
    check_env(env.unwrapped)
    assert isinstance(env.unwrapped, MinAtarEnv)
    assert env.observation_space == gymnasium.spaces.Box(
        0, 1, (len(env.unwrapped.channels), 10, 10), np.uint8
    )


@pytest.mark.parametrize("env_id", IDS)
def test_episodes_are_the_vector_envs_with_one_row(env_id):
    """Step for step the vector env's trajectory at N = 1: the same observations, rewards and
    flags; on the step that ends an episode the terminal observation (the vector env's
    final_obs), and after `reset()` a new episode from the same stream."""
    single = gymnasium.make(f"operant/{env_id}")
    vector = make_env(env_id, 1)
    obs, _ = single.reset(seed=11)
    vector_obs, _ = vector.reset(seed=11)
    np.testing.assert_array_equal(obs, vector_obs[0])
    actions = np.random.default_rng(0).integers(0, single.action_space.n, 3000)
    episodes = steps = 0
    for action in actions:
        obs, reward, terminated, truncated, info = single.step(int(action))
        v_obs, v_reward, v_terminated, v_truncated, v_info = vector.step(np.array([action]))
        steps += 1
        assert (reward, terminated, truncated) == (v_reward[0], v_terminated[0], v_truncated[0])
        assert isinstance(reward, float) and isinstance(terminated, bool) and info == {}
        if terminated or truncated:
            np.testing.assert_array_equal(obs, v_info["final_obs"][0])
            episodes += 1
            # the vector env began its next episode already; reset() begins the single env's
            # from the stream's next draws, as a vector reset without a seed does
            obs, _ = single.reset()
            v_obs, _ = vector.reset()
        np.testing.assert_array_equal(obs, v_obs[0])
    # Freeway ends itself after 2,500 steps; the other games' random play ends far sooner
    least = 1 if env_id == "MinAtar-Freeway-v1" else 10
    assert episodes >= least, f"{env_id}: {episodes} episodes in {steps} steps"


def test_a_seeded_reset_repeats_the_episode():
    env = gymnasium.make("operant/MinAtar-Asterix-v1", sticky_action_prob=0.0)
    actions = np.random.default_rng(1).integers(0, env.action_space.n, 200)

    def episode() -> list[tuple[bytes, float]]:
        env.reset(seed=5)
        out = []
        for action in actions:
            obs, reward, terminated, truncated, _ = env.step(int(action))
            out.append((obs.tobytes(), reward))
            if terminated or truncated:
                break
        return out

    first = episode()
    assert first == episode() and len(first) > 5


def test_options_reach_the_kernel():
    env = gymnasium.make(
        "operant/MinAtar-Breakout-v1", sticky_action_prob=0.25, full_action_set=True
    ).unwrapped
    assert env.action_space.n == 6
    assert env._vec.sticky_action_prob == 0.25
    limited = gymnasium.make("operant/MinAtar-Freeway-v1", max_episode_steps=7)
    limited.reset(seed=0)
    flags = [limited.step(0)[3] for _ in range(7)]
    assert flags == [False] * 6 + [True]


def test_rgb_array_is_minatars_display():
    """Each square in the colour of its highest-numbered set channel (MinAtar's cubehelix
    palette), black where none is set; `render_scale` repeats squares; "ansi" is the text
    frame `operant monitor --once` prints."""
    env = gymnasium.make("operant/MinAtar-Seaquest-v1", render_mode="rgb_array", render_scale=3)
    obs, _ = env.reset(seed=2)
    for _ in range(40):
        obs, *_ = env.step(4)  # down: the sub leaves the surface, enemies spawn
    image = env.render()
    assert image.shape == (30, 30, 3) and image.dtype == np.uint8
    palette = frame_palette(obs.shape[0])
    grid = cells(obs.tobytes(), obs.shape)
    for row in range(10):
        for col in range(10):
            channel = grid[row][col]
            expected = (
                (0, 0, 0)
                if channel < 0
                else tuple(int(palette[channel][k : k + 2], 16) for k in (1, 3, 5))
            )
            assert tuple(image[3 * row + 2, 3 * col + 1]) == expected
    assert len({tuple(pixel) for pixel in image.reshape(-1, 3)}) >= 3
    np.testing.assert_array_equal(rgb_frame(obs, 3), image)
    text = gymnasium.make("operant/MinAtar-Seaquest-v1", render_mode="ansi")
    text.reset(seed=2)
    frame, *_ = text.step(4)
    assert text.render() == "\n".join(text_rows(cells(frame.tobytes(), frame.shape))) + "\n"


def test_bad_input_is_one_line():
    env = gymnasium.make("operant/MinAtar-Breakout-v1")
    env.reset(seed=0)
    with pytest.raises(InvalidActionError, match="outside the action space Discrete"):
        env.step(3)
    with pytest.raises(InvalidActionError, match="must be integers"):
        env.step(1.5)
    with pytest.raises(EnvError, match="render_mode 'video'"):
        MinAtarEnv("MinAtar-Breakout-v1", render_mode="video")
    with pytest.raises(EnvError, match="unknown MinAtar game 'MinAtar-Pong-v1'"):
        MinAtarEnv("MinAtar-Pong-v1")
    with pytest.raises(EnvError, match="render_scale must be a positive integer"):
        MinAtarEnv("MinAtar-Breakout-v1", render_scale=0)


def test_sync_vector_mode_runs_the_single_env():
    envs = gymnasium.make_vec(
        "operant/MinAtar-Breakout-v1",
        num_envs=2,
        vectorization_mode="sync",
        sticky_action_prob=0.0,
    )
    obs, _ = envs.reset(seed=3)
    assert obs.shape == (2, 4, 10, 10)
    paddle = obs[:, 0, 9].argmax(axis=1)  # channel 0, the paddle, on the bottom row
    obs, *_ = envs.step(np.array([1, 2]))  # left, right (the minimal set: noop, left, right)
    np.testing.assert_array_equal(obs[:, 0, 9].argmax(axis=1), paddle + [-1, 1])


def test_the_reference_impl_is_a_single_env_too():
    """`impl="reference"`: the minatar package itself behind the same single-env face."""
    pytest.importorskip("minatar")
    env = gymnasium.make("operant/MinAtar-Breakout-v1", impl="reference")
    check_env(env.unwrapped)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (4, 10, 10) and obs.dtype == np.uint8 and obs[0, 9].sum() == 1


def test_stable_baselines3_takes_it():
    """SB3's own env checker passes, and its PPO steps it through its vector env."""
    sb3 = pytest.importorskip("stable_baselines3")
    from stable_baselines3.common.env_checker import check_env as sb3_check_env
    from stable_baselines3.common.env_util import make_vec_env

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SB3 suggests image conventions MinAtar does not use
        sb3_check_env(gymnasium.make("operant/MinAtar-Seaquest-v1"))
        model = sb3.PPO(
            "MlpPolicy",
            make_vec_env("operant/MinAtar-Seaquest-v1", n_envs=2, seed=0),
            n_steps=64,
            batch_size=64,
            n_epochs=1,
            seed=0,
        )
        model.learn(256)
    assert model.num_timesteps == 256


def test_a_step_after_the_end_warns_as_gymnasiums_envs_do():
    env = gymnasium.make("operant/MinAtar-Breakout-v1")
    env.reset(seed=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        while True:
            _, _, terminated, truncated, _ = env.step(0)
            if terminated or truncated:
                break
        assert not caught
        env.step(0)
    assert len(caught) == 1 and "You should always call 'reset()'" in str(caught[0].message)

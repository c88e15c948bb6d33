"""operant.compat.sb3: Operant's envs as stable-baselines3 VecEnvs.

SB3's `check_env` checks a single gym.Env; a VecEnv is checked the way SB3's own tests check
theirs: against DummyVecEnv. Over the "reference" implementation (Gymnasium's CartPole inside
Operant's vector env) the adapter must give DummyVecEnv's answers exactly, step by step, through
episode ends, time limits, VecMonitor and VecNormalize; over the native kernel, the same shapes,
dtypes and episode-end semantics. Then SB3's PPO learns on both.
"""

from __future__ import annotations

import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("stable_baselines3")

from gymnasium.wrappers.vector import RecordEpisodeStatistics  # noqa: E402
from stable_baselines3 import PPO  # noqa: E402
from stable_baselines3.common.callbacks import BaseCallback  # noqa: E402
from stable_baselines3.common.env_util import make_vec_env as sb3_make_vec_env  # noqa: E402
from stable_baselines3.common.evaluation import evaluate_policy  # noqa: E402
from stable_baselines3.common.monitor import Monitor  # noqa: E402
from stable_baselines3.common.vec_env import (  # noqa: E402
    DummyVecEnv,
    VecEnv,
    VecMonitor,
    VecNormalize,
)

from operant.compat.sb3 import OperantVecEnv, make_vec_env  # noqa: E402

NUM_ENVS = 4
# CartPole's reset draws every state component from U(-0.05, 0.05); its episode ends when
# |x| > 2.4 or |theta| > 12 degrees.
RESET_BOUND = 0.05
X_LIMIT, THETA_LIMIT = 2.4, 12 * 2 * np.pi / 360


def dummy_cartpole(num_envs: int = NUM_ENVS, **kwargs) -> DummyVecEnv:
    return DummyVecEnv([lambda: gym.make("CartPole-v1", **kwargs) for _ in range(num_envs)])


def random_actions(rng: np.random.Generator, steps: int) -> np.ndarray:
    return rng.integers(0, 2, size=(steps, NUM_ENVS))


def assert_same_step(ours, theirs) -> None:
    """One step's (obs, rewards, dones, infos) equal to DummyVecEnv's, dtypes included."""
    for a, b in zip(ours[:3], theirs[:3], strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    for info, expected in zip(ours[3], theirs[3], strict=True):
        assert info.keys() == expected.keys()
        for key, value in expected.items():
            if key == "episode":  # Monitor's wall time differs; return and length may not
                assert (info[key]["r"], info[key]["l"]) == (value["r"], value["l"])
            else:
                np.testing.assert_array_equal(info[key], value)


def test_spaces_and_dtypes_match_dummy_vec_env():
    ours, theirs = make_vec_env("CartPole-v1", n_envs=NUM_ENVS, monitor=False), dummy_cartpole()
    assert isinstance(ours, VecEnv) and ours.num_envs == NUM_ENVS
    assert ours.observation_space == theirs.observation_space
    assert ours.action_space == theirs.action_space
    assert ours.render_mode is None
    assert ours.get_attr("render_mode") == theirs.get_attr("render_mode")
    obs = ours.reset()
    assert obs.shape == theirs.reset().shape == (NUM_ENVS, 4) and obs.dtype == np.float32
    assert np.abs(obs).max() <= RESET_BOUND
    obs, rewards, dones, infos = ours.step(np.zeros(NUM_ENVS, dtype=np.int64))
    assert (obs.dtype, rewards.dtype, dones.dtype) == (np.float32, np.float32, np.bool_)
    np.testing.assert_array_equal(rewards, np.ones(NUM_ENVS, dtype=np.float32))
    assert infos == [{"TimeLimit.truncated": False}] * NUM_ENVS
    ours.close()


def test_reference_impl_steps_exactly_as_dummy_vec_env():
    """Same seeds, same actions: every observation, reward, done and info (terminal
    observations and TimeLimit.truncated, with a 30-step limit so both kinds of end happen)."""
    ours = make_vec_env(
        "CartPole-v1",
        n_envs=NUM_ENVS,
        seed=3,
        impl="reference",
        monitor=False,
        max_episode_steps=30,
    )
    theirs = dummy_cartpole(max_episode_steps=30)
    theirs.seed(3)
    np.testing.assert_array_equal(ours.reset(), theirs.reset())
    ends = {True: 0, False: 0}
    for actions in random_actions(np.random.default_rng(0), 300):
        ours_step, theirs_step = ours.step(actions), theirs.step(actions)
        assert_same_step(ours_step, theirs_step)
        for info in ours_step[3]:
            if "terminal_observation" in info:
                ends[info["TimeLimit.truncated"]] += 1
    assert ends[True] > 0 and ends[False] > 0


def test_native_episode_ends_carry_terminal_observation():
    env = make_vec_env("CartPole-v1", n_envs=NUM_ENVS, seed=1, monitor=False, max_episode_steps=40)
    previous, lengths = env.reset(), np.zeros(NUM_ENVS, dtype=int)
    seen = {True: 0, False: 0}
    for actions in random_actions(np.random.default_rng(1), 400):
        obs, _, dones, infos = env.step(actions)
        lengths += 1
        for i, info in enumerate(infos):
            assert ("terminal_observation" in info) == dones[i]
            if not dones[i]:
                assert info == {"TimeLimit.truncated": False}
                continue
            terminal = info["terminal_observation"]
            assert terminal.shape == (4,) and terminal.dtype == np.float32
            assert np.abs(obs[i]).max() <= RESET_BOUND  # already the next episode's first
            out_of_bounds = abs(terminal[0]) > X_LIMIT or abs(terminal[2]) > THETA_LIMIT
            assert info["TimeLimit.truncated"] == (lengths[i] == 40 and not out_of_bounds)
            assert out_of_bounds or lengths[i] == 40
            seen[info["TimeLimit.truncated"]] += 1
            lengths[i] = 0
        previous = obs
    assert seen[True] > 0 and seen[False] > 0 and previous.shape == (NUM_ENVS, 4)


def test_vec_monitor_episode_infos_match_monitor():
    """make_vec_env's VecMonitor reports what SB3's make_vec_env's per-env Monitor does."""
    ours = make_vec_env("CartPole-v1", n_envs=NUM_ENVS, seed=5, impl="reference")
    theirs = sb3_make_vec_env("CartPole-v1", n_envs=NUM_ENVS, seed=5)
    assert isinstance(ours, VecMonitor) and isinstance(ours.unwrapped, OperantVecEnv)
    np.testing.assert_array_equal(ours.reset(), theirs.reset())
    episodes = 0
    for actions in random_actions(np.random.default_rng(5), 200):
        ours_step, theirs_step = ours.step(actions), theirs.step(actions)
        assert_same_step(ours_step, theirs_step)
        episodes += sum("episode" in info for info in ours_step[3])
    assert episodes > 10


def test_vec_monitor_over_native_counts_every_step():
    env = VecMonitor(make_vec_env("CartPole-v1", n_envs=NUM_ENVS, seed=2, monitor=False))
    env.reset()
    lengths, episodes = np.zeros(NUM_ENVS, dtype=int), []
    for actions in random_actions(np.random.default_rng(2), 200):
        _, _, dones, infos = env.step(actions)
        lengths += 1
        for i in np.flatnonzero(dones):
            episodes.append(infos[i]["episode"])
            assert infos[i]["episode"]["l"] == lengths[i] == infos[i]["episode"]["r"]
            lengths[i] = 0
    assert len(episodes) > 10


def test_monitor_csv_names_the_env_as_sb3s_own_does(tmp_path):
    # (OperantVecEnv had no spec: the header read "env_id": "None")
    import json

    env = make_vec_env("CartPole-v1", n_envs=NUM_ENVS, seed=2, monitor_dir=tmp_path)
    env.reset()
    for actions in random_actions(np.random.default_rng(2), 60):
        env.step(actions)
    env.close()
    header, columns, *rows = (tmp_path / "monitor.csv").read_text().splitlines()
    assert json.loads(header.removeprefix("#"))["env_id"] == "CartPole-v1"
    assert columns == "r,l,t" and len(rows) >= 2


def test_vec_normalize_over_the_adapter_matches_dummy_vec_env():
    ours = VecNormalize(
        make_vec_env("CartPole-v1", n_envs=NUM_ENVS, seed=4, impl="reference", monitor=False)
    )
    theirs = VecNormalize(dummy_cartpole())
    theirs.seed(4)
    np.testing.assert_allclose(ours.reset(), theirs.reset())
    for actions in random_actions(np.random.default_rng(4), 100):
        obs, rewards, _, infos = ours.step(actions)
        expected = theirs.step(actions)
        np.testing.assert_allclose(obs, expected[0])
        np.testing.assert_allclose(rewards, expected[1])
        for info, expected_info in zip(infos, expected[3], strict=True):
            if "terminal_observation" in expected_info:
                np.testing.assert_allclose(
                    info["terminal_observation"], expected_info["terminal_observation"]
                )
    assert ours.obs_rms.count == theirs.obs_rms.count > 100
    np.testing.assert_allclose(ours.obs_rms.mean, theirs.obs_rms.mean)


def test_seeds_are_used_once_as_in_dummy_vec_env():
    env = make_vec_env("CartPole-v1", n_envs=NUM_ENVS, seed=7, monitor=False)
    first = env.reset()
    np.testing.assert_array_equal(
        first, make_vec_env("CartPole-v1", n_envs=NUM_ENVS, seed=7, monitor=False).reset()
    )
    assert not np.array_equal(env.reset(), first)  # the seed was for one reset only
    assert env.seed(7) == [7, 8, 9, 10]
    np.testing.assert_array_equal(env.reset(), first)
    env.set_options([{"a": 1}, {}, {}, {}])
    with pytest.raises(ValueError, match="different options"):
        env.reset()


def test_per_env_calls_on_one_vector_env():
    ours, theirs = make_vec_env("CartPole-v1", n_envs=NUM_ENVS, monitor=False), dummy_cartpole()
    for name in ("observation_space", "action_space", "render_mode"):
        assert ours.get_attr(name) == theirs.get_attr(name)
    assert ours.get_attr("num_envs", indices=[1, 2]) == [NUM_ENVS, NUM_ENVS]
    # the single env's EnvSpec, as DummyVecEnv's envs give it (None before); theirs carries
    # SB3's Monitor and render_mode besides
    for spec, their_spec in zip(ours.get_attr("spec"), theirs.get_attr("spec"), strict=True):
        assert (spec.id, spec.max_episode_steps, spec.reward_threshold, spec.entry_point) == (
            their_spec.id, their_spec.max_episode_steps, their_spec.reward_threshold,
            their_spec.entry_point,
        )  # fmt: skip
        assert "num_envs" not in spec.kwargs
    for env in (ours, theirs):
        with pytest.raises(AttributeError):
            env.get_attr("no_such_attribute")
        assert env.has_attr("render_mode") and not env.has_attr("no_such_attribute")
        assert env.env_is_wrapped(Monitor) == [False] * NUM_ENVS
    ours.set_attr("user_tag", "a")
    assert ours.get_attr("user_tag", indices=0) == ["a"]
    with pytest.raises(ValueError, match="indices=None"):
        ours.set_attr("user_tag", "b", indices=[0])
    obs, _ = ours.env_method("reset", seed=11, indices=[0])[0]
    assert obs.shape == (NUM_ENVS, 4)


def test_gymnasium_vector_wrappers_show_through():
    """Under Gymnasium's RecordEpisodeStatistics the adapter reports its episodes in SB3's
    form, and env_is_wrapped sees the wrapper."""
    vector_env = gym.make_vec(
        "operant/CartPole-v1", num_envs=NUM_ENVS, vectorization_mode="vector_entry_point"
    )
    env = OperantVecEnv(RecordEpisodeStatistics(vector_env))
    assert env.env_is_wrapped(RecordEpisodeStatistics) == [True] * NUM_ENVS
    env.seed(0)
    env.reset()
    lengths = np.zeros(NUM_ENVS, dtype=int)
    for actions in random_actions(np.random.default_rng(0), 100):
        _, _, dones, infos = env.step(actions)
        lengths += 1
        for i in np.flatnonzero(dones):
            assert infos[i]["episode"]["l"] == lengths[i] == infos[i]["episode"]["r"]
            lengths[i] = 0


def test_refuses_a_next_step_vector_env():
    next_step = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="vector_entry_point")
    with pytest.raises(ValueError, match="SAME_STEP"):
        OperantVecEnv(next_step)


def test_refuses_an_env_without_terminal_observations():
    """info_mode="none" drops final_obs: the adapter crashed at the first episode end,
    mid-learn(); it is refused when built."""
    with pytest.raises(ValueError, match=r"terminal observations in info .* not .none."):
        make_vec_env("CartPole-v1", n_envs=2, info_mode="none")


def test_torch_impl_gives_numpy():
    pytest.importorskip("torch")
    env = make_vec_env("CartPole-v1", n_envs=NUM_ENVS, seed=0, impl="torch", monitor=False)
    assert isinstance(env.reset(), np.ndarray)
    obs, rewards, dones, infos = env.step(np.ones(NUM_ENVS, dtype=np.int64))
    assert (type(obs), type(rewards), type(dones)) == (np.ndarray,) * 3
    assert rewards.dtype == np.float32 and len(infos) == NUM_ENVS


def test_without_sb3_import_says_what_to_install():
    code = (
        "import sys; sys.modules['stable_baselines3'] = None\n"
        "import operant, operant.compat\n"
        "try:\n    import operant.compat.sb3\nexcept ImportError as error:\n"
        "    print(error)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout == (
        "operant.compat.sb3 needs stable-baselines3: pip install stable-baselines3\n"
    )


def test_import_operant_does_not_import_sb3():
    code = (
        "import sys, operant, operant.compat, operant.envs\n"
        "print(sorted(m for m in sys.modules if m.startswith('stable_baselines3')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout == "[]\n"


# -- SB3's PPO learns on Operant's CartPole, as on Gymnasium's ------------------------------
# rl-baselines3-zoo's hyperparameters for PPO on CartPole-v1 (hyperparams/ppo.yml), including
# its 1e5-step schedule; training stops once solved.
RL_ZOO_STEPS = 100_000
BUDGET = 50_000
TARGET_RETURN = 200.0


def linear(initial: float):
    return lambda progress_remaining: progress_remaining * initial


class StopWhenSolved(BaseCallback):
    """Stops training at the end of the rollout whose `rollout/ep_rew_mean` (the mean return of
    the last 100 episodes) reaches TARGET_RETURN, or once BUDGET steps are spent."""

    def __init__(self):
        super().__init__()
        self.solved_at: int | None = None

    def _on_rollout_end(self) -> None:
        returns = [episode["r"] for episode in self.model.ep_info_buffer]
        if self.solved_at is None and returns and np.mean(returns) >= TARGET_RETURN:
            self.solved_at = self.num_timesteps

    def _on_step(self) -> bool:
        return self.solved_at is None and self.num_timesteps < BUDGET


def ppo_solved_at(env: VecEnv, seed: int) -> int | None:
    model = PPO(
        "MlpPolicy",
        env,
        n_steps=32,
        batch_size=256,
        gae_lambda=0.8,
        gamma=0.98,
        n_epochs=20,
        ent_coef=0.0,
        learning_rate=linear(1e-3),
        clip_range=linear(0.2),
        seed=seed,
        device="cpu",
    )
    callback = StopWhenSolved()
    model.learn(RL_ZOO_STEPS, callback=callback)
    # evaluate_policy counts whole episodes from VecMonitor's infos through the adapter.
    returns, lengths = evaluate_policy(model, env, n_eval_episodes=5, return_episode_rewards=True)
    assert len(returns) == 5 and np.array_equal(returns, lengths)  # CartPole pays 1 a step
    return callback.solved_at


@pytest.fixture
def one_torch_thread():
    """A 64-unit MLP gains nothing from threads, and on a loaded machine they spin."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_sb3_ppo_solves_operant_cartpole_within_gymnasiums_budget(one_torch_thread):
    seed = 1
    ours = ppo_solved_at(make_vec_env("CartPole-v1", n_envs=8, seed=seed), seed)
    theirs = ppo_solved_at(sb3_make_vec_env("CartPole-v1", n_envs=8, seed=seed), seed)
    assert theirs is not None and theirs <= BUDGET, "the budget must be one Gymnasium's meets"
    assert ours is not None and ours <= BUDGET

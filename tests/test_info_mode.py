"""env.info_mode (operant.envs.info_mode): what Gymnasium's step() returns in info, the
arrays unchanged in every mode."""

from __future__ import annotations

import numpy as np
import pytest

from operant.envs import make_env
from operant.envs.info_mode import InfoModeEnv
from operant.envs.registry import EnvError
from operant.trainer.config import ConfigError, load_config

ENV_ID, NUM_ENVS, STEPS = "MinAtar-Breakout-v1", 8, 300


def play(info_mode: str):
    env = make_env(ENV_ID, NUM_ENVS, info_mode=info_mode)
    env.reset(seed=5)
    rng = np.random.default_rng(5)
    trajectory, infos = [], []
    for _ in range(STEPS):
        obs, rewards, terminated, truncated, info = env.step(rng.integers(0, 3, NUM_ENVS))
        trajectory.append((obs, rewards, terminated, truncated))
        infos.append(info)
    return env, trajectory, infos


def test_the_three_modes_step_the_same_episodes_and_differ_only_in_info():
    stats_env, stats, stats_infos = play("stats")
    full_env, full, full_infos = play("full")
    none_env, none, none_infos = play("none")
    assert not isinstance(stats_env, InfoModeEnv)
    for a, b, c in zip(stats, full, none):
        for x, y, z in zip(a, b, c):
            np.testing.assert_array_equal(x, y)
            np.testing.assert_array_equal(x, z)
    assert all(info == {} for info in none_infos)
    ended = [info for info in stats_infos if info]
    assert ended and all(set(info) == {"final_obs", "_final_obs"} for info in ended)
    # "full": Gymnasium's RecordEpisodeStatistics keys, the same episodes the kernel reduced.
    episodes = [info for info in full_infos if "episode" in info]
    returns = np.concatenate([info["episode"]["r"][info["_episode"]] for info in episodes])
    lengths = np.concatenate([info["episode"]["l"][info["_episode"]] for info in episodes])
    record = full_env.drain_episode_stats()
    assert len(returns) == record.episodes > NUM_ENVS
    assert returns.sum() == pytest.approx(record.return_sum)
    assert lengths.sum() == record.length_sum and lengths.min() == record.length_min
    np.testing.assert_array_equal(returns[-4:], full_env.recent_returns(4))


def test_a_bad_info_mode_is_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"env\.info_mode: Invalid enum value 'verbose'"):
        load_config(None, ["env.info_mode=verbose"])
    with pytest.raises(EnvError, match=r"env\.info_mode = 'verbose': choose one of"):
        make_env("CartPole-v1", 2, info_mode="verbose")

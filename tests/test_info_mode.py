"""env.info_mode (operant.envs.face.info_mode): what Gymnasium's step() returns in info, the
arrays unchanged in every mode."""

from __future__ import annotations

import numpy as np
import pytest

from operant.envs import make_env
from operant.envs.face.info_mode import InfoModeEnv
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
    keys = {"final_obs", "_final_obs", "final_info", "_final_info"}
    assert ended and all(set(info) == keys for info in ended)
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


def _trajectory(env, steps: int = 200, seed: int = 3):
    """Every step's outputs (copied) and info, under random actions from a fixed stream."""
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(steps):
        actions = rng.integers(0, env.single_action_space.n, env.num_envs)
        obs, rewards, terminated, truncated, info = env.step(actions)
        out.append(([np.array(_np(x)) for x in (obs, rewards, terminated, truncated)], info))
    return out


def _np(values):
    return values if isinstance(values, np.ndarray) else values.cpu().numpy()


@pytest.mark.parametrize("impl", ["native", "torch"])
@pytest.mark.parametrize("mode", ["NextStep", "SameStep"])
def test_every_info_mode_keeps_the_autoreset_mode(impl, mode):
    """ "none" and "full" step as "stats" does in either mode (under NEXT_STEP "none" once
    stepped the core and returned SAME_STEP's outputs), on numpy and on torch."""
    made = {
        info_mode: make_env(
            "CartPole-v1",
            4,
            impl=impl,
            autoreset_mode=mode,
            info_mode=info_mode,
            max_episode_steps=40,
        )
        for info_mode in ("stats", "full", "none")
    }
    stats, full, none = (_trajectory(env) for env in made.values())
    for (a, _), (b, _), (c, info) in zip(stats, full, none):
        for x, y, z in zip(a, b, c):
            np.testing.assert_array_equal(x, y)
            np.testing.assert_array_equal(x, z)
        assert info == {}


@pytest.mark.parametrize("mode", ["NextStep", "SameStep"])
def test_full_reports_what_gymnasiums_record_episode_statistics_reports(mode):
    """The "episode" keys, their values and dtypes, as Gymnasium's own wrapper gives them on
    the same steps (under NEXT_STEP it skips the reset step, which once counted as a step)."""
    from gymnasium.wrappers.vector import RecordEpisodeStatistics

    options = {"autoreset_mode": mode, "max_episode_steps": 40}
    full = _trajectory(make_env("CartPole-v1", 4, info_mode="full", **options))
    wrapped = _trajectory(RecordEpisodeStatistics(make_env("CartPole-v1", 4, **options)))
    seen = 0
    for (_, ours), (_, theirs) in zip(full, wrapped):
        assert ("episode" in ours) == ("episode" in theirs)
        if "episode" in theirs:
            seen += 1
            np.testing.assert_array_equal(ours["_episode"], theirs["_episode"])
            for key in ("r", "l"):
                np.testing.assert_array_equal(ours["episode"][key], theirs["episode"][key])
                assert ours["episode"][key].dtype == theirs["episode"][key].dtype
            assert ours["episode"]["t"].shape == theirs["episode"]["t"].shape
    assert seen > 10


@pytest.mark.parametrize(
    "options", [{"info_mode": "full"}, {"info_mode": "none"}, {"frame_stack": 4}]
)
def test_layers_are_gymnasium_vector_envs_that_its_wrappers_take(options):
    from gymnasium.vector import VectorEnv
    from gymnasium.wrappers.vector import ClipReward, NormalizeReward, RecordEpisodeStatistics

    env = make_env("CartPole-v1", 4, **options)
    assert isinstance(env, VectorEnv) and env.unwrapped is not env
    # ("full" reports the episodes itself: RecordEpisodeStatistics over it refuses the key)
    counted = env if options.get("info_mode") == "full" else RecordEpisodeStatistics(env)
    wrapped = ClipReward(NormalizeReward(counted), -1.0, 1.0)
    wrapped.reset(seed=0)
    episodes = 0
    for _ in range(60):
        _, rewards, _, _, info = wrapped.step(np.zeros(4, np.int64))
        episodes += int(info["_episode"].sum()) if "episode" in info else 0
    assert rewards.shape == (4,) and episodes > 0
    wrapped.close()
    assert env.closed


def test_none_refuses_bad_actions_as_the_other_modes_do():
    from operant.envs import InvalidActionError

    env = make_env("CartPole-v1", 4, info_mode="none")
    env.reset(seed=0)
    for bad, message in (
        (np.int64(1), r"actions must have shape \(4,\)"),
        (np.full(4, 0.5), "must be integers"),
        (np.array([0, 1, 2, 0]), "outside the action space"),
    ):
        with pytest.raises(InvalidActionError, match=message):
            env.step(bad)

"""The native face's step through Gymnasium's API: with copy=False every array of the result,
info's final_obs and _final_obs included, is the env's live buffer; with copy=True none is;
the ended-env mask is the same whether the flags are OR-ed as words (N a multiple of 8) or
as bools; actions passed as the env's own buffer are taken in place."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest

import operant.envs  # noqa: F401  (registers operant/*)


def make(num_envs: int, copy: bool):
    env = gymnasium.make_vec(
        "operant/CartPole-v1",
        num_envs=num_envs,
        vectorization_mode="vector_entry_point",
        copy=copy,
        max_episode_steps=3,
    )
    env.reset(seed=0)
    return env


@pytest.mark.parametrize("num_envs", [8, 13])  # words, and the bool fallback
@pytest.mark.parametrize("copy", [True, False])
def test_final_obs_are_live_buffers_only_without_copies(num_envs, copy):
    env = make(num_envs, copy)
    actions = np.zeros(num_envs, dtype=np.int64)
    for _ in range(2):
        obs, _, terminated, truncated, info = env.step(actions)
        assert "final_obs" not in info
    obs, _, terminated, truncated, info = env.step(actions)  # the time limit: every env ends
    assert truncated.all() and info["_final_obs"].tolist() == [True] * num_envs
    assert (info["final_obs"] is env.final_obs) is (not copy)
    assert (info["_final_obs"] is env._done) is (not copy)
    assert (obs is env.obs) is (not copy)
    assert info["final_obs"].shape == (num_envs, 4) and not np.array_equal(info["final_obs"], obs)


def test_the_mask_matches_the_flags_when_some_envs_end():
    env = make(16, copy=True)
    rng = np.random.default_rng(0)
    env.step(np.zeros(16, dtype=np.int64))
    env.kernel.episode_length[:5] = 2  # these five reach the 3-step limit on the next step
    _, _, terminated, truncated, info = env.step(rng.integers(0, 2, 16))
    assert info["_final_obs"].tolist() == (terminated | truncated).tolist()
    assert info["_final_obs"][:5].all() and not info["_final_obs"][5:].any()


def test_actions_written_into_the_env_buffer_are_taken_in_place():
    env = make(8, copy=False)
    env.actions[:] = [1, 0, 1, 0, 1, 0, 1, 0]
    before = env.obs.copy()
    env.step(env.actions)
    pushed_right = env.obs[:, 1] > before[:, 1]  # cart velocity grows with action 1
    assert pushed_right.tolist() == [True, False] * 4


@pytest.mark.parametrize("num_envs", [8, 13])
def test_the_live_mask_is_cleared_on_a_step_that_ends_no_episode(num_envs):
    # step() skips the flags when the kernel ended no episode; the live mask a caller may still
    # hold from the last ending step must not keep that step's True values.
    env = make(num_envs, copy=False)
    _, _, _, truncated, info = env.step(env.actions)
    _, _, _, truncated, info = env.step(env.actions)
    assert "_final_obs" not in info
    _, _, _, truncated, info = env.step(env.actions)  # the time limit of 3 ends every episode
    mask = info["_final_obs"]
    assert mask.all() and truncated.all()
    _, _, terminated, truncated, info = env.step(env.actions)  # a fresh episode's first step
    assert "_final_obs" not in info
    assert not terminated.any() and not truncated.any()
    assert not mask.any()

"""copy=True through `gymnasium.make_vec` (issue 37 item 4): what `step()` returns is the
caller's, and no later step changes it, whether the caller keeps every step's arrays, only the
last one's, or only a view of one; the values are copy=False's, step by step, info's
final_obs in the rows `_final_obs` marks included. Every MinAtar game (whose copy=True step
copies in the kernel into arrays taken again once nothing holds them, operant.envs.native.fresh) and
CartPole (the native face's plain copies)."""

from __future__ import annotations

import weakref

import gymnasium
import numpy as np
import pytest

import operant.envs  # noqa: F401  (registers operant/*)
from operant.envs import InvalidActionError, make_env
from operant.envs.minatar.vector import GAME_IDS
from operant.envs.native.fresh import FreshArrays

IDS = [f"operant/{env_id}" for env_id in sorted(GAME_IDS)] + ["operant/CartPole-v1"]
N, STEPS = 16, 40
OUTPUTS = ("obs", "rewards", "terminated", "truncated")


def pair(env_id: str):
    """copy=True and copy=False envs of `env_id` from the same seed, with a time limit short
    enough that episodes end (and final_obs is returned) within STEPS."""
    envs = [
        gymnasium.make_vec(
            env_id,
            num_envs=N,
            vectorization_mode="vector_entry_point",
            copy=copy,
            max_episode_steps=12,
        )
        for copy in (True, False)
    ]
    for env in envs:
        env.reset(seed=3)
    return envs


def snapshot(result) -> dict:
    """Copies of a step's arrays (info's final_obs only where _final_obs marks a row)."""
    obs, rewards, terminated, truncated, info = result
    kept = {name: np.array(value) for name, value in zip(OUTPUTS, result)}
    if "_final_obs" in info:
        kept["_final_obs"] = np.array(info["_final_obs"])
        kept["final_obs"] = np.array(info["final_obs"])[info["_final_obs"]]
    return kept


def same(result, kept: dict) -> None:
    for name, value in zip(OUTPUTS, result):
        np.testing.assert_array_equal(value, kept[name], err_msg=name)
    info = result[4]
    assert ("_final_obs" in info) is ("_final_obs" in kept)
    if "_final_obs" in info:
        np.testing.assert_array_equal(info["_final_obs"], kept["_final_obs"])
        np.testing.assert_array_equal(info["final_obs"][info["_final_obs"]], kept["final_obs"])
        assert info["_final_info"] is info["_final_obs"] and info["final_info"] == {}


@pytest.mark.parametrize("env_id", IDS)
def test_kept_arrays_stay_as_returned_and_equal_copy_false(env_id):
    copied, live = pair(env_id)
    rng = np.random.default_rng(0)
    every, last, ended = [], None, 0
    for step in range(STEPS):
        actions = rng.integers(0, live.single_action_space.n, N)
        result = copied.step(actions)
        same(result, snapshot(live.step(actions)))  # copy=False's values at this step
        if last is not None:  # the previous step's, held through this one
            same(*last)
        last = (result, snapshot(result))
        if step % 3 == 0:  # some kept to the end (more than the pool keeps), some dropped
            every.append(last)
        ended += "_final_obs" in result[4]
    assert ended >= 2
    for result, kept in every:
        same(result, kept)
    arrays = [array for result, _ in every for array in (*result[:4], result[4].get("final_obs"))]
    assert not any(
        np.shares_memory(a, b)
        for i, a in enumerate(arrays)
        for b in arrays[i + 1 :]
        if a is not None and b is not None
    )


@pytest.mark.parametrize("env_id", IDS)
def test_a_view_or_a_weak_reference_keeps_the_array_from_being_reused(env_id):
    copied, _ = pair(env_id)
    actions = np.zeros(N, dtype=np.int64)
    obs = copied.step(actions)[0]
    row, first = obs[0], obs[0].copy()
    marked = copied.step(actions)[0]
    watched, seen = weakref.ref(marked), marked.copy()
    del obs, marked
    for _ in range(8):
        copied.step(actions)
    np.testing.assert_array_equal(row, first)
    if watched() is not None:  # alive only while something holds it: then unchanged
        np.testing.assert_array_equal(watched(), seen)


def test_minatar_copy_true_hands_back_arrays_nothing_holds():
    env = make_env("MinAtar-Breakout-v1", N)  # copy=True, make_env's default as Gymnasium's
    actions = np.zeros(N, dtype=np.int64)
    first = env.step(actions)[0]
    second = env.step(actions)[0]
    address = first.__array_interface__["data"][0]
    assert not np.shares_memory(first, second)
    del first
    third = env.step(actions)[0]  # nothing holds the first step's: its memory is written again
    assert third.__array_interface__["data"][0] == address
    assert not np.shares_memory(third, second)


def test_an_invalid_action_moves_no_env_with_copies():
    copied, live = pair("operant/MinAtar-SpaceInvaders-v1")
    bad = np.zeros(N, dtype=np.int64)
    bad[5] = 4  # SpaceInvaders has four actions
    with pytest.raises(InvalidActionError, match="action 4 for env 5 is outside"):
        copied.step(bad)
    actions = np.ones(N, dtype=np.int64)
    same(copied.step(actions), snapshot(live.step(actions)))


def test_fresh_arrays_take_only_what_nothing_holds():
    pool = FreshArrays((3, 2), np.uint8, zeroed=True, keep=2)
    a = pool.take()
    assert not a.any() and a.shape == (3, 2)
    b = pool.take()
    assert b is not a  # a is held here
    address = b.ctypes.data
    del b
    assert pool.take().ctypes.data == address
    held = [pool.take(), pool.take()]  # more than `keep` held: new arrays, distinct
    assert len({id(array) for array in (a, *held)}) == 3
    with pytest.raises(ValueError, match=r"obs and final_obs must be uint8 \(16, 4, 10, 10\)"):
        env = make_env("MinAtar-Breakout-v1", N)
        env.kernel.step_copy(np.zeros((N, 4, 10, 10), np.uint8), np.zeros((8, 4, 10, 10), np.uint8))

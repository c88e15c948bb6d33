"""The overlapped rollout (env.overlap = true): the native step thread, the split env, and the
trainer's overlapped collect. Real threads and real kernels; speed is
benchmarks/bench_overlap.py's."""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from operant.cext.overlap import StepThread
from operant.envs import InvalidActionError, make_env
from operant.envs.face.parity import random_actions
from operant.envs.native.overlap import SplitNativeVectorEnv
from operant.envs.registry import lookup
from operant.trainer.checkpoint.state import capture_env_state, restore_env_state
from operant.trainer.config import load_config
from operant.trainer.loop.train import Trainer

OUTPUTS = ("obs", "final_obs", "rewards", "terminated", "truncated")


@pytest.mark.parametrize("spin_us", [200.0, 0.0])
def test_step_thread_steps_exactly_like_the_kernel(spin_us):
    """Stepped on the thread or on the caller, the same env ends in the same place; with
    spin_us 0 the thread sleeps between requests and must still wake for every one."""
    here, there = (make_env("Acrobot-v1", 32, impl="native", copy=False) for _ in range(2))
    here.reset(seed=5)
    there.reset(seed=5)
    thread = StepThread([there.kernel], spin_us=spin_us)
    rng = np.random.default_rng(0)
    try:
        for step in range(300):
            here.actions[:] = there.actions[:] = random_actions(here, rng)
            here.step_bound()
            thread.start(0)
            assert thread.wait() == -1
            for name in OUTPUTS:
                assert np.array_equal(getattr(here, name), getattr(there, name)), (step, name)
            if spin_us == 0 and step % 50 == 0:
                time.sleep(0.002)  # long enough for the thread to go to sleep
        assert np.array_equal(here.kernel.state, there.kernel.state)
    finally:
        thread.close()


def test_step_thread_refuses_misuse():
    env = make_env("CartPole-v1", 4, impl="native", copy=False)
    env.reset(seed=0)
    thread = StepThread([env.kernel])
    with pytest.raises(IndexError):
        thread.start(1)
    thread.start(0)
    assert thread.wait() == -1
    thread.close()
    with pytest.raises(RuntimeError, match="closed"):
        thread.start(0)
    with pytest.raises(ValueError, match="1 to 8 kernels"):
        StepThread([])


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1", "MountainCar-v0"])
def test_split_env_is_the_plain_env_in_two_halves(env_id):
    """Same seed, same actions: every output of every step is the plain env's (the halves
    seed their envs as rows of one batch), and the merged episode statistics are the same."""
    plain = make_env(env_id, 64, impl="native", copy=False, max_episode_steps=40)
    split = SplitNativeVectorEnv(lookup(env_id), 64, copy=False, max_episode_steps=40)
    plain.reset(seed=11)
    split.reset(seed=11)
    rng = np.random.default_rng(1)
    try:
        for step in range(200):
            plain.actions[:] = split.actions[:] = random_actions(plain, rng)
            plain.step_bound()
            if step % 2:
                split.step_bound()
            else:  # the trainer's way: half 0 on the thread, then half 1
                split.start_half(0)
                split.finish_half(0)
                split.start_half(1)
                split.finish_half(1)
            for name in OUTPUTS:
                assert np.array_equal(getattr(plain, name), getattr(split, name)), (step, name)
        ours, theirs = split.drain_episode_stats(), plain.drain_episode_stats()
        assert ours.episodes == theirs.episodes > 64
        assert (ours.return_min, ours.return_max, ours.length_min, ours.length_max) == (
            theirs.return_min,
            theirs.return_max,
            theirs.length_min,
            theirs.length_max,
        )
        assert ours.return_sum == pytest.approx(theirs.return_sum, rel=1e-12)
        # Every episode so far (fewer than the window): the same multiset of returns.
        everything = theirs.episodes
        assert sorted(split.recent_returns(10_000)) == sorted(plain.recent_returns(10_000))
        assert len(split.recent_returns(100)) == 100 <= everything
    finally:
        split.close()


def test_split_env_reports_the_bad_row_and_moves_nothing():
    split = SplitNativeVectorEnv(lookup("CartPole-v1"), 8, copy=False)
    split.reset(seed=0)
    before = split.obs.copy()
    split.actions[:] = 0
    split.actions[6] = 7
    split.start_half(0)
    split.finish_half(0)
    split.start_half(1)
    with pytest.raises(InvalidActionError, match="7"):
        split.finish_half(1)
    assert not np.array_equal(split.obs[:4], before[:4])  # half 0 moved
    assert np.array_equal(split.obs[4:], before[4:])  # half 1 did not
    with pytest.raises(ValueError, match="even num_envs"):
        SplitNativeVectorEnv(lookup("CartPole-v1"), 7)
    split.close()


def test_split_env_state_survives_a_checkpoint_round_trip():
    env = SplitNativeVectorEnv(lookup("Acrobot-v1"), 16, copy=False)
    env.reset(seed=2)
    rng = np.random.default_rng(2)
    for _ in range(30):
        env.actions[:] = random_actions(env, rng)
        env.step_bound()
    saved = capture_env_state(env)
    assert saved["exact"] and "half1.state" in saved["arrays"]
    actions = [random_actions(env, rng) for _ in range(20)]

    def run(target):
        for batch in actions:
            target.actions[:] = batch
            target.step_bound()
        return target.obs.copy()

    expected = run(env)
    other = SplitNativeVectorEnv(lookup("Acrobot-v1"), 16, copy=False)
    restore_env_state(other, saved, reseed=99)
    assert np.array_equal(run(other), expected)
    env.close()
    other.close()


def rollout(overlap: bool, env_id: str = "CartPole-v1"):
    config = load_config(
        None,
        [
            f"env.id={env_id}",
            "env.impl=native",
            "env.num_envs=64",
            "ppo.num_steps=32",
            f"env.overlap={str(overlap).lower()}",
            "train.seed=3",
            "env.max_episode_steps=50",
        ],
    )
    trainer = Trainer(config)
    for _ in range(3):
        next_value = trainer.collect()
    return trainer, next_value


def test_overlapped_rollout_fills_the_storage_exactly_as_the_plain_one():
    """CartPole, no normalisers: the halves draw the same samples in the same order, so
    storage, bootstrapped rewards and next values are bit for bit the plain rollout's."""
    (plain, plain_next), (overlapped, overlapped_next) = rollout(False), rollout(True)
    for name in ("obs", "actions", "logprobs", "values", "rewards", "dones"):
        assert torch.equal(getattr(plain.storage, name), getattr(overlapped.storage, name)), name
    assert torch.equal(plain_next, overlapped_next)
    assert int(plain.storage.dones.sum()) > 64  # episodes ended (and were truncated at 50) in it
    assert overlapped.timer.totals["env"] > 0 and overlapped.timer.totals["forward"] > 0


def test_overlapped_training_learns_cartpole():
    config = load_config(
        None,
        [
            "env.overlap=true",
            "train.total_steps=100_000",
            "train.seed=1",
            "train.publish_metrics=false",
        ],
    )
    trainer = Trainer(config)
    last = trainer.run()
    assert last.global_step >= 98_000
    assert last.episode_return_mean > 150, last.episode_return_mean


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["env.impl=torch"], 'env.overlap = true needs env.impl = "native"'),
        (["env.impl=reference"], 'got "reference"'),
        (["env.num_envs=7"], "env.num_envs must be even, got 7"),
    ],
)
def test_overlap_misconfigured_is_a_one_line_error(tmp_path, overrides, message):
    args = [
        sys.executable,
        "-m",
        "operant.trainer.run.main",
        "--runs-dir",
        str(tmp_path),
        "--set",
        "env.overlap=true",
        *[item for o in overrides for item in ("--set", o)],
    ]
    result = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr

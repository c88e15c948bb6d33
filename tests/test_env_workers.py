"""env.workers: Gymnasium's Python envs stepped in worker processes (operant.envs.workers).

Trajectories and statistics equal the in-process reference impl's; a worker's exception or
death ends the run with an error naming it (never a hang); workers never outlive the
trainer, even after a SIGKILL; native envs refuse workers in one line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from operant.envs import EnvError, InvalidActionError, make_env
from operant.envs.reference import ReferenceVectorEnv
from operant.envs.workers import EnvWorkerError, WorkerVectorEnv, split_rows
from operant.trainer.config import ConfigError, derive, load_config
from operant.trainer.preflight import check_workers

BUFFERS = ("obs", "rewards", "terminated", "truncated")


def _alive(pid: int) -> bool:
    """Running (a zombie, dead but not yet reaped, counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _within(seconds: float, call):
    """call() in a thread; fails (instead of hanging the suite) if it does not return or
    raise within `seconds`. Returns what it raised, or None."""
    outcome: list[BaseException | None] = []

    def target():
        try:
            call()
            outcome.append(None)
        except BaseException as error:
            outcome.append(error)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert outcome, f"still waiting after {seconds} s"
    return outcome[0]


def test_split_rows_is_even_and_covers_every_env():
    assert split_rows(5, 2) == [(0, 3), (3, 5)]
    assert split_rows(4, 4) == [(0, 1), (1, 2), (2, 3), (3, 4)]


@pytest.mark.parametrize(
    "env_id, num_envs, workers, steps",
    [("CartPole-v1", 5, 2, 300), ("Pendulum-v1", 5, 3, 220)],
)
def test_trajectories_and_statistics_equal_the_reference(env_id, num_envs, workers, steps):
    """Whole trajectories (past truncation at 200 steps for Pendulum, many CartPole episodes)
    from seed 7 and the same random actions, buffer for buffer; then a list-of-seeds reset.
    Then a worker killed with SIGKILL is reported, naming it and the signal."""
    reference = ReferenceVectorEnv(env_id, num_envs, copy=False)
    env = make_env(env_id, num_envs, impl="reference", copy=False, workers=workers)
    assert isinstance(env, WorkerVectorEnv) and env.impl == "reference"
    rng = np.random.default_rng(0)
    try:
        for seed in (7, [11 + 3 * i for i in range(num_envs)]):
            np.testing.assert_array_equal(env.reset(seed=seed)[0], reference.reset(seed=seed)[0])
            ended = 0
            for step in range(steps):
                actions = (
                    rng.integers(0, 2, num_envs)
                    if env.discrete
                    else rng.uniform(-2, 2, (num_envs, 1)).astype(np.float32)
                )
                env.actions[:] = actions
                reference.actions[:] = actions
                env.step_bound()
                reference.step_bound()
                for name in BUFFERS:
                    np.testing.assert_array_equal(
                        getattr(env, name), getattr(reference, name), err_msg=f"{name} @ {step}"
                    )
                done = reference.terminated | reference.truncated
                ended += int(done.sum())
                np.testing.assert_array_equal(env.final_obs[done], reference.final_obs[done])
            assert ended >= num_envs  # every env finished an episode at least once
            assert env.drain_episode_stats() == reference.drain_episode_stats()
            np.testing.assert_array_equal(env.recent_returns(50), reference.recent_returns(50))

        victim = env._processes[1]
        os.kill(victim.pid, signal.SIGKILL)
        error = _within(10, env.step_bound)
        assert isinstance(error, EnvWorkerError)
        lo, hi = env.rows[1]
        assert str(error) == (
            f"env worker 1 (pid {victim.pid}, envs {lo}-{hi - 1}) died: "
            "killed by signal 9 (SIGKILL)"
        )
        assert env.closed and all(process.poll() is not None for process in env._processes)
    finally:
        env.close()
        reference.close()


def test_a_worker_exception_is_raised_naming_the_worker():
    """After a refused action (no env moves) and a few steps, env 2 raises in worker 1: the
    error names them, and the env closes the other worker."""
    env = make_env(
        "env_worker_fixtures:CrashingCartPole-v0", 3, impl="reference", copy=False, workers=2
    )
    try:
        env.reset(seed=0)
        before = env.obs.copy()
        env.actions[:] = [0, 2, 1]
        with pytest.raises(InvalidActionError, match="action 2 for env 1 is outside"):
            env.step_bound()
        np.testing.assert_array_equal(env.obs, before)
        obs, rewards, terminated, truncated, info = env.step(np.array([1, 0, 1]))
        assert rewards.tolist() == [1.0, 1.0, 1.0] and obs is env.obs and info == {}
        for _ in range(3):
            env.step_bound()
        error = _within(10, env.step_bound)  # the 5th step
    finally:
        env.close()
    assert isinstance(error, EnvWorkerError)
    pid = env._processes[1].pid
    assert str(error) == f"env worker 1 (pid {pid}, env 2) failed: ValueError: boom at step 5"
    assert [process.returncode for process in env._processes] == [0, 1]


@pytest.mark.parametrize(
    "env_id, message",
    [
        (
            "RewardAsArray-v0",
            "its env 0 returned the reward array([1.]): a reward is one number (shape (), not "
            "(1,))",
        ),
        (
            "ObsTooLong-v0",
            "its env 0 returned an observation of shape (5,) (5 numbers) where its observation "
            "space has 4",
        ),
    ],
)
def test_an_output_of_the_wrong_shape_names_the_field(env_id, message):
    # numpy's "setting an array element with a sequence" named neither the reward nor the env
    env = make_env(f"env_worker_fixtures:{env_id}", 2, impl="reference", workers=2)
    try:
        env.reset(seed=0)
        env.actions[:] = 0
        with pytest.raises(EnvWorkerError) as raised:
            env.step_bound()
    finally:
        env.close()
    assert str(raised.value).startswith("env worker 0 (pid ")
    assert str(raised.value).endswith(f"failed: ValueError: {message}")


BOTH_CRASH = """
import sys
sys.path.insert(0, sys.argv[1])
from operant.envs import make_env
env = make_env("env_worker_fixtures:AllCrashingCartPole-v0", 4, impl="reference", workers=2)
env.reset(seed=0)
try:
    for _ in range(10):
        env.step_bound()
except Exception as error:
    print(type(error).__name__)
env.close()
"""


def test_workers_failing_together_write_whole_tracebacks():
    # each worker's header and traceback in one write: two of them interleaved line by line
    done = subprocess.run(
        [sys.executable, "-c", BOTH_CRASH, os.path.dirname(__file__)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.stdout.strip() == "EnvWorkerError", done.stderr
    lines = done.stderr.splitlines()
    headers = [i for i, line in enumerate(lines) if line.startswith("env worker ")]
    assert headers  # (both, when the second fails before the trainer closes it)
    for header in headers:
        assert lines[header + 1] == "Traceback (most recent call last):"
        end = next(i for i in range(header, len(lines)) if lines[i].startswith("ValueError: "))
        assert not any(line.startswith("env worker ") for line in lines[header + 1 : end])


ORPHAN_PARENT = """
import sys, time
from operant.envs.workers import WorkerVectorEnv
env = WorkerVectorEnv("CartPole-v1", 2, 2)
print(" ".join(str(process.pid) for process in env._processes), flush=True)
time.sleep(60)
"""


def test_workers_die_with_a_killed_trainer():
    parent = subprocess.Popen(
        [sys.executable, "-c", ORPHAN_PARENT], stdout=subprocess.PIPE, text=True
    )
    try:
        pids = [int(pid) for pid in parent.stdout.readline().split()]
        assert len(pids) == 2 and all(_alive(pid) for pid in pids)
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 3
        while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert [pid for pid in pids if _alive(pid)] == []
    finally:
        parent.kill()
        parent.wait()


def test_workers_need_a_python_env():
    with pytest.raises(EnvError, match=r'env.workers = 2 is for Python envs \(env.impl = "ref'):
        make_env("CartPole-v1", 4, impl="native", workers=2)
    config = load_config(overrides=["env.id='Acrobot-v1'", "env.workers=2"])
    with pytest.raises(ConfigError, match=r'Acrobot-v1 with env.impl = "auto" \(resolved to n'):
        check_workers(config, "native")
    check_workers(load_config(overrides=["env.impl='reference'", "env.workers=2"]), "reference")
    # a family's reference impl (the minatar package) steps in the trainer's process
    with pytest.raises(EnvError, match=r"MinAtar-Breakout-v1's reference implementation steps"):
        make_env("MinAtar-Breakout-v1", 4, impl="reference", workers=2)
    with pytest.raises(ConfigError, match="env.workers = 9 is more than env.num_envs = 8"):
        derive(load_config(overrides=["env.num_envs=8", "env.workers=9"]))

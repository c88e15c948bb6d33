"""env.workers: Gymnasium's Python envs stepped in worker processes
(operant.envs.reference.workers).

Trajectories and statistics equal the in-process reference impl's; a worker's exception or
death ends the run with an error naming it (never a hang); workers never outlive the
trainer, even after a SIGKILL; native envs refuse workers in one line."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from operant.envs import EnvError, InvalidActionError, make_env
from operant.envs.reference.vector import ReferenceVectorEnv
from operant.envs.reference.workers import EnvWorkerError, WorkerVectorEnv, split_rows
from operant.trainer.config import ConfigError, derive, load_config
from operant.trainer.run.preflight import check_workers

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


def test_a_worker_that_does_not_answer_within_the_timeout_ends_the_env():
    # a hung Python env step hung the run for good (no deadline on the wait)
    env = make_env(
        "env_worker_fixtures:HangingCartPole-v0", 4, impl="reference", workers=2,
        step_timeout_s=1.0,
    )  # fmt: skip
    try:
        env.reset(seed=0)
        env.actions[:] = 0
        started = time.monotonic()
        error = _within(30, lambda: [env.step_bound() for _ in range(10)])
        waited = time.monotonic() - started
    finally:
        env.close()
    assert isinstance(error, EnvWorkerError)
    pid = env._processes[1].pid
    assert str(error) == (
        f"env worker 1 (pid {pid}, envs 2-3) did not answer within env.step_timeout_s = 1 s "
        "(its env hangs, or needs a longer timeout)"
    )
    assert 1.0 <= waited < 10  # the timeout, and the hung worker killed on close
    assert env._processes[1].returncode == -signal.SIGKILL


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
from operant.envs.reference.workers import WorkerVectorEnv
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


# --- a user's env that raises, in operant-train ------------------------------------------------


def _train(root, env_id: str, *args: str, workers: int = 1) -> subprocess.CompletedProcess:
    """operant-train on a test env of env_worker_fixtures (importable, as a user's module on
    PYTHONPATH is)."""
    from pathlib import Path

    from user_runs import SMALL, run

    tests = str(Path(__file__).resolve().parent)
    path = os.pathsep.join(filter(None, [tests, os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    return run("operant-train", "--env", f"env_worker_fixtures:{env_id}", "--set",
               "env.impl=reference", "--set", f"env.workers={workers}", *SMALL, "--runs-dir",
               str(root), "--quiet", *args, env=env, timeout=120)  # fmt: skip


def test_an_env_that_raises_in_the_trainers_process_fails_the_run_in_one_line(tmp_path):
    # env.workers = 1: the env's traceback, then the summary line a worker's failure gets
    # (it was operant's own 56-line traceback and no line), exit 1, the run marked failed.
    from operant.shared.reader import MetricsReader

    result = _train(tmp_path, "LateCrashingCartPole-v0", "--run-id", "late",
                    "--set", "checkpoint.every_updates=2", "--total-steps", "8192")  # fmt: skip
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1, result.stderr
    assert result.stderr.count("Traceback") == 1 and "operant/trainer" not in result.stderr
    assert lines[-2] == "ValueError: boom at step 100"  # the env's traceback ends so
    checkpoint = tmp_path / "late" / "checkpoints" / "ckpt-000000002.pt"
    assert lines[-1] == (
        "operant-train: training failed: the env LateCrashingCartPole-v0 raised while it was "
        f"stepped: ValueError: boom at step 100; the last good checkpoint is {checkpoint}; once "
        f"the env works, continue with operant-train --resume late --runs-dir {tmp_path}"
    )
    with MetricsReader(tmp_path / "late" / "metrics.bin") as reader:
        snapshot = reader.snapshot()
    assert snapshot.state == "failed" and "boom at step 100" in snapshot.reason


@pytest.mark.parametrize(
    ("env_id", "workers", "what"),
    [
        ("UnbuildableCartPole-v0", 1, "the env UnbuildableCartPole-v0 raised while it was built: "
         "FileNotFoundError: missing ROM file /nope.bin"),
        ("UnreachableCartPole-v0", 1, "the env UnreachableCartPole-v0 raised while it was reset: "
         "ConnectionError: cannot connect to the simulator"),
        ("UnreachableCartPole-v0", 2, "env worker 0 (pid PID, envs 0-3) failed: "
         "ConnectionError: cannot connect to the simulator"),
    ],
)  # fmt: skip
def test_an_env_that_fails_at_start_is_its_traceback_then_one_line(tmp_path, env_id, workers, what):
    # It was operant's traceback (with 2 workers, of EnvWorkerError, whose promise is one line).
    result = _train(tmp_path, env_id, "--run-id", "never", workers=workers)
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode == 1, result.stderr
    assert "operant/trainer" not in result.stderr and "Traceback" in result.stderr
    pid = re.search(r"pid (\d+)", last)
    assert last == (
        f"operant-train: cannot start run never: {what.replace('PID', pid[1] if pid else '')}; "
        "nothing was created; run again once the env works"
    )
    assert not (tmp_path / "never").exists()


def test_an_env_that_fails_when_a_run_resumes_leaves_the_run_and_says_how_to_go_on(
    tmp_path, capsys
):
    from types import SimpleNamespace

    from operant.envs import EnvFailedError
    from operant.trainer.run.console import env_failed_at_start

    try:
        try:
            raise ConnectionError("cannot connect to the simulator")
        except ConnectionError as cause:
            raise EnvFailedError("the env Sim-v0 raised while it was reset: ...") from cause
    except EnvFailedError as error:
        failed = error
    run_dir = tmp_path / "r1"
    resumed = SimpleNamespace(run_id="r1", run_dir=run_dir, root=tmp_path, payload={},
                              restart=False)  # fmt: skip
    env_failed_at_start(resumed, failed)
    err = capsys.readouterr().err
    assert "Traceback" in err and "ConnectionError: cannot connect to the simulator" in err
    assert err.splitlines()[-1] == (
        "operant-train: cannot start run r1: the env Sim-v0 raised while it was reset: ...; the "
        f"run is as it was; once the env works: operant-train --resume r1 --runs-dir {tmp_path}"
    )
    restarted = SimpleNamespace(run_id="r1", run_dir=run_dir, root=tmp_path, payload=None,
                                restart=True)  # fmt: skip
    env_failed_at_start(restarted, failed)
    assert (
        capsys.readouterr()
        .err.splitlines()[-1]
        .endswith(
            "the run is as it was; once the env works, start it again (with the config it started "
            f"with): operant-train --resume auto --run-id r1 --runs-dir {tmp_path}"
        )
    )

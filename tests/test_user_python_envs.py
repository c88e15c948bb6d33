"""A user's own Gymnasium env, named as `module:Id`, through operant-train: a space no policy
acts in is one line and exit 2; its registered reward threshold is what "solved" means; the
number of env workers may change on resume."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from user_runs import command, kill_quietly, run, start_trainer, stop

from operant.trainer.config import Config
from operant.trainer.services.best import env_target

TESTS = Path(__file__).resolve().parent


def with_fixtures() -> dict[str, str]:
    environ = dict(os.environ)
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), environ.get("PYTHONPATH")]))
    return environ


@pytest.mark.parametrize("workers", [1, 2])
def test_an_action_space_no_policy_acts_in_is_one_line(tmp_path, workers):
    # a TypeError traceback and exit 1 before
    result = run(
        "operant-train", "--env", "env_worker_fixtures:TwoKnobs-v0", "--set", "env.impl=reference",
        "--set", f"env.workers={workers}", "--set", "env.num_envs=2",
        "--runs-dir", str(tmp_path), "--total-steps", "512", env=with_fixtures(),
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith("operant-train: TwoKnobs-v0: operant trains Discrete and Box action ")
    assert "got MultiDiscrete([2 3]): map it onto one with a gymnasium.ActionWrapper" in line
    assert not list(tmp_path.iterdir())  # nothing started


def test_a_module_ids_registered_threshold_is_its_target():
    # gymnasium.spec() does not import the module, so the target was None: no verdict at all
    config = Config()
    config.env.id = "env_worker_fixtures:ThresholdCartPole-v0"
    assert env_target(config) == 475.0
    config.env.id = "no_such_module_here:Thing-v0"
    assert env_target(config) is None


def test_env_workers_may_change_on_resume(tmp_path):
    common = ["--runs-dir", str(tmp_path), "--run-id", "w", "--quiet"]
    first = run(
        "operant-train", "--env", "CartPole-v1", "--set", "env.impl=reference",
        "--set", "env.workers=2", "--total-steps", "4096", *common,
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    again = run(
        "operant-train", "--resume", "w", "--set", "env.workers=1", "--total-steps", "8192",
        *common,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr  # refused before: "written with env.workers = 2"
    assert "resumed at update 2" in again.stderr


def test_a_nan_from_the_env_is_named_as_the_cause(tmp_path):
    # The NaN guard named only the parameter ("non-finite values in parameter weights.0"),
    # which points at the optimiser, not at the env that returned the NaN
    result = run(
        "operant-train", "--env", "nan_env:NanAfter40-v0", "--set", "env.impl=reference",
        "--set", "env.num_envs=4", "--set", "ppo.num_steps=16", "--set", "ppo.num_minibatches=2",
        "--runs-dir", str(tmp_path), "--total-steps", "2048", env=with_fixtures(),
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    (line,) = [line for line in result.stderr.splitlines() if "training failed" in line]
    assert "non-finite values in parameter " in line
    assert ": the env returned a non-finite reward in that update's rollout (row " in line
    assert "fix the env, or bound it with a gymnasium wrapper" in line


def test_a_ctrl_c_while_a_slow_env_is_probed_stops_before_anything_starts(tmp_path, monkeypatch):
    # It announced the stop, then started the env's workers, trained an update, and named a
    # `--resume` that the run (no checkpoint) refused
    mark = tmp_path / "building"
    monkeypatch.setenv("SLOW_BUILD_MARK", str(mark))
    monkeypatch.setenv("PYTHONPATH", with_fixtures()["PYTHONPATH"])
    trainer = start_trainer(
        "--env", "env_worker_fixtures:SlowToBuildCartPole-v0", "--set", "env.impl=reference",
        "--set", "env.num_envs=2", "--runs-dir", str(tmp_path / "runs"), "--run-id", "slow",
        "--total-steps", "100000", "--quiet", log=tmp_path / "out",
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not mark.exists():
            assert time.monotonic() < deadline and trainer.poll() is None
            time.sleep(0.02)
        assert stop(trainer, signal.SIGINT) == 0
    finally:
        kill_quietly(trainer.pid)
    lines = (tmp_path / "out").read_text().splitlines()
    assert lines[-1] == (
        "operant-train: stopped by SIGINT before training began; nothing was created"
    )
    assert not (tmp_path / "runs" / "slow").exists()


@pytest.mark.parametrize("workers", [2, 1])
def test_a_hung_env_step_ends_the_run_at_the_step_timeout(tmp_path, workers):
    # (a hung env step hung the run for good: no deadline on the wait; with workers = 1 the
    # timeout was refused: the step runs in the trainer's own process)
    common = [
        "--env", "env_worker_fixtures:StubbornCartPole-v0", "--set", "env.impl=reference",
        "--set", "env.num_envs=4", "--runs-dir", str(tmp_path), "--total-steps", "4096",
    ]  # fmt: skip
    started = time.monotonic()
    result = run(
        "operant-train", *common, "--set", f"env.workers={workers}",
        "--set", "env.step_timeout_s=2", "--run-id", "hung", env=with_fixtures(), timeout=120,
    )  # fmt: skip
    took = time.monotonic() - started
    assert result.returncode == 1, result.stderr
    assert took < 60, took  # it would sleep for an hour
    (line,) = [line for line in result.stderr.splitlines() if "training failed" in line]
    if workers == 2:
        assert "training failed: env worker 0 (pid " in line  # env 1: train.seed 1 + 1 = 2
        assert "did not answer within env.step_timeout_s = 2 s (its env hangs" in line
    else:
        assert "training failed: the env StubbornCartPole-v0 was still in its step after 2." in line
        assert re.search(r"env_worker_fixtures.py:\d+ in step", line), line
        assert "in step, past env.step_timeout_s = 2 s (the env hangs, or needs a longer " in line
    listed = json.loads(run("operant", "runs", "--runs-dir", str(tmp_path), "--json").stdout)
    assert [(entry["run_id"], entry["status"]) for entry in listed] == [("hung", "failed")]


def test_a_step_timeout_is_for_python_envs(tmp_path):
    refused = run(
        "operant-train", "--env", "CartPole-v1", "--set", "env.step_timeout_s=2",
        "--runs-dir", str(tmp_path),
    )  # fmt: skip
    assert refused.returncode == 2
    assert refused.stderr.strip().startswith(
        "operant-train: CartPole-v1 (native) has no option 'step_timeout_s'"
    )
    assert not list(tmp_path.iterdir())


def hung_trainer(tmp_path: Path, env_id: str, workers: int, run_id: str, *extra: str):
    """operant-train on a fixture env that hangs, with a stop grace of 1 s; its output goes
    to tmp_path / "<run_id>.log"."""
    log = tmp_path / f"{run_id}.log"
    words = [
        "operant-train", "--env", f"env_worker_fixtures:{env_id}", "--set", "env.impl=reference",
        "--set", "env.num_envs=4", "--set", f"env.workers={workers}",
        "--set", "env.stop_grace_s=1", "--runs-dir", str(tmp_path), "--run-id", run_id, *extra,
    ]  # fmt: skip
    environ = dict(with_fixtures(), HANG_MARK=str(hang_mark(tmp_path, run_id)))
    trainer = subprocess.Popen(
        command(words), stdout=log.open("w"), stderr=subprocess.STDOUT, env=environ
    )
    return trainer, log


def hang_mark(tmp_path: Path, run_id: str) -> Path:
    """The file the fixture env touches as it begins to hang (env_worker_fixtures)."""
    return tmp_path / f"{run_id}.hang"


def wait_until_hung(trainer: subprocess.Popen, log: Path, mark: Path) -> None:
    """Until the env has begun its hang, and a little past it: the trainer is in there."""
    deadline = time.monotonic() + 60
    while not mark.exists():
        assert time.monotonic() < deadline and trainer.poll() is None, log.read_text()
        time.sleep(0.05)
    time.sleep(0.3)


def term_and_wait(trainer: subprocess.Popen, log: Path) -> tuple[int, float]:
    """SIGTERM to a trainer that is still running; its exit status and the seconds it took."""
    try:
        assert trainer.poll() is None, log.read_text()
        signalled = time.monotonic()
        trainer.send_signal(signal.SIGTERM)
        status = trainer.wait(timeout=60)
        return status, time.monotonic() - signalled
    finally:
        kill_quietly(trainer.pid)
        trainer.wait()


@pytest.mark.parametrize(
    ("workers", "env_id"),
    [(2, "HangingCartPole-v0"), (1, "HangingCartPole-v0"), (1, "StubbornCartPole-v0")],
)
def test_a_stop_signal_does_not_wait_for_a_hung_step_past_the_grace(tmp_path, workers, env_id):
    # (SIGTERM was taken and never acted on: a stop waits for an update boundary, which a
    # hung step never lets come; systemd then waited TimeoutStopSec, 5 minutes, to SIGKILL.
    # In the trainer's own process, workers = 1, the step is interrupted where it sleeps, even
    # in a loop that swallows every Exception.)
    trainer, log = hung_trainer(tmp_path, env_id, workers, "hung", "--total-steps", "4096")
    deadline = time.monotonic() + 60
    while not (tmp_path / "hung" / "metrics.bin").exists():
        assert time.monotonic() < deadline and trainer.poll() is None, log.read_text()
        time.sleep(0.1)
    # its 5th step hangs at once: the first rollout never ends
    wait_until_hung(trainer, log, hang_mark(tmp_path, "hung"))
    status, took = term_and_wait(trainer, log)
    output = log.read_text()
    assert status == 1, output
    assert took < 15, took  # 1 s of grace, a quarter-second's look, the workers' close
    (line,) = [line for line in output.splitlines() if "training failed" in line]
    if workers == 2:
        assert "training failed: env worker 0 (pid " in line
        assert "did not answer within env.stop_grace_s = 1 s of SIGTERM, so the run " in line
        # where it hung, from the worker itself (faulthandler), above the line
        assert "env worker 0 (pid " in output and "does not answer; where it is:" in output
        assert re.search(r'File ".*env_worker_fixtures.py", line \d+ in step', output), output
    else:
        assert f"training failed: the env {env_id} was still in its step after " in line
        assert re.search(r"env_worker_fixtures.py:\d+ in step", line), line
        assert " in step, past env.stop_grace_s = 1 s of SIGTERM (the env hangs" in line
        assert "so the run could not stop at an update boundary" in line
        assert "EnvStepHung" in output and "time.sleep(" in output  # where it hung
    listed = json.loads(run("operant", "runs", "--runs-dir", str(tmp_path), "--json").stdout)
    assert [(entry["run_id"], entry["status"]) for entry in listed] == [("hung", "failed")]


@pytest.mark.parametrize(
    ("workers", "env_id", "doing"),
    [(1, "HangAtInitCartPole-v0", "construction"), (2, "HangAtResetCartPole-v0", "reset")],
)
def test_a_stop_cuts_an_env_that_hangs_before_training_began(tmp_path, workers, env_id, doing):
    # (the preflight's probe and the trainer's build run the env in the trainer's process,
    # before the session: a SIGTERM was announced and then nothing, for good; SIGKILL only)
    trainer, log = hung_trainer(tmp_path, env_id, workers, "start")
    wait_until_hung(trainer, log, hang_mark(tmp_path, "start"))  # imports, then the probe hangs
    status, took = term_and_wait(trainer, log)
    output = log.read_text()
    assert status == 1, output
    assert took < 15, took
    line = output.strip().splitlines()[-1]
    assert line.startswith(
        f"operant-train: cannot start run start: the env {env_id} was still in its {doing} after "
    ), line
    assert (
        "env_worker_fixtures.py:" in line and " in _hang, past env.stop_grace_s = 1 s of " in line
    )
    assert "SIGTERM (the env hangs, or needs a longer grace), so the run could not stop" in line
    assert line.endswith("nothing was created; run again once the env works"), line
    assert not (tmp_path / "start").exists()


@pytest.mark.parametrize("env_id", ["CHangCartPole-v0", "UnkillableCartPole-v0"])
def test_a_step_timeout_ends_a_step_no_exception_ends_with_its_stack(tmp_path, env_id):
    # (no Python code runs while C code holds the GIL, so no handler can interrupt the step;
    # an env may swallow even a BaseException: the run hung for good, and said nothing of
    # where)
    trainer, log = hung_trainer(
        tmp_path, env_id, 1, "c", "--total-steps", "4096", "--set", "env.step_timeout_s=1"
    )
    try:
        status = trainer.wait(timeout=60)
    finally:
        kill_quietly(trainer.pid)
        trainer.wait()
    output = log.read_text()
    assert status == 1, output
    assert "Timeout (0:00:0" in output  # faulthandler's, 1 s + LAST_RESORT_S, the stack below
    assert re.search(r'File ".*env_worker_fixtures.py", line \d+ in step', output), output


def test_an_env_module_in_the_current_folder_is_found(tmp_path):
    # (operant-train is a console script: its sys.path starts with its own folder, and
    # "cannot import 'myenvs' ... install the package that provides it" met a module beside
    # the user, where `python -m` and uvicorn would have found it)
    (tmp_path / "myenvs.py").write_text(
        "import gymnasium\n"
        "gymnasium.register('Mine-v0', entry_point='gymnasium.envs.classic_control:CartPoleEnv',"
        " max_episode_steps=50)\n"
    )
    environ = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    result = subprocess.run(
        command([
            "operant-train", "--env", "myenvs:Mine-v0", "--set", "env.impl=reference",
            "--set", "env.workers=2", "--set", "env.num_envs=4", "--runs-dir", "runs",
            "--run-id", "mine", "--total-steps", "512", "--quiet",
        ]),  # fmt: skip
        cwd=tmp_path, env=environ, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    record = json.loads(
        (tmp_path / "runs" / "mine" / "progress.jsonl").read_text().splitlines()[-1]
    )
    assert record["global_step"] == 512 and record["episode_length_mean"] <= 50
    missing = subprocess.run(
        command(["operant-train", "--env", "nomodule:Mine-v0", "--runs-dir", "runs"]),
        cwd=tmp_path, env=environ, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert missing.returncode == 2
    assert missing.stderr.strip().endswith(
        "install the package that provides it, or start from the folder that holds it (or "
        "name that folder in PYTHONPATH)"
    ), missing.stderr

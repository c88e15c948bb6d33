"""operant sweep end to end: real sweeps of real CartPole runs on SQLite, stopped with SIGTERM,
killed with SIGKILL and continued, and trials that fail; `operant sweep show` and `operant
runs` read what they left. Tiny budgets: each trial trains a few thousand steps."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import msgspec
import pytest
from signal_defaults import default_signals

from operant.monitor import runs_cmd
from operant.shared.runs import resolve_run
from operant.shared.sweeps import read_summary
from operant.trainer.sweep import show
from operant.trainer.sweep.trials import wait_until_free

pytest.importorskip("optuna")

TESTS = Path(__file__).parent


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.toml"
    path.write_text(text)
    return path


def _command(*args: str) -> list[str]:
    return [sys.executable, "-m", "operant", *args]


def _environ() -> dict[str, str]:
    environ = dict(os.environ)
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), environ.get("PYTHONPATH")]))
    return environ


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        _command(*args), capture_output=True, text=True, timeout=120, env=_environ()
    )


def _start(*args: str, log: Path) -> subprocess.Popen:
    with open(log, "w") as out:
        return subprocess.Popen(
            _command(*args), stdout=out, stderr=subprocess.STDOUT, env=_environ()
        )


def _show(runs: Path, name: str, capsys) -> dict:
    """`operant sweep show NAME --json` (in this process: it reads the study, and draws)."""
    assert show.main([name, "--runs-dir", str(runs), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _summary(runs: Path, name: str) -> dict:
    """What the sweep wrote beside its runs (operant runs' and the monitor's source)."""
    summary = read_summary(runs / "sweeps" / name)
    assert summary is not None
    return msgspec.to_builtins(summary)


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "progress.jsonl").read_text().splitlines()]


def _wait_for(path: Path, process: subprocess.Popen, lines: int = 1) -> None:
    deadline = time.monotonic() + 60
    while not (path.exists() and path.read_text().count("\n") >= lines):
        assert process.poll() is None, "the sweep ended before its trial trained"
        assert time.monotonic() < deadline
        time.sleep(0.02)


BASIC = """
[sweep]
name = "basic"
confirm = 0
n_trials = 4
sampler_seed = 3
pruner = "none"
[sweep.params]
"ppo.learning_rate" = { log_uniform = [1e-3, 1e-2] }
"ppo.update_epochs" = { int = [1, 3] }
[env]
num_envs = 32
[train]
total_steps = 4096
"""


def test_trials_are_runs_and_the_leaderboard_says_their_values(tmp_path: Path, capsys) -> None:
    runs = tmp_path / "runs"
    result = _run("sweep", str(_write(tmp_path, BASIC)), "--runs-dir", str(runs), "--workers", "2")
    assert result.returncode == 0, result.stderr
    shown = _show(runs, "basic", capsys)
    assert (shown["complete"], shown["pruned"], shown["failed"]) == (4, 0, 0)
    assert sorted(row["number"] for row in shown["trials"]) == [0, 1, 2, 3]
    directory = runs / "sweeps" / "basic"
    for row in shown["trials"]:
        (run_id,) = row["run_ids"]
        run_dir = directory / run_id
        assert {"metrics.bin", "progress.jsonl", "best.pt", "run.json"} <= {
            p.name for p in run_dir.iterdir()
        }
        assert list((run_dir / "checkpoints").iterdir())
        config = json.loads((run_dir / "run.json").read_text())["config"]
        assert config["ppo"]["learning_rate"] == row["params"]["ppo.learning_rate"]
        assert config["ppo"]["update_epochs"] == row["params"]["ppo.update_epochs"]
        assert config["train"]["torch_threads"] == max(1, (os.cpu_count() or 1) // 2)
        assert config["train"]["target_return"] == 475.0  # CartPole-v1's threshold, the target
        records = _records(run_dir)
        solved = [r["elapsed_s"] for r in records if r.get("solved")]
        expected = solved[0] if solved else 2 * records[-1]["elapsed_s"]
        assert row["value"] == pytest.approx(expected)
    best = min(shown["trials"], key=lambda row: row["value"])
    assert shown["best"]["number"] == best["number"]
    # confirm = 0: no confirmation, the best is the best trial's own value, as before it was
    assert all(row["confirm_of"] is None and row["confirmed"] is None for row in shown["trials"])
    assert (shown["confirm"], shown["confirmed"]) == (0, 0)
    assert f"best time_to_target {best['value']:.4g} (trial {best['number']})" in result.stdout
    assert "confirm" not in result.stdout
    assert (directory / "history.png").stat().st_size > 0  # written by show
    assert _summary(runs, "basic")["trials"] == shown["trials"]
    assert runs_cmd.main(["--runs-dir", str(runs)]) == 0
    listing = capsys.readouterr().out
    assert "sweep basic: time_to_target (minimize); 4 complete, 0 pruned, 0 failed of 4" in listing
    assert listing.count("basic-t000") == 4 and listing.count("finished") == 4
    # a trial is named by its run id alone, as any run (operant monitor RUN_ID)
    assert resolve_run(runs, best["run_ids"][0]) == directory / best["run_ids"][0]


def test_a_pruned_sweep_stores_only_the_points_its_pruner_decides_at(tmp_path: Path) -> None:
    """Hyperband on a 0.005 s grid: each trial's values in the study are at Hyperband's rungs
    (2, 4, 8, 16, ... points) and at the last point its run passed, nothing between (a point is
    a write to the storage and a read back: operant.trainer.sweep.pruning)."""
    import optuna

    text = (
        BASIC.replace('pruner = "none"', 'pruner = "hyperband"')
        .replace("[sweep.params]", "[sweep.objective]\nreport_every_s = 0.005\n[sweep.params]")
        .replace("total_steps = 4096", "total_steps = 60_000")
    )
    runs = tmp_path / "runs"
    result = _run("sweep", str(_write(tmp_path, text)), "--runs-dir", str(runs))
    assert result.returncode == 0, result.stderr
    directory = runs / "sweeps" / "basic"
    study = optuna.load_study(study_name="basic", storage=f"sqlite:///{directory / 'study.db'}")
    rungs = {2 * 2**k for k in range(12)}
    assert len(study.trials) == 4, study.trials
    for trial in study.trials:
        records = _records(directory / trial.user_attrs["run_ids"][0])
        passed = int(records[-1]["elapsed_s"] / 0.005 + 1e-9)
        steps = sorted(trial.intermediate_values)
        if trial.state.name == "COMPLETE":
            assert steps[-1] == passed  # its last point, which Hyperband reads its budget from
        assert set(steps[:-1]) <= rungs and len(steps) <= 1 + sum(r <= passed for r in rungs)


LONG = """
[sweep]
name = "long"
confirm = 0
n_trials = {n_trials}
sampler_seed = 5
pruner = "none"
[sweep.objective]
metric = "final_return"
[sweep.params]
"ppo.learning_rate" = {{ log_uniform = [1e-3, 1e-2] }}
[env]
num_envs = 8
[ppo]
num_minibatches = 2
[train]
total_steps = {total_steps}
"""


def test_a_killed_sweep_continues_its_trial_from_the_checkpoint(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    sweep = _write(tmp_path, LONG.format(n_trials=1, total_steps=250_000))
    first = _start("sweep", str(sweep), "--runs-dir", str(runs), log=tmp_path / "first.log")
    run_dir = runs / "sweeps" / "long" / "long-t0000-s1"
    _wait_for(run_dir / "progress.jsonl", first, lines=3)
    first.send_signal(signal.SIGKILL)
    first.wait()
    # The trial's trainer outlives its sweep only to stop with a checkpoint (parent-death
    # signal): the run is left whole, to be continued.
    log = runs / "sweeps" / "long" / "logs" / "long-t0000-s1.log"
    deadline = time.monotonic() + 60
    while "stopped by SIGTERM" not in log.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert list((run_dir / "checkpoints").glob("ckpt-*.pt"))
    killed_at = _records(run_dir)[-1]["global_step"]
    again = _run("sweep", str(sweep), "--runs-dir", str(runs))
    assert again.returncode == 0, again.stderr
    shown = _summary(runs, "long")
    states = {row["number"]: row["state"] for row in shown["trials"]}
    assert states == {0: "interrupted", 1: "complete"}
    assert shown["complete"] == 1 and shown["n_trials"] == 1
    assert shown["trials"][1]["run_ids"] == ["long-t0000-s1"]  # the same run, continued
    assert shown["trials"][0]["reason"] == "its sweep process ended while it ran"
    resumes = json.loads((run_dir / "run.json").read_text())["resumes"]
    assert len(resumes) == 1 and resumes[0]["update"] > 0
    records = _records(run_dir)
    assert records[-1]["global_step"] >= 250_000 > killed_at
    assert [r["update"] for r in records] == list(range(1, len(records) + 1))
    assert shown["trials"][1]["value"] == records[-1]["episode_return_mean"]


def test_sigterm_stops_every_trial_with_a_checkpoint(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    sweep = _write(tmp_path, LONG.format(n_trials=2, total_steps=250_000))
    process = _start(
        "sweep", str(sweep), "--runs-dir", str(runs), "--workers", "2", log=tmp_path / "log"
    )
    directory = runs / "sweeps" / "long"
    for number in (0, 1):
        _wait_for(directory / f"long-t000{number}-s1" / "progress.jsonl", process, lines=2)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == 0
    said = (tmp_path / "log").read_text()
    assert "stopped by SIGTERM; 2 trial(s) stopped with a checkpoint" in said
    shown = _summary(runs, "long")
    assert [(row["state"], row["reason"]) for row in shown["trials"]] == [
        ("interrupted", "stopped by SIGTERM")
    ] * 2
    for number in (0, 1):
        assert list((directory / f"long-t000{number}-s1" / "checkpoints").glob("ckpt-*.pt"))


def _gone(pgid: int, deadline_s: float = 30.0) -> bool:
    """Wait until no process of the group `pgid` is left (False at the deadline)."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_stop_signal_to_the_sweeps_process_group_interrupts_its_trial(
    tmp_path: Path, signum: signal.Signals
) -> None:
    """What systemd's KillMode=control-group, a closed terminal or `kill -TERM -PGID` do:
    the signal reaches the sweep, its fork server and its trial's run at once. The fork
    server used to die of it, and the run's exit status then read 255: the trial was
    recorded failed, and the same command did not run it again. (The continuation is
    checked after SIGTERM only: the study holds the same state after either signal, and a
    sweep's start costs seconds.)"""
    runs, name = tmp_path / "runs", signum.name
    sweep = _write(tmp_path, LONG.format(n_trials=1, total_steps=100_000))
    command = _command("sweep", str(sweep), "--runs-dir", str(runs))
    with open(tmp_path / "log", "w") as out:
        process = subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=_environ(),
            start_new_session=True,  # its own group: the signal below reaches only the sweep's
            preexec_fn=default_signals,
        )
    run_dir = runs / "sweeps" / "long" / "long-t0000-s1"
    _wait_for(run_dir / "progress.jsonl", process, lines=2)
    os.killpg(process.pid, signum)
    assert process.wait(timeout=60) == 0
    assert _gone(process.pid), "a process of the sweep outlived it"  # its fork server, a run
    said = (tmp_path / "log").read_text()
    assert f"stopped by {name}; 1 trial(s) stopped with a checkpoint" in said, said
    shown = _summary(runs, "long")
    assert [(r["number"], r["state"], r["reason"]) for r in shown["trials"]] == [
        (0, "interrupted", f"stopped by {name}")
    ]
    assert shown["failed"] == 0 and shown["complete"] == 0
    log = (runs / "sweeps" / "long" / "logs" / "long-t0000-s1.log").read_text()
    assert "stopped by SIGTERM at step" in log  # the sweep's own stop, taken by the trainer
    assert list((run_dir / "checkpoints").glob("ckpt-*.pt"))
    if signum == signal.SIGTERM:
        _continued(command, runs, run_dir, stopped_at=_records(run_dir)[-1]["global_step"])


def _continued(command: list[str], runs: Path, run_dir: Path, stopped_at: int) -> None:
    """The same command again: the interrupted trial is queued again and its run continued
    from its checkpoint to the end of its budget; the study counts one trial."""
    again = subprocess.run(command, capture_output=True, text=True, timeout=120, env=_environ())
    assert again.returncode == 0, again.stderr
    shown = _summary(runs, "long")
    assert [(r["number"], r["state"]) for r in shown["trials"]] == [
        (0, "interrupted"),
        (1, "complete"),
    ]
    assert (shown["n_trials"], shown["complete"], shown["failed"]) == (1, 1, 0)
    assert shown["trials"][1]["run_ids"] == ["long-t0000-s1"]  # the same run, continued
    assert len(json.loads((run_dir / "run.json").read_text())["resumes"]) == 1
    records = _records(run_dir)
    assert records[-1]["global_step"] >= 100_000 > stopped_at
    assert [r["update"] for r in records] == list(range(1, len(records) + 1))


def test_a_failing_trial_is_recorded_with_its_reason_and_the_sweep_goes_on(tmp_path: Path) -> None:
    text = """
[sweep]
name = "nan"
n_trials = 2
pruner = "none"
[sweep.objective]
metric = "final_return"
[sweep.params]
"env.id" = { categorical = ["nan_env:NanAfter40-v0"] }
"ppo.learning_rate" = { log_uniform = [1e-3, 1e-2] }
[env]
impl = "reference"
num_envs = 4
[ppo]
num_minibatches = 2
[train]
total_steps = 1024
"""
    runs = tmp_path / "runs"
    result = _run("sweep", str(_write(tmp_path, text)), "--runs-dir", str(runs))
    assert result.returncode == 0, result.stderr
    shown = _summary(runs, "nan")
    assert [row["state"] for row in shown["trials"]] == ["failed", "failed"]
    assert shown["failed"] == 2 and shown["best"] is None
    for row in shown["trials"]:
        assert "non-finite" in row["reason"] and row["run_ids"][0] in row["reason"]
    assert result.stdout.count("failed: run nan-t000") == 2


# BASIC, confirming its best 2 trials on 2 fresh seeds each; trials train seed 7.
CONFIRM = BASIC.replace('"basic"\nconfirm = 0', '"confirm"\nconfirm = 2\nconfirm_seeds = 2')
CONFIRM = CONFIRM.replace("[train]\n", "[train]\nseed = 7\n")


def _value(run_dir: Path) -> float:
    """A run's time_to_target, from its records."""
    records = _records(run_dir)
    solved = [r["elapsed_s"] for r in records if r.get("solved")]
    return solved[0] if solved else 2 * records[-1]["elapsed_s"]


def test_the_best_trials_are_confirmed_on_fresh_seeds(tmp_path: Path, capsys) -> None:
    """After n_trials, the best `confirm` trials each train `confirm_seeds` runs on seeds no
    trial used; the sweep's best is the best confirmed median, and best.toml is its config."""
    runs = tmp_path / "runs"
    sweep = _write(tmp_path, CONFIRM)
    result = _run("sweep", str(sweep), "--runs-dir", str(runs), "--workers", "2")
    assert result.returncode == 0, result.stderr
    assert show.main(["confirm", "--runs-dir", str(runs), "--json", "--no-plots"]) == 0
    shown = json.loads(capsys.readouterr().out)
    directory = runs / "sweeps" / "confirm"
    trials = [row for row in shown["trials"] if row["confirm_of"] is None]
    checks = [row for row in shown["trials"] if row["confirm_of"] is not None]
    assert (shown["n_trials"], shown["complete"], shown["confirmed"]) == (4, 4, 2)
    assert sorted(row["number"] for row in trials) == [0, 1, 2, 3]
    top = sorted(trials, key=lambda row: row["value"])[:2]
    assert sorted(row["confirm_of"] for row in checks) == sorted(row["number"] for row in top)
    seeds = {row["number"]: row for row in trials}
    for row in trials:
        (run_id,) = row["run_ids"]
        assert (
            json.loads((directory / run_id / "run.json").read_text())["config"]["train"]["seed"]
            == 7
        )
    for row in checks:
        trial = seeds[row["confirm_of"]]
        assert row["state"] == "complete" and row["params"] == trial["params"]
        base = trial["run_ids"][0].removesuffix("-s7")
        assert row["run_ids"] == [f"{base}-s8", f"{base}-s9"]  # seeds no trial used
        for run_id, seed in zip(row["run_ids"], (8, 9)):
            config = json.loads((directory / run_id / "run.json").read_text())["config"]
            assert config["train"]["seed"] == seed
        values = [_value(directory / run_id) for run_id in row["run_ids"]]
        assert row["value"] == pytest.approx(sum(values) / 2)  # the median of two
        assert trial["confirmed"] == row["value"]
    best = min(top, key=lambda row: seeds[row["number"]]["confirmed"])
    assert shown["best"]["number"] == best["number"]
    assert shown["best"]["confirmed"] == best["confirmed"]
    said = f"best time_to_target {best['confirmed']:.4g} on 2 fresh seeds (trial {best['number']};"
    assert said in result.stdout and "4 complete, 0 pruned, 0 failed of 4, 2 confirmed" in (
        result.stdout
    )
    written = tomllib.loads((directory / "best.toml").read_text())
    assert written["ppo"]["learning_rate"] == best["params"]["ppo.learning_rate"]
    assert written["ppo"]["update_epochs"] == best["params"]["ppo.update_epochs"]
    assert written["train"]["target_return"] == 475.0
    # the same command again: nothing left to run, no run trained again
    again = _run("sweep", str(sweep), "--runs-dir", str(runs), "--workers", "2")
    assert again.returncode == 0, again.stderr
    assert not [line for line in again.stdout.splitlines() if line.startswith("trial ")]
    assert len(_summary(runs, "confirm")["trials"]) == 6


# Two trials, one learning rate that solves and one that cannot; confirmed one at a time.
STOP = """
[sweep]
name = "stop"
n_trials = 2
sampler_seed = 0
pruner = "median"
confirm = 2
confirm_seeds = 3
[sweep.params]
"ppo.learning_rate" = { categorical = [0.01, 1e-7] }
[env]
num_envs = 32
[train]
total_steps = 300_000
"""


def test_a_confirmation_that_can_no_longer_win_stops(tmp_path: Path) -> None:
    """With one worker the solving trial is confirmed first (its median on seeds 2-4 is the
    best confirmed value); the other's first run trains its whole budget without solving,
    and its second is stopped once it trains past that median: two of its three runs are
    then above it, so its median is. Its third seed never runs."""
    runs = tmp_path / "runs"
    result = _run("sweep", str(_write(tmp_path, STOP)), "--runs-dir", str(runs))
    assert result.returncode == 0, result.stderr
    shown = _summary(runs, "stop")
    own = [row for row in shown["trials"] if row["confirm_of"] is None]
    trials = {row["params"]["ppo.learning_rate"]: row for row in own}
    assert len(trials) == 2, "the sampler drew one learning rate twice"
    checks = {row["confirm_of"]: row for row in shown["trials"] if row["confirm_of"] is not None}
    good, bad = checks[trials[0.01]["number"]], checks[trials[1e-7]["number"]]
    directory = runs / "sweeps" / "stop"
    best = good["value"]
    assert good["state"] == "complete" and (shown["confirmed"], shown["confirm_stopped"]) == (1, 1)
    assert shown["best"]["number"] == trials[0.01]["number"] and shown["best"]["confirmed"] == best
    assert bad["state"] == "pruned"
    assert bad["reason"] == (
        f"stopped in its run 2 of 3: its median can no longer beat the best confirmed {best:.4g}"
    )
    first, second, third = (directory / run_id for run_id in bad["run_ids"])
    assert _value(first) > best and not any(r.get("solved") for r in _records(first))
    assert _records(second)[-1]["elapsed_s"] > best and not third.exists()
    assert "1 confirmed (1 stopped: they could not beat the best)" in result.stdout


def test_a_killed_confirmation_keeps_its_finished_runs(tmp_path: Path) -> None:
    """A sweep killed while it confirms: the next run of the command continues the
    confirmation, its first seed's finished run kept as it was, its second's continued."""
    runs = tmp_path / "runs"
    text = LONG.format(n_trials=1, total_steps=200_000).replace(
        "confirm = 0", "confirm = 1\nconfirm_seeds = 2"
    )
    sweep = _write(tmp_path, text)
    first = _start("sweep", str(sweep), "--runs-dir", str(runs), log=tmp_path / "first.log")
    directory = runs / "sweeps" / "long"
    done, running = directory / "long-t0000-s2", directory / "long-t0000-s3"
    _wait_for(running / "progress.jsonl", first, lines=2)
    first.send_signal(signal.SIGKILL)
    first.wait()
    kept = (done / "progress.jsonl").read_bytes()
    wait_until_free(running)
    again = _run("sweep", str(sweep), "--runs-dir", str(runs))
    assert again.returncode == 0, again.stderr
    shown = _summary(runs, "long")
    assert [(r["number"], r["state"], r["confirm_of"]) for r in shown["trials"]] == [
        (0, "complete", None),
        (1, "interrupted", 0),
        (2, "complete", 0),
    ]
    assert (shown["complete"], shown["confirmed"], shown["n_trials"]) == (1, 1, 1)
    assert (done / "progress.jsonl").read_bytes() == kept  # not trained again
    assert "resumes" not in json.loads((done / "run.json").read_text())
    assert len(json.loads((running / "run.json").read_text())["resumes"]) == 1
    values = [_records(run_dir)[-1]["episode_return_mean"] for run_dir in (done, running)]
    assert shown["trials"][2]["value"] == pytest.approx(sum(values) / 2)
    assert shown["best"]["confirmed"] == shown["trials"][2]["value"]

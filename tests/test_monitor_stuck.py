"""A trainer that lives but no longer trains reads as stuck, from the real commands.

A user's Python env whose step hangs (env.impl=reference, the step in the trainer's own
process) leaves the trainer's heartbeat fresh, its own thread beating it: every reader said
`running`, `heartbeat 0.2 s ago`, for ever. Readers now say for how long no update came
(operant.shared.progress): `operant monitor --json/--once`, `operant runs` and `--json`, the
interactive monitor's source and banner, and the exporter. The runs here are real trainers
on real hung envs (tests/env_worker_fixtures.py), read through their real metrics files."""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

import pytest
from user_runs import ENDLESS, SMALL, kill_quietly, run, start_trainer, stop, wait_for_updates

from operant.monitor import format as mfmt
from operant.monitor.exporter import render
from operant.monitor.exporter_metrics import RunsCollector
from operant.monitor.source import ReaderSource
from operant.monitor.widgets import describe_status, title_text
from operant.shared import progress

TESTS = Path(__file__).resolve().parent
HUNG = ["--set", "env.impl=reference", *SMALL, *ENDLESS]
# Short enough to keep the test quick, far beyond any pause of a healthy run's tiny updates.
STUCK_AFTER_S = 3.0


def with_fixtures(monkeypatch: pytest.MonkeyPatch) -> None:
    """Trainers started from here find tests/env_worker_fixtures.py's envs (`module:Id`)."""
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))
    )


def monitor_json(root: Path, run_id: str, *extra: str) -> dict:
    result = run("operant", "monitor", run_id, "--runs-dir", str(root), "--json", *extra)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def wait_stuck(root: Path, run_id: str, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while not (root / run_id / "metrics.bin").exists():
        assert time.monotonic() < deadline, f"{run_id} has no metrics file"
        time.sleep(0.1)
    while True:
        document = monitor_json(root, run_id, "--stuck-after", str(STUCK_AFTER_S))
        if document["stuck"]:
            return document
        assert time.monotonic() < deadline, f"{run_id} never read as stuck: {document}"
        time.sleep(0.5)


def test_a_hung_env_step_reads_as_stuck_and_a_healthy_run_does_not(tmp_path, monkeypatch):
    with_fixtures(monkeypatch)
    root = tmp_path / "runs"
    hung = start_trainer(
        "--env", "env_worker_fixtures:LateHangingCartPole-v0", *HUNG,
        "--runs-dir", str(root), "--run-id", "hung", log=tmp_path / "hung.log",
    )  # fmt: skip
    healthy = start_trainer(
        "--env", "CartPole-v1", *SMALL, *ENDLESS, "--runs-dir", str(root), "--run-id", "healthy",
        log=tmp_path / "healthy.log",
    )  # fmt: skip
    try:
        wait_for_updates(root / "hung", 3)
        wait_for_updates(root / "healthy", 3)
        # The default limit: a minute at least; no hung run of a few seconds is stuck yet.
        fresh = monitor_json(root, "hung")
        assert fresh["status"] == "running" and fresh["stuck"] is False
        assert fresh["stuck_after_s"] == progress.STUCK_FLOOR_S
        assert fresh["update_age_s"] < progress.STUCK_FLOOR_S

        document = wait_stuck(root, "hung")
        # Running, its heartbeat fresh, three updates and no fourth: the hang is in update 4.
        assert document["status"] == "running"
        assert document["heartbeat_age_s"] < 2.0
        assert document["metrics"]["updates"] == 3
        assert document["first_update"] is False
        assert document["stuck_after_s"] == STUCK_AFTER_S
        assert document["update_age_s"] > STUCK_AFTER_S
        assert 0 < document["update_s"] < STUCK_AFTER_S
        last_update = document["metrics"]["last_update_unix_s"]
        assert abs(time.time() - last_update - document["update_age_s"]) < 2.0

        once = run("operant", "monitor", "hung", "--runs-dir", str(root), "--once",
                   "--stuck-after", str(STUCK_AFTER_S))  # fmt: skip
        assert once.returncode == 0, once.stderr
        status, stuck_line = once.stdout.splitlines()[1:3]
        assert status.startswith("status  running, no update for ")
        assert "(updates took up to " in status and ": pid " in status
        assert stuck_line.startswith(
            "stuck   the trainer lives (its heartbeat goes on) but finished no update for "
        )
        assert "over the 3s this run allows (--stuck-after): a hung env step?" in stuck_line

        listed = run("operant", "runs", "--runs-dir", str(root), "--json",
                     "--stuck-after", str(STUCK_AFTER_S))  # fmt: skip
        assert listed.returncode == 0, listed.stderr
        rows = {row["run_id"]: row for row in json.loads(listed.stdout)}
        assert rows["hung"]["status"] == "running" and rows["hung"]["stuck"] is True
        assert rows["hung"]["update_age_s"] > STUCK_AFTER_S
        assert rows["healthy"]["status"] == "running" and rows["healthy"]["stuck"] is False
        assert rows["healthy"]["update_age_s"] < STUCK_AFTER_S
        assert rows["healthy"]["stuck_after_s"] == STUCK_AFTER_S

        table = run("operant", "runs", "--runs-dir", str(root), "--stuck-after",
                    str(STUCK_AFTER_S)).stdout.splitlines()  # fmt: skip
        (hung_line,) = [line for line in table if line.startswith("hung ")]
        (healthy_line,) = [line for line in table if line.startswith("healthy ")]
        assert "running, no update for " in hung_line
        assert "running" in healthy_line and "no update" not in healthy_line

        healthy_once = run("operant", "monitor", "healthy", "--runs-dir", str(root), "--once",
                           "--stuck-after", str(STUCK_AFTER_S))  # fmt: skip
        assert healthy_once.stdout.splitlines()[1].startswith("status  running: pid ")
        assert "no update" not in healthy_once.stdout

        # The interactive monitor's data and words.
        source = ReaderSource(root, "hung", stuck_after_s=STUCK_AFTER_S)
        view = source.poll()
        source.stop()
        assert view.progress is not None and view.progress.stuck
        severity, sentence = describe_status(view)
        assert severity == "warning"
        assert sentence.startswith("STUCK: no update for ")
        assert "though its heartbeat goes on" in sentence
        assert ", no update for " in title_text(view, paused=False).plain

        # The exporter: each rank's update age beside its heartbeat's.
        scrape = render(RunsCollector(root, 600), True).decode()
        ages = {
            line.split('run="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1])
            for line in scrape.splitlines()
            if line.startswith("operant_run_update_age_seconds{")
        }
        assert ages["hung"] > STUCK_AFTER_S and ages["healthy"] < STUCK_AFTER_S
        assert "operant_last_update_timestamp_seconds{" in scrape
    finally:
        kill_quietly(hung.pid)
        hung.wait(timeout=60)
    assert stop(healthy) == 0
    # Ended: nothing is said of updates any more.
    ended = monitor_json(root, "healthy", "--stuck-after", "0.001")
    assert ended["status"] == "finished"
    assert ended["stuck"] is False and ended["update_age_s"] is None


def test_a_step_that_hangs_before_the_first_update_counts_from_the_start(tmp_path, monkeypatch):
    with_fixtures(monkeypatch)
    root = tmp_path / "runs"
    trainer = start_trainer(
        "--env", "env_worker_fixtures:HangingCartPole-v0", *HUNG,
        "--runs-dir", str(root), "--run-id", "early", log=tmp_path / "early.log",
    )  # fmt: skip
    try:
        document = wait_stuck(root, "early")
        assert document["status"] == "running" and document["metrics"]["updates"] == 0
        assert document["first_update"] is True and document["update_s"] is None
        assert math.isnan(document["metrics"]["last_update_unix_s"] or math.nan)
        # Since the trainer created its file: no more than the run's age.
        assert STUCK_AFTER_S < document["update_age_s"] <= time.time() - document["created_unix_s"]
        default = monitor_json(root, "early")
        assert default["stuck"] is False
        assert default["stuck_after_s"] == progress.FIRST_UPDATE_FLOOR_S
        once = run("operant", "monitor", "early", "--runs-dir", str(root), "--once",
                   "--stuck-after", str(STUCK_AFTER_S))  # fmt: skip
        assert "no update for " in once.stdout and "(none since it started)" in once.stdout
    finally:
        kill_quietly(trainer.pid)
        trainer.wait(timeout=60)


@pytest.mark.parametrize("text", ["0", "-3", "nan", "inf", "soon"])
@pytest.mark.parametrize("command", [["monitor", "--once"], ["runs"]])
def test_stuck_after_takes_a_positive_number_of_seconds(tmp_path, command, text):
    result = run("operant", *command, "--runs-dir", str(tmp_path), "--stuck-after", text)
    assert result.returncode == 2
    prog = "operant " + command[0]
    assert result.stderr == (
        f"{prog}: argument --stuck-after: {text!r} is not a positive number of seconds "
        f"(see {prog} --help)\n"
    )


def test_what_an_update_takes_is_the_longest_of_the_recent_ones():
    # elapsed_s of consecutive records: update 2 took 1 s, update 3 took 4 s, update 4 2 s
    assert progress.recent_update_s([5.0, 6.0, 10.0, 12.0], first_index=0) == 4.0
    # only the newest RECENT_UPDATES count: a slow update long ago is forgotten
    elapsed = [0.0, 100.0, *(100.0 + step for step in range(1, 12))]
    assert progress.recent_update_s(elapsed, first_index=0) == 1.0
    # one record: the first update's own time, if it is the first
    assert progress.recent_update_s([7.5], first_index=0) == 7.5
    assert progress.recent_update_s([7.5], first_index=3) is None
    assert progress.recent_update_s([], first_index=0) is None
    assert progress.stuck_after(False, None) == progress.STUCK_FLOOR_S
    assert progress.stuck_after(False, 30.0) == 300.0
    assert progress.stuck_after(True, 1.0) == progress.FIRST_UPDATE_FLOOR_S


def test_the_words_for_a_stuck_run():
    stuck = progress.Progress(update_age_s=192.4, update_s=2.1, stuck_after_s=60.0, stuck=True)
    assert mfmt.no_update_text(stuck) == "no update for 3m12s (updates took up to 2.10 s)"
    assert mfmt.no_update_text(stuck, detail=False) == "no update for 3m12s"
    first = progress.Progress(update_age_s=301.0, first_update=True, stuck=True)
    assert mfmt.no_update_text(first) == "no update for 5m01s (none since it started)"
    assert mfmt.no_update_text(progress.Progress(update_age_s=5.0, stuck_after_s=60.0)) == ""

"""What a session tells its user (issue 14, item 4): SIGUSR1's checkpoint is said in one line
naming it; after --resume, the monitor's uptime continues from the run's earlier time, as the
record's elapsed_s does, instead of restarting from 0."""

from __future__ import annotations

import math
import re
import signal
import time

import pytest
from user_runs import ENDLESS, SMALL, run, start_trainer, stop, wait_for_updates

from operant.monitor.source import ReaderSource, RunView, run_uptime
from operant.monitor.widgets import describe_status
from operant.shared.reader import MetricsReader


def test_sigusr1_names_its_checkpoint(tmp_path):
    root, log = tmp_path / "runs", tmp_path / "log.txt"
    trainer = start_trainer(
        "--runs-dir", str(root), "--run-id", "usr1", *SMALL, *ENDLESS, "--quiet", log=log
    )
    try:
        wait_for_updates(root / "usr1", 3)
        trainer.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 60
        while "SIGUSR1" not in log.read_text():
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
    finally:
        stop(trainer)
    (line,) = [line for line in log.read_text().splitlines() if "SIGUSR1" in line]
    match = re.fullmatch(
        r"operant-train: SIGUSR1: checkpoint (\S+/ckpt-(\d+)\.pt) "
        r"\(update (\d+), step ([\d,]+)\)",
        line,
    )
    assert match, line
    path, file_update, update, step = match.groups()
    assert int(file_update) == int(update) and int(step.replace(",", "")) == int(update) * 256
    assert (root / "usr1" / "checkpoints" / path.rsplit("/", 1)[1]).exists()


@pytest.mark.parametrize(
    "status, expected",
    [
        ("running", 100.0 - 40.0 + 12.5),
        ("stalled", 100.0 - 40.0 + 12.5),
        ("finished", 90.0 - 40.0 + 12.5),
    ],
)
def test_uptime_adds_the_time_trained_before_this_trainer(status, expected):
    assert run_uptime(status, 100.0, 40.0, 90.0, 12.5) == expected
    # A file of an older trainer has no such gauge (or NaN): this trainer's time alone.
    assert run_uptime(status, 100.0, 40.0, 90.0, math.nan) == expected - 12.5
    assert run_uptime(status, 100.0, 40.0, 90.0, None) == expected - 12.5


def test_the_monitors_uptime_agrees_with_elapsed_after_a_resume(tmp_path):
    root = tmp_path / "runs"
    first = run(
        "operant-train",
        "--runs-dir",
        str(root),
        "--run-id",
        "long",
        "--total-steps",
        str(60 * 2048),
        "--quiet",
        timeout=240,
    )
    assert first.returncode == 0, first.stderr
    resumed = run(
        "operant-train",
        "--resume",
        "long",
        "--runs-dir",
        str(root),
        "--total-steps",
        str(64 * 2048),
        "--quiet",
        timeout=240,
    )
    assert resumed.returncode == 0, resumed.stderr
    with MetricsReader(root / "long" / "metrics.bin") as reader:
        metrics = reader.snapshot().metrics()
    assert metrics["elapsed_before_s"] > 0
    source = ReaderSource(root, "long")
    try:
        view = source.poll()
    finally:
        source.stop()
    elapsed = view.metrics["elapsed_s"]
    assert elapsed > metrics["elapsed_before_s"]
    # This process's start-up (before its clock ran) is all that uptime may add.
    assert elapsed <= view.uptime_s <= elapsed + 10, (view.uptime_s, elapsed)


def test_the_monitor_shows_the_trainers_warning_in_its_banner():
    text = (
        "checkpoint of update 40 not written: No space left on device (52.0 KiB free in "
        "/runs/p/checkpoints, about 157.1 KiB needed); training goes on"
    )
    view = RunView(
        run_id="p", run_dir="/runs/p", status="running", state="running", metrics={"warning": text}
    )
    assert describe_status(view) == ("warning", f"Warning: {text}.")
    cleared = RunView(
        run_id="p", run_dir="/runs/p", status="running", state="running", metrics={"warning": ""}
    )
    assert describe_status(cleared) == ("", "")

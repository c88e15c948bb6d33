"""The README's first command, `operant-train` with the default config, as a newcomer sees it:
in a real terminal (a tmux pane) one status line redrawn in place and never wrapped, then the
verdict; into a file, a progress line a second at most, then the verdict."""

import json
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

from tmux_fixtures import Tmux

from operant.trainer.services.status_line import ERASE_LINE, MAX_REDRAWS_PER_S

TRAIN = str(Path(sys.executable).with_name("operant-train"))
COLUMNS = 60


def last_record(run_dir: Path) -> dict:
    return json.loads((run_dir / "progress.jsonl").read_text().splitlines()[-1])


def piped(raw: Path, timeout_s: float = 20.0) -> str:
    """What pipe-pane wrote into `raw`, once it holds the pane's exit line."""
    deadline = time.monotonic() + timeout_s
    while "MONITOR-EXIT=" not in (text := raw.read_bytes().decode()):
        assert time.monotonic() < deadline, f"pipe-pane wrote only:\n{text!r}"
        time.sleep(0.05)
    return text


def test_a_terminal_shows_one_status_line_redrawn_in_place(tmp_path):
    raw, go = tmp_path / "pane.raw", tmp_path / "go"
    # Waits for `go`, so that pipe-pane records every byte the trainer writes to the pane.
    wait = f"while [ ! -e {go} ]; do sleep 0.05; done"
    command = [wait, ";", TRAIN, "--runs-dir", shlex.quote(str(tmp_path / "runs"))]
    pane = Tmux(command, size=(COLUMNS, 40))
    try:
        pane.tmux("pipe-pane", "-t", "monitor", "-o", f"cat >> {shlex.quote(str(raw))}")
        go.touch()
        screen = pane.until("MONITOR-EXIT=", timeout_s=120)
        joined = pane.tmux("capture-pane", "-p", "-J", "-t", "monitor")
        written = piped(raw)
    finally:
        pane.close()
    assert "MONITOR-EXIT=0" in screen
    (run_dir,) = (tmp_path / "runs").glob("cartpole-v1-*")
    record = last_record(run_dir)
    total = record["global_step"]
    # The pane holds the line once, in its last state, whole: a wrapped line would be two
    # rows of the screen and one of the joined capture.
    status = [row for row in screen.splitlines() if row.startswith("step ")]
    assert status == [row for row in joined.splitlines() if row.startswith("step ")]
    assert status == [
        f"step {total:,}/{total:,} (100%)  return {record['episode_return_mean']:.1f}  ETA 0:00"
    ]
    rows = joined.splitlines()
    at = rows.index(status[0])
    assert rows[at - 1].startswith("run cartpole-v1-")  # the run's first line, above it
    assert rows[at + 1].startswith(f"done: {total:,} steps in ")  # the verdict, below it
    assert rows[at + 2].startswith("solved at ") and rows[at + 3].startswith("best mean return")
    # What the trainer wrote: the line redrawn in place (erased, never a new line) at most
    # ten times a second, each draw narrower than the pane, one newline at its end.
    drawn = written[written.index(ERASE_LINE) : written.index("done: ")]
    draws = drawn.split(ERASE_LINE)[1:]
    assert draws[-1] == status[0] + "\r\n"  # the last one ends the line
    assert "\n" not in "".join(draws[:-1])
    assert all(len(draw.rstrip("\r\n")) < COLUMNS for draw in draws)
    assert 2 <= len(draws) <= MAX_REDRAWS_PER_S * record["elapsed_s"] + 2
    steps = [int(re.match(r"step ([\d,]+)/", draw)[1].replace(",", "")) for draw in draws]
    assert steps == sorted(steps) and steps[0] < total  # it moved


def test_a_file_gets_a_progress_line_a_second_at_most_then_the_verdict(tmp_path):
    started = time.monotonic()
    with open(tmp_path / "out", "w") as out:
        done = subprocess.run(
            [TRAIN, "--runs-dir", str(tmp_path / "runs"), "--total-steps", "1000000"],
            stdout=out, stderr=subprocess.PIPE, text=True, timeout=180,
        )  # fmt: skip
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    (run_dir,) = (tmp_path / "runs").glob("cartpole-v1-*")
    record = last_record(run_dir)
    lines = (tmp_path / "out").read_text().splitlines()
    progress = [line for line in lines if line.startswith("update ")]
    assert lines[0].startswith("run cartpole-v1-") and lines[1 : 1 + len(progress)] == progress
    # A line a second at most, of the whole run's time; one for each second trained.
    assert int(record["elapsed_s"]) - 1 <= len(progress) <= took
    seconds = [float(re.search(r" t ([\d.]+)s$", line)[1]) for line in progress]
    assert all(later - earlier >= 0.9 for earlier, later in zip(seconds, seconds[1:]))
    assert lines[1 + len(progress)].startswith(f"done: {record['global_step']:,} steps in ")
    assert [line.split()[0] for line in lines[2 + len(progress) :]] == ["solved", "best"]

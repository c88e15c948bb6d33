"""`operant runs`: every run under the runs root with its status, steps, SPS and age.

A run stopped early on request (SIGTERM, Ctrl-C) shows as `interrupted`; `--json` keeps the
documented status (`finished`) and says `"interrupted": true`, as `operant monitor --json`.

Reads each run's metrics file read-only; a run whose file is missing or unreadable is listed
with status `unknown` and the reason, so one bad run never hides the others.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import msgspec

from operant.monitor.cli import format_age, format_value
from operant.shared.reader import MetricsFileError, MetricsReader, shown_status
from operant.shared.runs import METRICS_FILE, list_run_dirs, runs_root

PROG = "operant runs"
STATUS_UNKNOWN = "unknown"


class RunRow(msgspec.Struct, kw_only=True):
    """One line of the listing; `--json` prints a list of these."""

    run_id: str
    env_id: str = ""
    status: str = STATUS_UNKNOWN
    """As `operant monitor --json` says it: running, finished, failed, crashed, stalled."""
    interrupted: bool = False
    """Finished early on request (SIGTERM, Ctrl-C): the table shows it as `interrupted`."""
    global_step: int | None = None
    sps: float | None = None
    episode_return_mean: float | None = None
    age_s: float | None = None
    """Since the run was created."""
    heartbeat_age_s: float | None = None
    path: str = ""
    error: str = ""
    """Why the status is unknown."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="List training runs with their status, steps and SPS.")
    parser.add_argument("--runs-dir", metavar="DIR",
                        help="runs root (default: $OPERANT_RUNS_DIR, else "
                             "$XDG_STATE_HOME/operant/runs)")
    parser.add_argument("--json", action="store_true", help="print a JSON list of runs")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    root = runs_root(args.runs_dir)
    if args.runs_dir and not root.is_dir():
        what = "a file" if root.exists() else "not there"
        print(f"{PROG}: --runs-dir {root} is {what}, not a directory of runs; pass the runs "
              "root operant-train used", file=sys.stderr)
        return 2
    try:
        rows = [describe_run(run_dir) for run_dir in list_run_dirs(root)]
    except OSError as error:
        print(f"{PROG}: cannot list {root} ({error.strerror})", file=sys.stderr)
        return 2
    if args.json:
        sys.stdout.write(msgspec.json.encode(rows).decode() + "\n")
        return 0
    if not rows:
        print(f"{PROG}: no runs under {root} (start one with operant-train, or pass "
              "--runs-dir)", file=sys.stderr)
        return 0
    print(render_table(rows))
    return 0


def describe_run(run_dir: Path) -> RunRow:
    path = run_dir / METRICS_FILE
    row = RunRow(run_id=run_dir.name, path=str(path))
    if not path.exists():
        row.error = "no metrics file yet"
        try:
            row.age_s = max(0.0, time.time() - run_dir.stat().st_mtime)
        except OSError:
            row.error = "removed while listing"
        return row
    try:
        with MetricsReader(path) as reader:
            snapshot = reader.snapshot()
    except MetricsFileError as error:
        row.error = str(error)
        return row
    metrics = snapshot.metrics()
    row.env_id = snapshot.env_id
    row.status = snapshot.status
    row.interrupted = snapshot.interrupted
    row.global_step = _number(metrics.get("global_step"), int)
    row.sps = _number(metrics.get("sps"), float)
    row.episode_return_mean = _number(metrics.get("episode_return_mean"), float)
    row.age_s = max(0.0, time.time() - snapshot.created_wall_ns / 1e9)
    row.heartbeat_age_s = snapshot.heartbeat_age_s
    return row


def _number(value: object, kind: type) -> int | float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return kind(value)
    return None


def _format_rate(sps: float | None) -> str:
    return "-" if sps is None or not math.isfinite(sps) else f"{sps:,.0f}"


def render_table(rows: list[RunRow]) -> str:
    header = ("RUN ID", "ENV", "STATUS", "STEPS", "SPS", "AGE")
    cells = [header] + [
        (row.run_id, row.env_id or "-", shown_status(row.status, row.interrupted),
         format_value(row.global_step),
         _format_rate(row.sps),
         format_age(row.age_s if row.age_s is not None else -1.0))
        for row in rows
    ]
    widths = [max(len(line[column]) for line in cells) for column in range(len(header))]
    right = {3, 4, 5}
    lines = ["  ".join(cell.rjust(width) if column in right else cell.ljust(width)
                       for column, (cell, width) in enumerate(zip(line, widths))).rstrip()
             for line in cells]
    notes = [f"{row.run_id}: {row.error}" for row in rows if row.error]
    return "\n".join(lines + ([""] + notes if notes else []))

"""`operant runs`: every run under the runs root with its status, steps, SPS, age and ranks.

A run trained by several processes is one row: its steps and SPS summed over its ranks, its
status the worst rank's, naming it (`crashed (rank 1)`), and RANKS the number of processes.

A run stopped early on request (SIGTERM, Ctrl-C) shows as `interrupted`; `--json` keeps the
documented status (`finished`) and says `"interrupted": true`, as `operant monitor --json`.

A running run whose trainer lives (fresh heartbeat) but finishes no update, a hung env step,
shows as `running, no update for 3m12s` (operant.shared.progress; `--stuck-after SECONDS`
sets the limit); `--json` keeps `running` and says `"stuck": true` with `update_age_s`.

A sweep's trials (operant sweep) follow the other runs, a table per sweep under a line with
its objective, its trials' states and its best value; `--json` lists them too, each with
`sweep` naming its sweep.

The rows come from operant.monitor.listing (a run whose metrics file is missing or unreadable
is listed with status `unknown` and the reason); this module prints them as a table or JSON.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import msgspec

from operant.monitor.cli import format_age, format_value
from operant.monitor.format import no_update_text
from operant.monitor.listing import RunRow, list_runs, listed_sps, row_progress
from operant.shared.cli_parser import OneLineParser, add_stuck_after
from operant.shared.ranks import status_text
from operant.shared.reader import STATUS_RUNNING, shown_status
from operant.shared.runs import runs_root
from operant.shared.sweeps import describe, read_summary, sweep_dir

PROG = "operant runs"


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=PROG, description="List training runs with their status, steps and SPS."
    )
    parser.add_argument(
        "--runs-dir",
        metavar="DIR",
        help="runs root (default: $OPERANT_RUNS_DIR, else $XDG_STATE_HOME/operant/runs)",
    )
    parser.add_argument("--json", action="store_true", help="print a JSON list of runs")
    add_stuck_after(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    root = runs_root(args.runs_dir)
    if args.runs_dir and not root.is_dir():
        what = "a file" if root.exists() else "not there"
        print(
            f"{PROG}: --runs-dir {root} is {what}, not a directory of runs; pass the runs "
            "root operant-train used",
            file=sys.stderr,
        )
        return 2
    try:
        rows = list_runs(root, stuck_after_s=args.stuck_after)
    except OSError as error:
        print(f"{PROG}: cannot list {root} ({error.strerror})", file=sys.stderr)
        return 2
    if args.json:
        sys.stdout.write(msgspec.json.encode(rows).decode() + "\n")
        return 0
    if not rows:
        print(
            f"{PROG}: no runs under {root} (start one with operant-train, or pass --runs-dir)",
            file=sys.stderr,
        )
        return 0
    blocks = [render_table(own)] if (own := [row for row in rows if not row.sweep]) else []
    for name in dict.fromkeys(row.sweep for row in rows if row.sweep):
        trials = render_table([row for row in rows if row.sweep == name])
        blocks.append(f"{sweep_heading(sweep_dir(root, name), rows)}\n{trials}")
    print("\n\n".join(blocks))
    return 0


def sweep_heading(directory: Path, rows: list[RunRow]) -> str:
    """The line of the sweep in `directory` (operant.shared.sweeps.describe): its summary,
    and how many of its trials among `rows` are running now."""
    name = directory.name
    summary = read_summary(directory)
    running = sum(row.sweep == name and row.status == STATUS_RUNNING for row in rows)
    line = describe(summary, running) if summary is not None else f"sweep {name}"
    return f"{line} (operant sweep show {name})"


def _format_rate(sps: float | None) -> str:
    return "-" if sps is None or not math.isfinite(sps) else f"{sps:,.0f}"


def listed_status(row: RunRow) -> str:
    """The status a listing shows people: `interrupted`, the ranks that make it, and for a
    stuck run how long no update came (`running, no update for 3m12s`)."""
    status = status_text(
        shown_status(row.status, row.interrupted), row.status_ranks, row.unread_ranks
    )
    stuck = no_update_text(row_progress(row), detail=False)
    return f"{status}, {stuck}" if stuck else status


def render_table(rows: list[RunRow]) -> str:
    header = ("RUN ID", "ENV", "STATUS", "STEPS", "SPS", "AGE", "RANKS")
    cells = [header] + [
        (
            row.run_id,
            row.env_id or "-",
            listed_status(row),
            format_value(row.global_step),
            _format_rate(listed_sps(row)),
            format_age(row.age_s if row.age_s is not None else -1.0),
            str(row.world_size),
        )
        for row in rows
    ]
    widths = [max(len(line[column]) for line in cells) for column in range(len(header))]
    right = {3, 4, 5, 6}
    lines = [
        "  ".join(
            cell.rjust(width) if column in right else cell.ljust(width)
            for column, (cell, width) in enumerate(zip(line, widths))
        ).rstrip()
        for line in cells
    ]
    notes = [f"{row.run_id}: {row.error}" for row in rows if row.error]
    return "\n".join(lines + ([""] + notes if notes else []))

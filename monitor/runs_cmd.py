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
is listed with status `unknown` and the reason), their table from operant.monitor.format (the
app's run picker shares its words); this module prints them as a table or JSON.
"""

from __future__ import annotations

import argparse
import sys

import msgspec

from operant.monitor.format import runs_table, sweep_heading
from operant.monitor.listing import list_runs
from operant.shared.cli_parser import OneLineParser, add_stuck_after
from operant.shared.runs import runs_root
from operant.shared.sweeps import read_summary, sweep_dir

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
    blocks = [runs_table(own)] if (own := [row for row in rows if not row.sweep]) else []
    for name in dict.fromkeys(row.sweep for row in rows if row.sweep):
        trials = runs_table([row for row in rows if row.sweep == name])
        heading = sweep_heading(name, read_summary(sweep_dir(root, name)), rows)
        blocks.append(f"{heading}\n{trials}")
    print("\n\n".join(blocks))
    return 0

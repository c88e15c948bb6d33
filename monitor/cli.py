"""`operant monitor`: one run's live state from its metrics file.

`--once` prints one human snapshot, `--json` one JSON document for scripts and servers (its
first keys, `run_id`, `status` and CONTRACT_METRICS, are a contract: docs/architecture.md,
"Interfaces users rely on"). Without them it starts the interactive
Textual view (operant.monitor.app), imported only then: this module stays import-light (no
torch, no numpy, no Textual) so the headless paths start fast.
"""

from __future__ import annotations

import argparse
import base64
import os
import sys
import time
from pathlib import Path

import msgspec

from operant.monitor.format import (
    clock_time,
    duration,
    format_age,
    format_value,
    no_update_text,
    rank_table,
)
from operant.shared import frame as frames
from operant.shared import metrics_layout as fmt
from operant.shared import progress
from operant.shared.cli_parser import OneLineParser, add_stuck_after
from operant.shared.progress import Progress
from operant.shared.ranks import RunReader, RunSnapshot, status_text
from operant.shared.reader import Frame, MetricsFileError, Snapshot
from operant.shared.record import UNIX_TIME
from operant.shared.runs import (
    LATEST_NAME,
    RunNotFoundError,
    root_problem,
    runs_root,
)
from operant.shared.sweeps import resolve_newest

PROG = "operant monitor"
# Top-level keys of `--json` besides the run's own metrics, which also appear under "metrics".
CONTRACT_METRICS = ("global_step", "sps", "episode_return_mean")
# Set by `textual serve` for the process it runs: the view goes to a browser, not a terminal.
WEB_DRIVER_ENV = "TEXTUAL_DRIVER"


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=PROG, description="Watch a training run: its status, counters, gauges and losses."
    )
    parser.add_argument(
        "run",
        nargs="?",
        metavar="RUN_ID",
        help="the run to show (see `operant runs`); default: the latest",
    )
    parser.add_argument("--latest", action="store_true", help="show the most recent run")
    parser.add_argument(
        "--runs-dir",
        metavar="DIR",
        help="runs root (default: $OPERANT_RUNS_DIR, else $XDG_STATE_HOME/operant/runs)",
    )
    parser.add_argument(
        "--once", action="store_true", help="print one snapshot and exit instead of watching"
    )
    parser.add_argument(
        "--json", action="store_true", help="print one JSON document (implies --once)"
    )
    parser.add_argument(
        "--follow", action="store_true", help="with --latest: switch to a newer run when one starts"
    )
    parser.add_argument(
        "--refresh",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="how often the interactive view reads the run (default: 1)",
    )
    add_stuck_after(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    if args.run and args.latest:
        return _error("give a RUN_ID or --latest, not both")
    if args.run == LATEST_NAME:  # `operant monitor latest` is --latest, as `operant eval latest`
        args.run, args.latest = None, True
    if args.follow and (args.once or args.json):
        return _error(
            "--follow keeps the live view on the newest run; --once and --json read one "
            "snapshot: drop --follow (or --once/--json)"
        )
    _take_run_directory(args)
    if not (args.once or args.json):
        return interactive(args)
    root = runs_root(args.runs_dir)
    try:
        run_dir = resolve_newest(root, args.run)
    except RunNotFoundError as error:
        return _error(str(error))
    try:
        with RunReader(run_dir) as reader:
            run = reader.read()
            schema = reader.schema
            advance = progress.read_progress(reader, run, stuck_after_s=args.stuck_after)
    except MetricsFileError as error:
        return _error(f"{error} (run {run_dir.name})")
    if args.json:
        document = json_document(run.total, schema, run, run_id=run_dir.name, advance=advance)
        sys.stdout.write(msgspec.json.encode(document).decode() + "\n")
    else:
        print(human_report(run.total, schema, run_dir, run, advance))
    return 0


def _take_run_directory(args: argparse.Namespace) -> None:
    """A run directory given as RUN_ID (`runs/cp1/`, from tab completion; `operant eval`
    takes one too) is its run id under its parent as the runs root."""
    run = args.run
    if run and ("/" in run or run in (".", "..")) and os.path.isdir(run):
        path = Path(run).resolve()
        args.run, args.runs_dir = path.name, str(path.parent)


def interactive(args: argparse.Namespace) -> int:
    """The Textual view. Everything a user can get wrong is checked before Textual is
    imported, so a typo fails in milliseconds with one line."""
    if args.follow and args.run:
        return _error("--follow follows the latest run: use it with --latest, not a RUN_ID")
    if not 0.05 <= args.refresh <= 3600:
        return _error(f"--refresh {args.refresh:g}: give a number of seconds from 0.05 to 3600")
    root = runs_root(args.runs_dir)
    try:
        run_dir: Path | None = resolve_newest(root, args.run)
    except RunNotFoundError as error:
        # --follow on a root with no run yet (the monitor opened before the first run is
        # started, in a pane beside it) waits for one; a root that cannot hold runs cannot
        if not (args.follow and root_problem(root) is None):
            return _error(str(error))
        run_dir = None
    if not sys.stdout.isatty() and WEB_DRIVER_ENV not in os.environ:
        print(
            f"{PROG}: the interactive view needs a terminal; use --once or --json for scripts",
            file=sys.stderr,
        )
        return 2
    # Here, not at the top, so --once and --json never load Textual; no cycle needs it (the
    # app imports no command module: tests/test_monitor_isolation.py).
    from operant.monitor.app import run_app

    watched = None if args.follow or run_dir is None else run_dir.name
    return run_app(
        root, watched, follow=args.follow, refresh_s=args.refresh, stuck_after_s=args.stuck_after
    )


def _error(message: str) -> int:
    """Bad input (a run, a runs root or a file that is not there or not readable): one line,
    exit status 2, as every operant command."""
    print(f"{PROG}: {message}", file=sys.stderr)
    return 2


def json_document(
    snapshot: Snapshot,
    schema: fmt.Schema,
    run: RunSnapshot | None = None,
    run_id: str | None = None,
    advance: Progress | None = None,
) -> dict[str, object]:
    """The `--json` document: the contract keys first (null when the run does not publish
    them), then the run's state (with `advance`'s `update_age_s`, `first_update`, `update_s`,
    `stuck_after_s` and `stuck`: whether it still trains, operant.shared.progress; null and
    false for a run that has ended), then every metric by name, then `world_size`,
    `status_ranks` (the ranks that make the status crashed, failed or stalled),
    `unread_ranks` (those whose file could not be read: the totals are the others') and `ranks`
    (one object per rank: a single process is rank 0 of 1), then `frame`: a pixel run's
    latest frame (`frame_document`), null for other runs. A run of several ranks is one
    run here: its keys hold the ranks' values combined (operant.shared.ranks.RULES). NaN and
    infinities become null. `run_id`: the run's directory name, what commands take (a copied
    or renamed run's differs from the id its trainer wrote into the file)."""
    metrics = snapshot.metrics()
    document: dict[str, object] = {
        "run_id": run_id or snapshot.run_id,
        "status": snapshot.status,
    }
    for name in CONTRACT_METRICS:
        document[name] = metrics.get(name)
    document.update(
        env_id=snapshot.env_id,
        state=snapshot.state,
        interrupted=snapshot.interrupted,
        reason=snapshot.reason,
        pid=snapshot.pid,
        hostname=snapshot.hostname,
        created_unix_s=snapshot.created_wall_ns / 1e9,
        heartbeat_age_s=snapshot.heartbeat_age_s,
        heartbeat_interval_s=snapshot.heartbeat_interval_s,
        **msgspec.structs.asdict(advance or Progress()),
        history_head=snapshot.history_head,
        format_version=snapshot.format_version,
        path=snapshot.path,
        metrics=metrics,
        units={name: unit for name, unit in units(schema).items() if unit},
    )
    if run is not None:
        document.update(
            world_size=run.world_size,
            status_ranks=list(run.status_ranks),
            unread_ranks=list(run.unread_ranks),
            ranks=[msgspec.to_builtins(row) for row in run.ranks],
        )
    document["frame"] = None if snapshot.frame is None else frame_document(snapshot.frame)
    return document


def frame_document(frame: Frame) -> dict[str, object]:
    """`--json`'s `frame`: the frame whole (`data`: its C*H*W bytes, C order, base64) and as
    the monitor draws it (`cells`: H rows of W channel numbers, the highest set channel of
    each square, -1 for none), with what it needs to be read: shape, dtype, channel names
    and colours, and the update and step it was published at."""
    return {
        "env": frame.env,
        "updates": frame.updates,
        "global_step": frame.global_step,
        "shape": list(frame.shape),
        "dtype": frame.dtype,
        "channels": list(frame.channels),
        "colors": list(frame.colors),
        "data": base64.b64encode(frame.data).decode("ascii"),
        "cells": frames.cells(frame.data, frame.shape),
    }


def frame_lines(frame: Frame) -> list[str]:
    """`--once`'s frame: a title, one character per square (the channel's key, `.` for
    none), and a legend of the keys."""
    channels, height, width = frame.shape
    lines = [
        f"frame   env {frame.env} at update {frame.updates:,} (step {frame.global_step:,}): "
        f"{height} x {width}, {channels} channels"
    ]
    lines += [f"  {row}" for row in frames.text_rows(frames.cells(frame.data, frame.shape))]
    legend = [
        f"{frames.key(channel)} {name or f'channel {channel}'}"
        for channel, name in enumerate(frame.channels)
    ]
    line = " "
    for item in [f"{frames.EMPTY_KEY} none", *legend]:
        if len(line) + 2 + len(item) > LEGEND_WIDTH and line.strip():
            lines.append(line)
            line = " "
        line += " " + item if line == " " else "  " + item
    return lines + [line]


LEGEND_WIDTH = 78


def units(schema: fmt.Schema) -> dict[str, str]:
    found = {metric.name: metric.unit for metric in schema.metrics}
    found.update((field.name, field.unit) for field in schema.snapshot)
    return found


def human_report(
    snapshot: Snapshot,
    schema: fmt.Schema,
    run_dir: Path,
    run: RunSnapshot | None = None,
    advance: Progress | None = None,
) -> str:
    """`--once`: the run's status (a stuck run's says for how long no update came: `advance`),
    reason and every metric but empty texts; a pixel run's latest frame; a run of several
    ranks adds a table of its ranks below."""
    distributed = run is not None and run.world_size > 1
    status = (
        status_text(snapshot.status, run.status_ranks, run.unread_ranks) if run else snapshot.status
    )
    if snapshot.interrupted:
        status += " (interrupted)"
    stuck = no_update_text(advance) if advance is not None else ""
    if stuck:
        status += ", " + stuck
    if run is not None and distributed:
        nodes = ", ".join(dict.fromkeys(row.node for row in run.ranks if row.node)) or "?"
        where = f"{run.world_size} ranks on {nodes}"
    else:
        where = f"pid {snapshot.pid} on {snapshot.hostname or '?'}"
    lines = [
        f"run     {run_dir.name}  {snapshot.env_id}".rstrip(),
        f"status  {status}: {where}, heartbeat "
        f"{snapshot.heartbeat_age_s:.1f} s ago (every {snapshot.heartbeat_interval_s:g} s), "
        f"started {format_age(time.time() - snapshot.created_wall_ns / 1e9)} ago",
    ]
    if stuck and advance is not None:
        where = f" py-spy dump --pid {snapshot.pid} shows where it waits" if snapshot.pid else ""
        lines.append(
            "stuck   the trainer lives (its heartbeat goes on) but finished no update for "
            f"{duration(advance.update_age_s)}, over the {duration(advance.stuck_after_s)} "
            f"this run allows (--stuck-after): a hung env step?{where}"
        )
    if snapshot.reason:
        lines.append(f"reason  {snapshot.reason}")
    lines.append(f"dir     {run_dir}")
    # An empty text (the `warning` of a run that has none) is a name with nothing after it.
    metrics = {name: value for name, value in snapshot.metrics().items() if value != ""}
    unit_of = units(schema)
    if metrics:
        width = max(len(name) for name in metrics)
        lines.append("")
        for name, value in metrics.items():
            unit = unit_of.get(name, "")
            if unit == UNIX_TIME:  # a moment: its time of day, not 1.76e+09
                value, unit = clock_time(value), ""
            lines.append(f"  {name:<{width}}  {format_value(value):>14} {unit}".rstrip())
    if snapshot.snapshot is None and schema.snapshot:
        lines.append("  (the snapshot block could not be read whole: writer died mid-publish?)")
    if snapshot.frame is not None:
        lines += ["", *frame_lines(snapshot.frame)]
    if run is not None and distributed:
        lines += ["", *rank_table(run.ranks)]
    return "\n".join(lines)

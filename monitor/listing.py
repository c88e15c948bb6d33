"""Every run under a runs root with its status, steps, SPS and age: the rows `operant runs`
prints and the monitor's run picker shows.

The data layer both of them read (no formatting, no command line). Each run's metrics file is
opened read-only; a run whose file is missing or unreadable gets status `unknown` and the
reason, so one bad run never hides the others.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import msgspec

from operant.shared import runs
from operant.shared.progress import Progress, read_progress
from operant.shared.ranks import RunReader
from operant.shared.reader import MetricsFileError, shown_sps
from operant.shared.runs import list_run_dirs, metrics_files
from operant.shared.sweeps import list_sweep_dirs

STATUS_UNKNOWN = "unknown"
_Number = TypeVar("_Number", int, float)


class RunRow(msgspec.Struct, kw_only=True):
    """One run of the listing; `operant runs --json` prints a list of these."""

    run_id: str
    env_id: str = ""
    status: str = STATUS_UNKNOWN
    """As `operant monitor --json` says it: running, finished, failed, crashed, stalled."""
    interrupted: bool = False
    """Finished early on request (SIGTERM, Ctrl-C): the table shows it as `interrupted`."""
    global_step: int | None = None
    sps: float | None = None
    """The last update's steps/s, as `operant monitor --json`'s `sps`."""
    sps_mean: float | None = None
    """Steps/s over the run (`sps_mean`, what its summary line says)."""
    episode_return_mean: float | None = None
    age_s: float | None = None
    """Since the run was created."""
    heartbeat_age_s: float | None = None
    path: str = ""
    error: str = ""
    """Why the status is unknown."""
    world_size: int = 1
    """How many processes (ranks) train the run; its steps and SPS are their sums."""
    status_ranks: tuple[int, ...] = ()
    """The ranks that make a distributed run failed, crashed or stalled."""
    unread_ranks: tuple[int, ...] = ()
    """The ranks whose file could not be read: the steps and SPS are the others' alone."""
    update_age_s: float | None = None
    """Seconds since the trainer's last update (before its first: since it started); None
    for an ended run or an older trainer's file (operant.shared.progress, as `operant monitor
    --json`'s)."""
    first_update: bool = False
    update_s: float | None = None
    """The longest of the run's recent updates, seconds."""
    stuck_after_s: float | None = None
    stuck: bool = False
    """Running with a live heartbeat, but no update for longer than `stuck_after_s`: the
    table's status says `running, no update for 3m12s`."""
    sweep: str = ""
    """The sweep whose trial this run is (`RUNS_ROOT/sweeps/NAME/`, operant sweep), or ''."""


def listed_sps(row: RunRow) -> float | None:
    """The steps/s a listing shows people (operant.shared.reader.shown_sps): an ended run's
    mean, a running run's last update's."""
    return shown_sps({"sps": row.sps, "sps_mean": row.sps_mean}, row.status)


def list_runs(root: Path, *, stuck_after_s: float | None = None) -> list[RunRow]:
    """A row for every run under `root`, oldest first, then each sweep's trials (by sweep
    name, `sweep` set); OSError when `root` cannot be listed. `stuck_after_s`: when a running
    run is stuck (default: operant.shared.progress's)."""
    rows = [describe_run(run_dir, stuck_after_s=stuck_after_s) for run_dir in list_run_dirs(root)]
    for directory in list_sweep_dirs(root):
        for run_dir in list_run_dirs(directory):
            if (run_dir / runs.RUN_FILE).is_file():  # a run, not the sweep's logs
                row = describe_run(run_dir, stuck_after_s=stuck_after_s)
                row.sweep = directory.name
                rows.append(row)
    return rows


def describe_run(run_dir: Path, *, stuck_after_s: float | None = None) -> RunRow:
    """The row of one run directory, read from its metrics file (or its ranks' files, as one
    run: operant.shared.ranks) when there is one."""
    files = metrics_files(run_dir)
    path = files[0] if len(files) == 1 else files[0].parent
    row = RunRow(run_id=run_dir.name, path=str(path))
    if not files[0].exists():
        row.error = "no metrics file yet"
        try:
            row.age_s = max(0.0, time.time() - run_dir.stat().st_mtime)
        except OSError:
            row.error = "removed while listing"
        return row
    try:
        with RunReader(run_dir) as reader:
            run = reader.read()
            advance = read_progress(reader, run, stuck_after_s=stuck_after_s)
    except MetricsFileError as error:
        row.error = str(error)
        return row
    snapshot = run.total
    row.world_size = run.world_size
    row.status_ranks = run.status_ranks
    row.unread_ranks = run.unread_ranks
    metrics = snapshot.metrics()
    row.env_id = snapshot.env_id
    row.status = snapshot.status
    row.interrupted = snapshot.interrupted
    row.global_step = _number(metrics.get("global_step"), int)
    row.sps = _number(metrics.get("sps"), float)
    row.sps_mean = _number(metrics.get("sps_mean"), float)
    row.episode_return_mean = _number(metrics.get("episode_return_mean"), float)
    # since the run started, not since this process's metrics file (a resume's is new)
    started = runs.started_at(run_dir) or snapshot.created_wall_ns / 1e9
    row.age_s = max(0.0, time.time() - started)
    row.heartbeat_age_s = snapshot.heartbeat_age_s
    for name in Progress.__struct_fields__:  # the row's fields of the same names
        setattr(row, name, getattr(advance, name))
    return row


def row_progress(row: RunRow) -> Progress:
    """The row's progress fields as operant.shared.progress's Progress (for its texts)."""
    return Progress(**{name: getattr(row, name) for name in Progress.__struct_fields__})


def _number(value: object, kind: Callable[[float], _Number]) -> _Number | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return kind(value)
    return None

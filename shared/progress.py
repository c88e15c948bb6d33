"""Whether a running run still trains: how long ago its trainer last finished an update,
against how long its updates take.

A run's heartbeat says that its trainer's process lives (a native thread beats it, through
any update however long); it cannot say that training advances. A trainer whose env step
hangs (a user's Python env under env.impl=reference, or env workers without
env.step_timeout_s) keeps a fresh heartbeat and the status `running` for ever. The trainer
stamps each update's end into its metrics file (the gauge `last_update_unix_s`, a file
without it is an older trainer's: nothing is judged), and `assess` judges a running run
stuck once no update came for `stuck_after_s`:

- by default max(STUCK_FLOOR_S, STUCK_FACTOR x the longest of its last RECENT_UPDATES updates,
  measured in its history ring's `elapsed_s`): a minute, or ten updates' time for a run whose
  updates are slow;
- before this trainer's first update, counted from its metrics file's creation (a resumed
  run's trainer makes a new one), max(FIRST_UPDATE_FLOOR_S, the same factor): the first
  update also builds what later ones reuse (workers, buffers, kernels warmed up);
- a reader's `--stuck-after SECONDS` instead of both (tests; a run known to be slow or fast).

A run that is not running (finished, failed, crashed, stalled) is never stuck: its status
says more already. The age is measured as the heartbeat's age plus the writer's own gap
between its last heartbeat and its last update (both of its wall clock): on the writer's host
that is its monotonic clock's, and a reader on another host with a skewed clock is off by
what the heartbeat's age is off by, not more.

Pure Python, read-only, no torch (operant.shared's rules): every reader of a run imports it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import msgspec

from operant.shared import record
from operant.shared.ranks import RunReader, RunSnapshot
from operant.shared.reader import STATUS_RUNNING, STATUS_STALLED, Snapshot

STUCK_FLOOR_S = 60.0
"""No update for this long is never normal for a run whose updates are quick."""
FIRST_UPDATE_FLOOR_S = 300.0
"""The floor before a trainer's first update: start-up work (env workers, the first rollout,
kernels and allocators warming up) comes on top of the update itself."""
STUCK_FACTOR = 10.0
"""A run whose updates are slow is stuck after this many of its updates' time."""
RECENT_UPDATES = 10
"""How many of the newest updates measure what an update takes."""
ELAPSED = "elapsed_s"
"""The history field whose differences are the updates' durations."""
LAST_UPDATE = record.LAST_UPDATE_UNIX_S.name


class Progress(msgspec.Struct, frozen=True, kw_only=True):
    """Whether a run advances: what `operant monitor --json`, `operant runs --json` and the
    monitor's views carry (all None and false for a run that has ended)."""

    update_age_s: float | None = None
    """Seconds since the trainer last finished an update; before its first one
    (`first_update`), since it started. None when the run has ended, or its trainer does not
    publish `last_update_unix_s` (an older one)."""
    first_update: bool = False
    """The trainer has finished no update yet (a resumed run's: none of its own)."""
    update_s: float | None = None
    """The longest of the run's recent updates, seconds; None before it has two records."""
    stuck_after_s: float | None = None
    """How long without an update makes this run stuck (its threshold, as `assess` chose)."""
    stuck: bool = False
    """Running, with a live heartbeat, but no update for longer than `stuck_after_s`."""


def update_age(snapshot: Snapshot) -> tuple[float, bool] | None:
    """(seconds since the trainer's last update, whether it has made none yet: then since it
    created its file), or None when the file does not say (an older trainer, no heartbeat
    yet). Measured from the heartbeat: its age plus the writer's own gap from its last update
    to its last heartbeat."""
    if LAST_UPDATE not in snapshot.gauges or not snapshot.heartbeat_wall_ns:
        return None
    heartbeat_age = snapshot.heartbeat_age_s
    if not math.isfinite(heartbeat_age):
        return None
    last = snapshot.gauges[LAST_UPDATE]
    first = not math.isfinite(last)
    since = snapshot.created_wall_ns / 1e9 if first else last
    return max(0.0, heartbeat_age + snapshot.heartbeat_wall_ns / 1e9 - since), first


def recent_update_s(elapsed: Sequence[float], first_index: int) -> float | None:
    """The longest of the newest RECENT_UPDATES updates, from the `elapsed_s` of the run's
    newest history records (oldest first, consecutive, the first being record `first_index`);
    None when fewer than two records (or only record 0, the first update's own time) say."""
    tail = [float(value) for value in elapsed[-(RECENT_UPDATES + 1) :]]
    durations = [
        later - earlier
        for earlier, later in zip(tail, tail[1:])
        if math.isfinite(earlier) and math.isfinite(later) and later >= earlier
    ]
    if durations:
        return max(durations)
    if len(elapsed) == 1 and first_index == 0 and math.isfinite(tail[0]) and tail[0] >= 0:
        return tail[0]
    return None


def stuck_after(first_update: bool, update_s: float | None) -> float:
    """The default threshold: max(floor, STUCK_FACTOR x update_s), with the first update's
    floor before a trainer's first update."""
    floor = FIRST_UPDATE_FLOOR_S if first_update else STUCK_FLOOR_S
    return max(floor, STUCK_FACTOR * update_s) if update_s is not None else floor


def assess(
    snapshot: Snapshot,
    elapsed: Sequence[float] = (),
    first_index: int = 0,
    *,
    stuck_after_s: float | None = None,
) -> Progress:
    """Whether the run of `snapshot` advances. `elapsed`, `first_index`: its newest history
    records' `elapsed_s`, as `recent_update_s` takes them; `stuck_after_s`: the threshold,
    instead of `stuck_after`'s."""
    if snapshot.status not in (STATUS_RUNNING, STATUS_STALLED):
        return Progress()
    measured = update_age(snapshot)
    if measured is None:
        return Progress()
    age, first = measured
    update_s = recent_update_s(elapsed, first_index)
    limit = stuck_after_s if stuck_after_s is not None else stuck_after(first, update_s)
    return Progress(
        update_age_s=age,
        first_update=first,
        update_s=update_s,
        stuck_after_s=limit,
        stuck=snapshot.status == STATUS_RUNNING and age > limit,
    )


def read_progress(
    reader: RunReader, run: RunSnapshot, *, stuck_after_s: float | None = None
) -> Progress:
    """`assess` of a run just read (`run`, from `reader`), with its newest records read from
    the history ring: only for a run that has not ended, so listing ended runs reads no more
    than before. Raises MetricsFileError as the reader does."""
    snapshot = run.total
    if snapshot.status not in (STATUS_RUNNING, STATUS_STALLED):
        return Progress()
    names = [field.name for field in reader.schema.history]
    if ELAPSED not in names:
        return assess(snapshot, stuck_after_s=stuck_after_s)
    column = names.index(ELAPSED)
    history = reader.history(max(0, snapshot.history_head - RECENT_UPDATES - 1))
    elapsed = [entry.values[column] for entry in history.records]
    first_index = history.records[0].index if history.records else 0
    return assess(snapshot, elapsed, first_index, stuck_after_s=stuck_after_s)

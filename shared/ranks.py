"""A run's metrics files read as one run: the one file of a single-process run, or one file
per rank of a run trained by several processes (operant.shared.runs.metrics_files).

`RunReader` is what every reader of a run uses (`operant monitor`, `--once`, `--json`,
`operant runs`, the exporter): it opens each file through operant.shared.reader's
`MetricsReader` and returns a `RunSnapshot`, the run as one `Snapshot` (`total`) and a row per
rank (`ranks`). A single-process run's total is its file's snapshot, unchanged. For a run of
several ranks the total follows `RULES` (docs/metrics-file.md, "Runs of several ranks"):
steps and steps/s summed, returns pooled, the run's status the worst rank's, naming the rank.
A rank that died or stalled keeps its row and its last values; one whose file is missing or
unreadable gets a row that says so, and the others are still read.

Pure Python, read-only like MetricsReader: nothing here writes or imports torch.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import msgspec

from operant.shared import metrics_layout as fmt
from operant.shared import record, runs
from operant.shared.reader import (
    STALL_INTERVALS,
    STATUS_CRASHED,
    STATUS_FAILED,
    STATUS_FINISHED,
    STATUS_RUNNING,
    STATUS_STALLED,
    History,
    HistoryRecord,
    MetricsFileError,
    MetricsReader,
    Snapshot,
)

RANK_WAITING = "waiting"
"""A rank's status while its metrics file does not exist yet."""
RANK_UNKNOWN = "unknown"
"""A rank's status while its metrics file cannot be read (the row's `error` says why)."""

# How the ranks' values of one metric make the run's value.
SUM = "sum"
"""Added up: counts of what every rank did (steps, episodes)."""
SUM_ACTIVE = "sum of active ranks"
"""Added up over the ranks that still step or ended normally (running or finished): a
crashed, failed or stalled rank steps nothing now, whatever its last rate was. When no rank
is left stepping, over all of them (the run's last rate, as a single process shows it)."""
MAX = "max"
MIN = "min"
POOLED = "pooled"
"""The mean of all ranks' episodes: each rank's mean weighted by the episodes it holds
(`POOL_WEIGHTS`), or equally where that count is not published."""
MEAN = "mean"
"""The plain mean over ranks: statistics each rank measures of its own share (losses)."""
FIRST = "rank 0"
"""The lowest rank's: what every rank holds alike (texts such as env_id, device)."""
JOINED = "joined"
"""Texts: every rank's non-empty text, prefixed with its rank."""

RULES: dict[str, str] = {
    "global_step": SUM,
    "episodes": SUM,
    "env_episodes": SUM,
    "sps": SUM_ACTIVE,
    "sps_mean": SUM_ACTIVE,
    record.CPU_PERCENT.name: SUM_ACTIVE,
    record.RSS_BYTES.name: SUM_ACTIVE,
    "updates": MAX,
    "elapsed_s": MAX,
    record.ELAPSED_BEFORE_S.name: MAX,
    # The run advances while any rank does (under DDP the ranks step together anyway).
    record.LAST_UPDATE_UNIX_S.name: MAX,
    record.TOTAL_STEPS.name: MAX,
    "episode_return_min": MIN,
    "episode_return_max": MAX,
    "episode_return_mean": POOLED,
    "env_episode_return_mean": POOLED,
    "episode_length_mean": POOLED,
    record.WARNING.name: JOINED,
}
"""The rule of every metric whose rule is not its kind's default (`rule_of`)."""


def return_window(world_size: int) -> int:
    """Episodes in one rank's `episode_return_mean` once it has finished that many: the
    run's last RETURN_WINDOW episodes dealt out to its ranks, ceil(100 / K) each (what the
    trainer's pooled record means by "the last 100": operant.trainer.loop.update_record)."""
    return -(-record.RETURN_WINDOW // max(1, world_size))


def _window_episodes(metrics: dict[str, int | float | str], world_size: int) -> float:
    episodes = _number(metrics.get("episodes"))
    return math.nan if episodes is None else min(episodes, float(return_window(world_size)))


def _env_episodes(metrics: dict[str, int | float | str], world_size: int) -> float:
    value = _number(metrics.get("env_episodes"))
    return math.nan if value is None else value


POOL_WEIGHTS: dict[str, Callable[[dict[str, int | float | str], int], float]] = {
    # The last-100 mean: each rank's window holds min(its episodes, ceil(100 / K)).
    "episode_return_mean": _window_episodes,
    # Per update: the env-episodes each rank finished in its last update.
    "env_episode_return_mean": _env_episodes,
}
"""A pooled metric's weight per rank, from that rank's values and the world size; a pooled
metric without one (episode_length_mean: the file has no per-update episode count) weighs
ranks equally."""


def rule_of(name: str, kind: str) -> str:
    """How a metric of `kind` (counter, gauge, text, snapshot) named `name` is combined over
    ranks: its entry in RULES, else SUM for counters, FIRST for texts, MEAN for the rest."""
    rule = RULES.get(name)
    if rule is not None:
        return rule
    return {fmt.KIND_COUNTER: SUM, fmt.KIND_TEXT: FIRST}.get(kind, MEAN)


def _number(value: object) -> float | None:
    """`value` as a float when it is a finite number (not a bool), else None."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _is_number(value: object) -> bool:
    return _number(value) is not None


def combine(
    rule: str, values: Sequence[float | int], weights: Sequence[float] | None = None
) -> float | int:
    """The run's value by `rule` from the ranks' `values` (NaN, a rank that has published
    none, is left out); NaN when no value is left. `weights` (one per rank) weigh a POOLED
    mean; without any usable weight it is the plain mean."""
    pairs = [
        (value, weights[index] if weights is not None else 1.0)
        for index, value in enumerate(values)
        if _is_number(value)
    ]
    numbers = [value for value, _ in pairs]
    if rule in (SUM, SUM_ACTIVE):
        return sum(numbers) if numbers else math.nan
    if not numbers:
        return math.nan
    if rule == MAX:
        return max(numbers)
    if rule == MIN:
        return min(numbers)
    if rule == FIRST:
        return numbers[0]
    if rule == POOLED:
        weighted = [(value, weight) for value, weight in pairs if _is_number(weight) and weight > 0]
        if weighted:
            total = sum(weight for _, weight in weighted)
            return sum(value * weight for value, weight in weighted) / total
    return sum(numbers) / len(numbers)


class RankRow(msgspec.Struct, frozen=True, kw_only=True):
    """One rank of a run: what `--json`'s `ranks` lists and the per-rank tables show."""

    rank: int
    node: str = ""
    """Where the rank runs (the schema's node, else the writer's hostname)."""
    pid: int = 0
    status: str = RANK_WAITING
    """The reader's liveness of this rank's file (running, finished, failed, crashed,
    stalled), `waiting` before the file exists, `unknown` while it cannot be read."""
    interrupted: bool = False
    global_step: int | None = None
    """The steps this rank stepped."""
    sps: float | None = None
    episode_return_mean: float | None = None
    heartbeat_age_s: float | None = None
    reason: str = ""
    path: str = ""
    error: str = ""
    """Why the status is waiting or unknown."""


class RunSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """One look at a run: the run as one snapshot, and each rank's row in rank order."""

    total: Snapshot
    """The run: a single process's snapshot as read, or the ranks' combined by RULES."""
    ranks: tuple[RankRow, ...]
    world_size: int
    per_rank: tuple[Snapshot, ...] = ()
    """The snapshot of every rank whose file could be read, in rank order (a single
    process's: `total` itself)."""
    status_ranks: tuple[int, ...] = ()
    """The ranks that make a distributed run's status failed, crashed or stalled; empty
    otherwise (and always for a single process: there is no other rank to tell it from)."""
    unread_ranks: tuple[int, ...] = ()
    """The ranks whose file could not be read (not there yet, or not readable: on a node
    without the run's other ranks' files, all but its own): the run's totals and status are
    the other ranks' alone."""


def _ranks(ranks: Sequence[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def status_text(status: str, status_ranks: Sequence[int], unread: Sequence[int] = ()) -> str:
    """A run's status with the ranks that make it so, and those it could not read: `crashed
    (rank 1)`, `stalled (ranks 1, 3)`, `finished (rank 1 unread)`; just the status when no
    rank is named."""
    named = [_ranks(status_ranks)] if status_ranks else []
    named += [f"{_ranks(unread)} unread"] if unread else []
    return f"{status} ({'; '.join(named)})" if named else status


def rank_row(snapshot: Snapshot, path: str) -> RankRow:
    """The row of one rank (or of the only process) from its file's snapshot."""
    metrics = snapshot.metrics()
    step = metrics.get("global_step")
    return RankRow(
        rank=snapshot.schema.rank,
        node=snapshot.schema.node or snapshot.hostname,
        pid=snapshot.pid,
        status=snapshot.status,
        interrupted=snapshot.interrupted,
        global_step=step if isinstance(step, int) and not isinstance(step, bool) else None,
        sps=_number(metrics.get("sps")),
        episode_return_mean=_number(metrics.get("episode_return_mean")),
        heartbeat_age_s=snapshot.heartbeat_age_s,
        reason=snapshot.reason,
        path=path,
    )


# Worst first: the run's status is the first of these any rank has. A crash comes before a
# failure because under torchrun it is usually the cause of the others' failures: a rank
# that dies without a word makes its peers' next collective fail within a second (seen:
# SIGKILL of rank 1 of 2, and rank 0 failed on "Connection reset by peer").
_BAD_STATUSES = (STATUS_CRASHED, STATUS_FAILED, STATUS_STALLED)
_ACTIVE = (STATUS_RUNNING, STATUS_FINISHED)


def run_status(rows: Sequence[RankRow]) -> tuple[str, tuple[int, ...]]:
    """The run's status from its ranks' and the ranks that make it: crashed, failed or
    stalled when any rank is (naming them), else running while any rank runs, else finished.
    Ranks without a readable file do not count."""
    for status in _BAD_STATUSES:
        named = tuple(row.rank for row in rows if row.status == status)
        if named:
            return status, named
    if any(row.status == STATUS_RUNNING for row in rows):
        return STATUS_RUNNING, ()
    return STATUS_FINISHED, ()


def _combined_numbers(
    snapshots: Sequence[Snapshot], world_size: int
) -> tuple[dict[str, int], dict[str, float], dict[str, float] | None]:
    """The run's counters, gauges and snapshot block: each name's values over the ranks,
    combined by the name's rule (operant.shared.metrics_layout)."""
    first = snapshots[0]
    # Rates are summed over the ranks still stepping; once none is (the whole run ended or
    # died), over all of them, so an ended run shows its last rate as one process's does.
    active = [snap.status in _ACTIVE for snap in snapshots]
    if not any(active):
        active = [True] * len(snapshots)
    all_metrics = [snap.metrics() for snap in snapshots]

    def values(name: str, kind: str) -> float | int:
        rule = rule_of(name, kind)
        column = [metrics.get(name, math.nan) for metrics in all_metrics]
        if rule == SUM_ACTIVE:
            column = [value if live else math.nan for value, live in zip(column, active)]
        weight = POOL_WEIGHTS.get(name)
        weights = [weight(metrics, world_size) for metrics in all_metrics] if weight else None
        return combine(rule, column, weights)  # type: ignore[arg-type]

    counters = {}
    for name in first.counters:
        count = values(name, fmt.KIND_COUNTER)
        counters[name] = int(count) if _is_number(count) else 0
    gauges = {name: float(values(name, fmt.KIND_GAUGE)) for name in first.gauges}
    block = None
    if first.snapshot is not None:
        block = {name: float(values(name, "snapshot")) for name in first.snapshot}
    return counters, gauges, block


def _combined_texts(snapshots: Sequence[Snapshot]) -> dict[str, str]:
    """The run's texts: the joined ones as each rank's, named by rank; the rest rank 0's."""
    first = snapshots[0]
    texts = {}
    for name in first.texts:
        if rule_of(name, fmt.KIND_TEXT) == JOINED:
            texts[name] = "; ".join(
                f"rank {snap.schema.rank}: {snap.texts[name]}"
                for snap in snapshots
                if snap.texts.get(name)
            )
        else:
            texts[name] = first.texts[name]
    return texts


def _run_reason(snapshots: Sequence[Snapshot]) -> str:
    """Why the run is where it is: every rank in trouble, the one whose heartbeat stopped first
    (the likely cause) first, or else the first rank's reason."""
    troubled = sorted(
        (snap for snap in snapshots if snap.status in _BAD_STATUSES),
        key=lambda snap: (snap.heartbeat_wall_ns, snap.schema.rank),
    )
    if not troubled:
        return snapshots[0].reason
    # "rank 1 crashed; rank 0 failed: the gradient all-reduce failed ...".
    return "; ".join(
        f"rank {snap.schema.rank} {snap.status}" + (f": {snap.reason}" if snap.reason else "")
        for snap in troubled
    )


def combine_snapshots(
    snapshots: Sequence[Snapshot], rows: Sequence[RankRow], path: str, world_size: int
) -> RunSnapshot:
    """The run from its ranks' snapshots (rank order, at least one) and every rank's row."""
    first = snapshots[0]
    status, status_ranks = run_status(rows)
    counters, gauges, block = _combined_numbers(snapshots, world_size)
    states = {snap.state for snap in snapshots}
    state = next((s for s in ("failed", "running", "initializing") if s in states), first.state)
    total = msgspec.structs.replace(
        first,
        path=path,
        status=status,
        state=state,
        interrupted=status == STATUS_FINISHED and any(s.interrupted for s in snapshots),
        reason=_run_reason(snapshots),
        created_wall_ns=min(s.created_wall_ns for s in snapshots),
        heartbeat_wall_ns=max(s.heartbeat_wall_ns for s in snapshots),
        heartbeat_age_s=min(s.heartbeat_age_s for s in snapshots),
        heartbeat_count=max(s.heartbeat_count for s in snapshots),
        history_head=min(s.history_head for s in snapshots),
        counters=counters,
        gauges=gauges,
        texts=_combined_texts(snapshots),
        snapshot=block,
    )
    return RunSnapshot(
        total=total,
        ranks=tuple(rows),
        world_size=world_size,
        per_rank=tuple(snapshots),
        status_ranks=status_ranks,
        unread_ranks=tuple(row.rank for row in rows if row.status in (RANK_WAITING, RANK_UNKNOWN)),
    )


class RunReader:
    """Read-only view of one run directory's metrics files, as one run. Not thread-safe.

    Raises MetricsFileError, as MetricsReader does, when the run has no file it can read (a
    single-process run's file missing or bad; none of a distributed run's ranks readable).
    """

    def __init__(
        self, run_dir: str | os.PathLike[str], *, stall_intervals: float = STALL_INTERVALS
    ):
        self.run_dir = Path(run_dir)
        self.stall_intervals = stall_intervals
        files = runs.metrics_files(self.run_dir)
        self.distributed = runs.rank_of(files[0]) is not None
        """Whether the run writes one file per rank (metrics/rank-*.bin)."""
        self.path = str(self.run_dir / runs.METRICS_DIR) if self.distributed else str(files[0])
        self._readers: dict[Path, MetricsReader] = {}
        self._errors: dict[Path, str] = {}
        self._statuses: dict[Path, str] = {}
        """Each rank file's status at the last read()."""
        self._open_all(files)
        if not self._readers:
            raise MetricsFileError(
                next(iter(self._errors.values()), f"{self.path}: no metrics file")
            )

    # --- files ---------------------------------------------------------------------------

    def _open(self, path: Path) -> MetricsReader | None:
        try:
            reader = MetricsReader(path, stall_intervals=self.stall_intervals)
        except MetricsFileError as error:
            if not self.distributed:
                raise
            self._errors[path] = str(error)
            return None
        self._errors.pop(path, None)
        self._readers[path] = reader
        return reader

    def _open_all(self, files: list[Path]) -> None:
        for path in files:
            if path not in self._readers:
                self._open(path)

    def _primary(self) -> MetricsReader:
        """The lowest rank's reader: its schema names the run's metrics."""
        if not self._readers:
            raise MetricsFileError(f"{self.path}: no rank's metrics file can be read")
        return min(self._readers.values(), key=lambda reader: reader.schema.rank)

    @property
    def schema(self) -> fmt.Schema:
        return self._primary().schema

    @property
    def pid(self) -> int:
        return self._primary().pid

    @property
    def pid_start_time(self) -> float:
        return self._primary().pid_start_time

    @property
    def created_wall_ns(self) -> int:
        return min(reader.created_wall_ns for reader in self._readers.values())

    @property
    def world_size(self) -> int:
        """The world of the newest rank file (older files of another world size are left
        over from an earlier start of the run, and ignored)."""
        if not self._readers:
            raise MetricsFileError(f"{self.path}: no rank's metrics file can be read")
        newest = max(self._readers.values(), key=lambda reader: reader.created_wall_ns)
        return newest.schema.world_size

    def close(self) -> None:
        for reader in self._readers.values():
            reader.close()
        self._readers = {}

    def __enter__(self) -> RunReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- reading -------------------------------------------------------------------------

    def _read_rank(self, path: Path) -> Snapshot | str:
        """The file's snapshot, opening it again once if it was replaced; else why not."""
        for _ in range(2):
            reader = self._readers.get(path)
            if reader is None:
                if not path.exists():
                    return ""
                reader = self._open(path)
                if reader is None:
                    return self._errors[path]
            try:
                return reader.snapshot()
            except MetricsFileError as error:
                if not self.distributed:
                    raise
                reader.close()
                del self._readers[path]
                self._errors[path] = str(error)
        return self._errors[path]

    def read(self) -> RunSnapshot:
        """The run now: its total and every rank's row."""
        if not self.distributed:
            reader = self._primary()
            snapshot = reader.snapshot()
            row = rank_row(snapshot, reader.path)
            return RunSnapshot(total=snapshot, ranks=(row,), world_size=1, per_rank=(snapshot,))
        self._open_all(runs.metrics_files(self.run_dir))
        world_size = self.world_size
        snapshots: list[Snapshot] = []
        rows: list[RankRow] = []
        for rank in range(world_size):
            path = runs.metrics_path(self.run_dir, rank, world_size)
            result = self._read_rank(path)
            if isinstance(result, str):
                rows.append(
                    RankRow(
                        rank=rank,
                        status=RANK_UNKNOWN if result else RANK_WAITING,
                        path=str(path),
                        error=result or "no metrics file yet",
                    )
                )
                continue
            if result.schema.world_size != world_size or result.schema.rank != rank:
                rows.append(
                    RankRow(
                        rank=rank,
                        status=RANK_UNKNOWN,
                        path=str(path),
                        error=f"{path}: written as rank {result.schema.rank} of "
                        f"{result.schema.world_size}, not rank {rank} of {world_size}",
                    )
                )
                continue
            self._statuses[path] = result.status
            snapshots.append(result)
            rows.append(rank_row(result, str(path)))
        if not snapshots:
            raise MetricsFileError(
                f"{self.path}: no rank's metrics file can be read ("
                + "; ".join(row.error for row in rows if row.error)
                + ")"
            )
        return combine_snapshots(snapshots, rows, self.path, world_size)

    def snapshot(self) -> Snapshot:
        """The run as one snapshot (RunSnapshot.total)."""
        return self.read().total

    def history(self, since_head: int = 0) -> History:
        """The run's history records from `since_head` on, oldest first. A distributed run's
        record n combines record n of every rank that holds it (RULES; pooled means weigh the
        ranks equally: the ring holds no episode counts), up to the newest record every
        running or finished rank has, so a record is not shown before its ranks wrote it."""
        if not self.distributed:
            return self._primary().history(since_head)
        primary = self._primary()
        names = [field.name for field in primary.schema.history]
        per_rank: list[tuple[dict[int, tuple[float, ...]], list[int]]] = []
        heads_active: list[int] = []
        heads_all: list[int] = []
        for path, reader in sorted(self._readers.items(), key=lambda item: item[1].schema.rank):
            try:
                history = reader.history(since_head)
            except MetricsFileError:
                continue
            status = self._statuses.get(path, STATUS_RUNNING)
            own = [field.name for field in reader.schema.history]
            index_of = [own.index(name) if name in own else -1 for name in names]
            per_rank.append(({entry.index: entry.values for entry in history.records}, index_of))
            heads_all.append(history.head)
            if status in _ACTIVE:
                heads_active.append(history.head)
        if not per_rank:
            return History(records=(), head=since_head, skipped=0)
        head = min(heads_active) if heads_active else max(heads_all)
        records = []
        for index in range(since_head, head):
            held = [
                (values, index_of)
                for records_of, index_of in per_rank
                if (values := records_of.get(index)) is not None
            ]
            if not held:
                continue
            combined = tuple(
                float(
                    combine(
                        rule_of(name, fmt.KIND_GAUGE),
                        [
                            values[index_of[field]] if index_of[field] >= 0 else math.nan
                            for values, index_of in held
                        ],
                    )
                )
                for field, name in enumerate(names)
            )
            records.append(HistoryRecord(index, combined))
        return History(
            records=tuple(records),
            head=head,
            skipped=max(0, head - since_head - len(records)),
        )

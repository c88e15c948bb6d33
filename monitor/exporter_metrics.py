"""The exporter's metrics: every run under a runs root as prometheus_client metric families.

`RunsCollector` is a prometheus_client custom collector over the shared read-only reader
(operant.shared.ranks.RunReader): each `collect()` reads the runs' metrics files and yields
families that prometheus_client renders in the Prometheus text format or OpenMetrics. It
never writes, locks or signals anything of a run, and imports no torch.

How the metrics file's values become metrics (docs/deploy.md, "What the exporter exports"):
- names are `operant_` + the file's name; a unit that is a Prometheus base unit becomes the
  family's UNIT and name suffix: `s` -> `_seconds`, `unix s` -> `_timestamp_seconds`, `bytes`,
  `%` -> `_ratio` (divided by 100). Counts (steps, episodes) have no unit;
- a run's position (`global_step`, `episodes`, `updates`) is a gauge: a resume takes it back
  to its checkpoint. What the current trainer process did (`process_steps`, ...) is the
  counter: it starts at 0 with the process, so `increase()` over a resume counts what was
  trained (the updates redone after a kill included), where the position stepped back;
- `trained_steps`, the run's count of steps trained by all its processes, is a counter that
  a resumed process continues from its predecessor's file: no reset at all, so increase() is
  right even when a restart comes faster than a scrape could see the process count's reset;
- a gauge the trainer has not published (NaN in the file) is absent, not NaN, so a run
  exports no series that can only be NaN (`env_episodes` of a single-agent env);
- the trainer process's present rates (`sps`, `sps_mean`, CPU, RSS) only while the run is
  running, so `sum(operant_sps)` is the host's steps/s, not a finished run's last rate.
"""

from __future__ import annotations

import math
import os
import platform
import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
)

from operant.shared import metrics_layout as fmt
from operant.shared import progress, record, runs
from operant.shared.ranks import RANK_UNKNOWN, RunReader, RunSnapshot
from operant.shared.reader import (
    STATUS_CRASHED,
    STATUS_FAILED,
    STATUS_FINISHED,
    STATUS_RUNNING,
    STATUS_STALLED,
    STATUSES,
    MetricsFileError,
    Snapshot,
)

PREFIX = "operant_"
FINAL_STATUSES = (STATUS_FINISHED, STATUS_FAILED, STATUS_CRASHED)
LIVE_STATUSES = (STATUS_RUNNING, STATUS_STALLED)
POSITIONS = frozenset(record.PROCESS_COUNTERS)
"""The file's counters that are a run's position: exported as gauges."""
PRESENT = frozenset({"sps", "sps_mean", record.CPU_PERCENT.name, record.RSS_BYTES.name})
"""Gauges of the trainer process's present: exported only while the run is running."""
# Labels a run's text metrics may not take over.
_RESERVED_LABELS = {"run", "rank", "status", "env_id", "hostname", "writer"}
_RUN_LABELS = ("run", "rank")
_Family = TypeVar("_Family", bound=Metric)


def exported_name(name: str, unit: str) -> tuple[str, str, float]:
    """(the family's name, its UNIT, the factor its values are multiplied by) of a metric
    the file names `name` with the file's `unit`."""
    base = re.sub(r"[^a-zA-Z0-9_]", "_", name)
    if unit == record.UNIX_TIME:
        base = re.sub(r"(_unix)?_s$", "", base)
        return f"{PREFIX}{base}_timestamp_seconds", "seconds", 1.0
    if unit == "s":
        return PREFIX + re.sub(r"_s$", "", base) + "_seconds", "seconds", 1.0
    if unit == "bytes":
        return PREFIX + re.sub(r"_bytes$", "", base) + "_bytes", "bytes", 1.0
    if unit == "%":
        return PREFIX + re.sub(r"_percent$", "", base) + "_ratio", "ratio", 0.01
    return PREFIX + base, "", 1.0


def label_name(name: str) -> str:
    base = re.sub(r"[^a-zA-Z0-9_]", "_", name).lstrip("_")
    return base if base and not base[0].isdigit() else f"label_{base}"


def _describe(item: fmt.Metric | fmt.Field | None, name: str) -> str:
    if item is None:
        return name
    return item.description or name


class Families:
    """The families of one scrape by name; the first kind a name is given wins (two runs
    written by different versions could disagree)."""

    def __init__(self) -> None:
        self.by_name: dict[str, Metric] = {}

    def gauge(
        self, name: str, doc: str, labels: dict[str, str], value: float, unit: str = ""
    ) -> None:
        if isinstance(value, float) and math.isnan(value):
            return  # not published: absent, not NaN
        family = self._family(
            name,
            GaugeMetricFamily,
            lambda: GaugeMetricFamily(name, doc, labels=list(labels), unit=unit),
        )
        if family is not None:
            family.add_metric(list(labels.values()), value)

    def counter(self, name: str, doc: str, labels: dict[str, str], value: float) -> None:
        family = self._family(
            name, CounterMetricFamily, lambda: CounterMetricFamily(name, doc, labels=list(labels))
        )
        if family is not None:
            family.add_metric(list(labels.values()), value)

    def info(self, name: str, doc: str, labels: dict[str, str]) -> None:
        family = self._family(name, InfoMetricFamily, lambda: InfoMetricFamily(name, doc))
        if family is not None:
            family.add_metric([], labels)

    def _family(
        self, name: str, kind: type[_Family], make: Callable[[], _Family]
    ) -> _Family | None:
        """The family `name`, made by `make` if new; None if it is of another kind than `kind`
        (each kind is its own class)."""
        family = self.by_name.get(name)
        if family is None:
            family = self.by_name[name] = make()
        return family if isinstance(family, kind) else None


def add_rank(families: Families, run_id: str, snapshot: Snapshot) -> None:
    """One rank's samples (a single-process run's: rank 0): info, status, timing, and every
    metric its file declares."""
    labels = {"run": run_id, "rank": str(snapshot.schema.rank)}
    info = {**labels, "env_id": snapshot.env_id, "hostname": snapshot.hostname,
            "writer": snapshot.schema.writer}  # fmt: skip
    for name, text in snapshot.texts.items():
        key = label_name(name)
        if key not in _RESERVED_LABELS:
            info[key] = text
    families.info(PREFIX + "run", "The run: environment, host, writer, implementation.", info)
    if snapshot.reason:
        families.info(
            PREFIX + "run_reason",
            "Why the run failed or stopped, as its trainer said: the NaN guard's begins "
            "'non-finite values', a full disk's 'the disk is full'.",
            {**labels, "reason": snapshot.reason},
        )
    for status in STATUSES:
        families.gauge(
            PREFIX + "run_status",
            "1 for the run's status (running, finished, failed, crashed, stalled), else 0.",
            {**labels, "status": status},
            float(snapshot.status == status),
        )
    families.gauge(PREFIX + "run_interrupted",
                   "1 if the run finished early on request (SIGTERM/SIGINT), else 0.",
                   labels, float(snapshot.interrupted))  # fmt: skip
    families.gauge(PREFIX + "run_start_time_seconds",
                   "When the run's current trainer process created its metrics file (a resume "
                   "makes a new one), seconds since the Unix epoch: its process counters' start.",
                   labels, snapshot.created_wall_ns / 1e9, "seconds")  # fmt: skip
    families.gauge(PREFIX + "run_heartbeat_age_seconds",
                   "Seconds since the trainer's last heartbeat.",
                   labels, snapshot.heartbeat_age_s, "seconds")  # fmt: skip
    # Absent once the run has ended, and for an older trainer's file (no last_update_unix_s).
    measured = progress.update_age(snapshot) if snapshot.status in LIVE_STATUSES else None
    update_age = measured[0] if measured is not None else math.nan
    families.gauge(PREFIX + "run_update_age_seconds",
                   "Seconds since the trainer last finished an update (before its first, since "
                   "it started): grows while the heartbeat stays fresh when training hangs.",
                   labels, update_age, "seconds")  # fmt: skip
    _add_values(families, labels, snapshot)


def _add_values(families: Families, labels: dict[str, str], snapshot: Snapshot) -> None:
    declared: dict[str, fmt.Metric | fmt.Field] = {m.name: m for m in snapshot.schema.metrics}
    declared.update((item.name, item) for item in snapshot.schema.snapshot)
    running = snapshot.status == STATUS_RUNNING
    for name, count in snapshot.counters.items():
        item = declared.get(name)
        family, _, _ = exported_name(name, "")
        if name in POSITIONS:
            families.gauge(family, _describe(item, name) + " The run's position: a resume "
                           "takes it back to its checkpoint.", labels, float(count))  # fmt: skip
        else:
            families.counter(family, _describe(item, name), labels, count)
    values = {**snapshot.gauges, **(snapshot.snapshot or {})}
    for name, value in values.items():
        if name in PRESENT and not running:
            continue
        item = declared.get(name)
        family, unit, factor = exported_name(name, item.unit if item is not None else "")
        families.gauge(family, _describe(item, name), labels, value * factor, unit)


# (family, kind, help, metric) of the run's totals; the values come from the run's combined
# snapshot (operant.shared.ranks.RULES).
_TOTALS = (
    ("run_global_step", "gauge",
     "The run's position: environment steps of all its ranks together.", "global_step"),
    ("run_process_steps", "counter", "Environment steps the run's current trainer processes "
     "took, all ranks together: 0 when they started.", record.PROCESS_COUNTERS["global_step"].name),
    ("run_trained_steps", "counter", "Environment steps all of the run's trainer processes "
     "did, all ranks together, redone updates included: a resume continues the count, so "
     "increase() over restarts is right.", record.TRAINED_STEPS.name),
    ("run_episode_return_mean", "gauge",
     "Mean return of the run's last 100 episodes: its ranks' means, pooled.",
     "episode_return_mean"),
)  # fmt: skip


def add_run(
    families: Families, run_id: str, run: RunSnapshot, advance: progress.Progress | None = None
) -> None:
    """The run's own samples, labelled `run` only: its rank count, its summed and pooled
    values, its steps/s while one of its ranks runs, and whether it is stuck (`advance`: a
    live run's operant.shared.progress verdict, as the monitor's)."""
    labels = {"run": run_id}
    families.gauge(PREFIX + "run_ranks", "Processes (ranks) that train the run.", labels,
                   float(run.world_size))  # fmt: skip
    if advance is not None and advance.stuck_after_s is not None:
        families.gauge(
            PREFIX + "run_stuck",
            "1 while the run is running but has made no "
            "update for operant_run_stuck_after_seconds (a hung env step), as "
            "operant monitor says STUCK; else 0.",
            labels,
            float(advance.stuck),
        )
        families.gauge(PREFIX + "run_stuck_after_seconds", "No update for this long makes the "
                       "running run stuck: max(60 s, 10 x its recent updates' time).", labels,
                       advance.stuck_after_s, "seconds")  # fmt: skip
    metrics = run.total.metrics()
    for family, kind, help_text, name in _TOTALS:
        value = metrics.get(name)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        if kind == "counter":
            families.counter(PREFIX + family, help_text, labels, value)
        else:
            families.gauge(PREFIX + family, help_text, labels, float(value))
    if any(snapshot.status == STATUS_RUNNING for snapshot in run.per_rank):
        sps = metrics.get("sps")
        if isinstance(sps, float):
            families.gauge(PREFIX + "run_sps", "The run's steps per second: its running "
                           "ranks' summed; absent when none runs.", labels, sps)  # fmt: skip


def add_exporter(families: Families, files: int, stats: dict[str, int]) -> None:
    """The exporter's own samples: its build, files scraped, read errors (ever, and in this
    scrape), bad requests. Its counters start at 0 with the exporter process."""
    from operant import __version__

    families.info(PREFIX + "exporter_build", "The exporter's version and what it reads.", {
        "version": __version__,
        "metrics_format": f"{fmt.VERSION_MAJOR}.{fmt.VERSION_MINOR}",
        "python_version": platform.python_version(),
    })  # fmt: skip
    families.gauge(PREFIX + "exporter_runs", "Metrics files in this scrape.", {}, float(files))
    families.counter(PREFIX + "exporter_read_errors",
                     "Metrics files the exporter could not read (missing, corrupt, foreign).",
                     {}, stats["read_errors"])  # fmt: skip
    families.gauge(PREFIX + "exporter_unreadable_files",
                   "Metrics files this scrape could not read: 0 again once they are mended or "
                   "removed.", {}, float(stats.get("unreadable", 0)))  # fmt: skip
    families.counter(PREFIX + "exporter_bad_requests", "HTTP requests answered with a 4xx "
                     "status.", {}, stats.get("bad_requests", 0))  # fmt: skip


def families_of(
    runs_seen: list[tuple[str, RunSnapshot]],
    stats: dict[str, int],
    advances: dict[str, progress.Progress] | None = None,
) -> list[Metric]:
    """Every family of one scrape, from the runs read (with `advances`, live runs' progress
    verdicts by run id) and the exporter's counts."""
    families = Families()
    for run_id, run in runs_seen:
        for snapshot in run.per_rank:
            add_rank(families, run_id, snapshot)
    for run_id, run in runs_seen:
        add_run(families, run_id, run, (advances or {}).get(run_id))
    add_exporter(families, sum(len(run.per_rank) for _, run in runs_seen), stats)
    return list(families.by_name.values())


class RunsCollector:
    """A prometheus_client collector of the runs under `root`; keeps one reader per run
    between scrapes. Which runs: every running or stalled one, and every finished, failed or
    crashed one for `keep_finished_s` after its last heartbeat."""

    def __init__(self, root: Path, keep_finished_s: float):
        self.root, self.keep_finished_s = root, keep_finished_s
        self.read_errors = 0
        self.unreadable = 0  # in the last scrape
        self.bad_requests = 0
        self.lock = threading.Lock()
        self._readers: dict[Path, RunReader] = {}
        # Runs found finished long ago, by their files' identities: skipped without opening
        # them until a file is replaced (a resumed run writes new ones).
        self._expired: dict[Path, tuple[tuple[int, int], ...]] = {}

    def describe(self) -> list[Metric]:
        return []  # the families depend on the runs found: nothing to describe up front

    def collect(self) -> Iterator[Metric]:
        with self.lock:
            found = self.runs()
            advances = {run_id: self._advance(run_id, run) for run_id, run in found}
            stats = {"read_errors": self.read_errors, "unreadable": self.unreadable,
                     "bad_requests": self.bad_requests}  # fmt: skip
        yield from families_of(found, stats, advances)

    def _advance(self, run_id: str, run: RunSnapshot) -> progress.Progress:
        reader = self._readers.get(self.root / run_id)
        if reader is None:
            return progress.Progress()
        try:
            return progress.read_progress(reader, run)
        except MetricsFileError:  # replaced since: the next scrape reads the new file
            return progress.Progress()

    def count_bad_request(self) -> None:
        with self.lock:
            self.bad_requests += 1

    def runs(self) -> list[tuple[str, RunSnapshot]]:
        """(run id, the run's snapshots) of every run to export now."""
        found: list[tuple[str, RunSnapshot]] = []
        seen: set[Path] = set()
        self.unreadable = 0
        run_dirs: list[Path] = []
        for _ in range(3):
            # A directory removed between the listing and its stat fails the whole listing;
            # a scrape without every run would end their series (Prometheus marks them stale,
            # and OperantRunVanished fires), so the listing is taken again.
            try:
                run_dirs = runs.list_run_dirs(self.root)
                break
            except OSError:  # the root vanished or changed while being listed
                continue
        for run_dir in run_dirs:
            seen.add(run_dir)
            run = self._exportable(run_dir)
            if run is not None:
                found.append((run_dir.name, run))
        for run_dir in [run_dir for run_dir in self._readers if run_dir not in seen]:
            self._forget(run_dir)
        self._expired = {
            run_dir: identity for run_dir, identity in self._expired.items() if run_dir in seen
        }
        return found

    def _exportable(self, run_dir: Path) -> RunSnapshot | None:
        """The run's snapshots; None when it has no readable file, or it ended more than
        keep_finished_s ago (remembered by its files' identities until one is replaced)."""
        identity = []
        for path in runs.metrics_files(run_dir):
            try:
                status = os.stat(path)
            except OSError:
                continue
            identity.append((status.st_dev, status.st_ino))
        if not identity or self._expired.get(run_dir) == tuple(identity):
            return None
        run = self._read(run_dir)
        if run is None:
            return None
        total = run.total
        if total.status in FINAL_STATUSES and total.heartbeat_age_s > self.keep_finished_s:
            self._expired[run_dir] = tuple(identity)
            self._forget(run_dir)
            return None
        return run

    def _read(self, run_dir: Path) -> RunSnapshot | None:
        for _ in range(2):  # a file replaced since the last scrape is opened again once
            reader = self._readers.get(run_dir)
            try:
                if reader is None:
                    reader = self._readers[run_dir] = RunReader(run_dir)
                run = reader.read()
            except MetricsFileError:
                self._forget(run_dir)
                continue
            # A rank whose file cannot be read is one read error, as a run's file is.
            self._unreadable(sum(1 for row in run.ranks if row.status == RANK_UNKNOWN))
            return run
        self._unreadable(1)
        return None

    def _unreadable(self, files: int) -> None:
        self.read_errors += files
        self.unreadable += files

    def _forget(self, run_dir: Path) -> None:
        reader = self._readers.pop(run_dir, None)
        if reader is not None:
            reader.close()

    def close(self) -> None:
        with self.lock:
            for path in list(self._readers):
                self._forget(path)

"""Where the monitor's data comes from: frozen `RunView`s, posted to the app as messages.

`SnapshotSource` is the protocol the app depends on; `ReaderSource` is the real one, a Textual
thread worker of the app (`run_worker(thread=True)`, exclusive in its group) that reads a run's
metrics files through `operant.shared.ranks.RunReader` (one file, or one per rank of a run
trained by several processes, shown as one run) every `interval_s` and posts a `RunUpdate`.
Tests pass a fake that posts views they build by hand.

The worker keeps the UI responsive whatever the file does (a slow disk, a file replaced or
corrupt), and everything the app draws is already computed here, off the UI thread; a read that
never returns holds neither the screen nor a detach (the app's executor, operant.monitor.app).
Nothing in this module writes anywhere: the reader opens the file read-only, `latest` is only
read.
"""

from __future__ import annotations

import math
import socket
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import msgspec
import psutil
from textual.dom import DOMNode
from textual.message import Message
from textual.message_pump import MessagePump
from textual.worker import Worker, get_current_worker

from operant.monitor.backfill import older_points
from operant.monitor.listing import RunRow, list_runs
from operant.shared import metrics_layout as fmt
from operant.shared import progress, record
from operant.shared.progress import Progress
from operant.shared.ranks import RankRow, RunReader, RunSnapshot
from operant.shared.reader import STATUS_RUNNING, STATUS_STALLED, Frame, MetricsFileError
from operant.shared.runs import LATEST_NAME, RunNotFoundError, metrics_files
from operant.shared.sweeps import resolve_newest

DEFAULT_INTERVAL_S = 1.0
# Points kept per curve: a run's whole history at one point per update for long runs, and a
# bound on memory and on the work of drawing when the monitor stays attached for days.
MAX_CURVE_POINTS = 20_000
# psutil's start time and the one in the file's header can differ by clock-step noise.
_START_TOLERANCE_S = 1.0
# The reader's worker: its name and group among the app's workers.
WORKER_GROUP = "operant-monitor-source"

# Statuses beyond the reader's (running, finished, failed, crashed, stalled).
STATUS_WAITING = "waiting"
"""The run directory exists but its metrics file does not yet."""
STATUS_UNKNOWN = "unknown"
"""The metrics file could not be read since the monitor attached."""


class MetricInfo(msgspec.Struct, frozen=True):
    name: str
    kind: str
    """counter, gauge, text, or snapshot (a field of the seqlocked block)."""
    unit: str = ""
    description: str = ""


class ProcessInfo(msgspec.Struct, frozen=True):
    cpu_percent: float
    """Of one core; NaN until a second sample."""
    rss_bytes: float
    measured_by: str
    """`psutil` (this host looked at the trainer) or `trainer` (the trainer's own gauges)."""


class RunView(msgspec.Struct, frozen=True, kw_only=True):
    """Everything the monitor draws about one run at one moment."""

    run_id: str
    run_dir: str
    env_id: str = ""
    status: str = STATUS_WAITING
    """running, finished, failed, crashed, stalled (the reader's liveness) or waiting."""
    state: str = ""
    """The state word as written (initializing, running, finished, failed)."""
    interrupted: bool = False
    reason: str = ""
    pid: int = 0
    hostname: str = ""
    uptime_s: float = math.nan
    """Since the run started; for an ended run, how long it ran."""
    heartbeat_age_s: float = math.nan
    heartbeat_interval_s: float = math.nan
    progress: Progress | None = None
    """Whether the run still trains (operant.shared.progress): `stuck` when its heartbeat
    goes on but no update came for too long; None before a good read."""
    metrics: dict[str, int | float | str] = {}
    columns: tuple[MetricInfo, ...] = ()
    """Every metric in the schema, in schema order: the metrics table's rows."""
    history: dict[str, tuple[float, ...]] = {}
    """Each history field's whole curve, oldest first."""
    history_head: int = 0
    process: ProcessInfo | None = None
    world_size: int = 1
    """Processes (ranks) that train the run; with more than one, `metrics` holds their values
    combined (operant.shared.ranks) and `ranks` a row for each."""
    ranks: tuple[RankRow, ...] = ()
    status_ranks: tuple[int, ...] = ()
    """The ranks that make a distributed run failed, crashed or stalled."""
    unread_ranks: tuple[int, ...] = ()
    """The ranks whose file could not be read: `metrics` holds the others' alone."""
    frame: Frame | None = None
    """A pixel run's latest frame (env 0 of rank 0); None for other runs."""
    problem: str = ""
    """Why the values on screen may be old (file unreadable, removed); empty when fresh."""
    notice: str = ""
    """Something that just happened (switched runs, file replaced) to tell the user once."""
    following: bool = False
    taken_at: float = 0.0
    """The source's clock when this view was taken (Unix seconds)."""


ELAPSED_BEFORE = record.ELAPSED_BEFORE_S.name


def run_uptime(
    status: str, now: float, created: float, last_heartbeat: float, elapsed_before: Any
) -> float:
    """How long the run has run (ended: ran), across resumes: this trainer's time since it
    created the metrics file (to now, or to its last heartbeat once it ended) plus the seconds
    the run trained before it (a resumed run's `elapsed_before_s`; absent or NaN in a file of
    an older trainer, then 0), so it agrees with the record's elapsed_s."""
    end = now if status in ("running", "stalled") else last_heartbeat
    before = (
        elapsed_before
        if isinstance(elapsed_before, float) and math.isfinite(elapsed_before)
        else 0.0
    )
    return max(0.0, end - created) + max(0.0, before)


class RunUpdate(Message):
    """A new view of the run being watched."""

    def __init__(self, view: RunView) -> None:
        super().__init__()
        self.view = view


class SourceFailed(Message):
    """The source hit a bug and stopped; `details` is the traceback."""

    def __init__(self, details: str) -> None:
        super().__init__()
        self.details = details


class SnapshotSource(Protocol):
    """What the app needs from a data source."""

    interval_s: float

    def start(self, target: DOMNode) -> None:
        """Begin posting RunUpdate messages to `target` (the first one promptly), from a
        worker of `target`'s."""

    def stop(self) -> None:
        """Stop posting; return quickly."""

    def attach(self, run_id: str) -> None:
        """Watch run `run_id` from now on (stops following `latest`)."""

    def runs(self) -> list[RunRow]:
        """Every run under the runs root, as `operant runs` lists them."""


class ReaderSource:
    """Views of one run (or of whichever run `latest` names) from its metrics file.

    `poll()` takes one view synchronously (tests call it directly); `start()` calls it from a
    Textual thread worker every `interval_s`.
    """

    def __init__(
        self,
        root: Path,
        run: str | None = None,
        *,
        follow: bool = False,
        interval_s: float = DEFAULT_INTERVAL_S,
        clock: Callable[[], float] = time.time,
        stuck_after_s: float | None = None,
    ) -> None:
        """`stuck_after_s`: when a running run is stuck (default: operant.shared.progress's
        rule)."""
        self.root = root
        self.interval_s = interval_s
        self.stuck_after_s = stuck_after_s
        self.clock = clock
        self._run = None if run == LATEST_NAME else run
        self._follow = follow and self._run is None
        self._run_dir: Path | None = None
        self._reader: RunReader | None = None
        self._columns: tuple[MetricInfo, ...] = ()
        self._curves: dict[str, deque[float]] = {}
        self._curve_tuples: dict[str, tuple[float, ...]] = {}
        self._history_head = 0
        self._created_ns = 0
        self._process: psutil.Process | None = None
        self._last: RunView | None = None
        self._notice = ""
        self._lock = threading.Lock()
        self._requested: str | None = None
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._worker: Worker[None] | None = None
        self._looping = False
        """The worker's loop runs (under `_lock`): then it, not `stop()`, closes the reader."""
        self._hostname = socket.gethostname()

    # --- the worker ----------------------------------------------------------------------

    def start(self, target: DOMNode) -> None:
        # The first look is taken here, before the app's first paint, so the first frame
        # already shows the run; the worker takes every later one.
        if self._post(target):
            self._worker = target.run_worker(
                partial(self._loop, target),
                name=WORKER_GROUP,
                group=WORKER_GROUP,
                description=f"reads run {self._run or LATEST_NAME} every {self.interval_s:g} s",
                thread=True,
                exclusive=True,
            )

    def stop(self) -> None:
        """Ends the worker's loop at its next look, never waiting for a read under way: a
        read stuck on a slow disk keeps its thread, not the app. The reader is closed by the
        loop on its way out, or here when no loop runs."""
        self._stopping.set()
        self._wake.set()
        if self._worker is not None:
            self._worker.cancel()
        with self._lock:
            if not self._looping:
                self._close_reader()

    def attach(self, run_id: str) -> None:
        with self._lock:
            self._requested = run_id
        self._wake.set()

    def runs(self) -> list[RunRow]:
        try:
            return list_runs(self.root, stuck_after_s=self.stuck_after_s)
        except OSError:  # the runs root is unreadable or went away: nothing to pick from
            return []

    def _loop(self, target: MessagePump) -> None:
        """The worker: a look every `interval_s` (at once when woken) until stopped or
        cancelled (the app cancels its workers when it exits), or a bug."""
        worker = get_current_worker()
        with self._lock:
            if self._stopping.is_set():
                return
            self._looping = True
        try:
            while True:
                self._wake.wait(self.interval_s)
                if self._stopping.is_set() or worker.is_cancelled or not self._post(target):
                    return
        finally:
            with self._lock:
                self._looping = False
                self._close_reader()

    def _post(self, target: MessagePump) -> bool:
        """Take one look and post it; False (and the traceback posted) on a bug."""
        self._wake.clear()
        try:
            view = self.poll()
        except Exception:  # a bug: hand it to the app rather than die unseen
            target.post_message(SourceFailed(traceback.format_exc()))
            return False
        target.post_message(RunUpdate(view))
        return True

    # --- one look ------------------------------------------------------------------------

    def poll(self) -> RunView:
        """Read the run once and return what to draw."""
        with self._lock:
            requested, self._requested = self._requested, None
        if requested is not None:
            self._run, self._follow = requested, False
            self._switch(None, f"attached to run {requested}")
        try:
            run_dir = self._resolve()
        except RunNotFoundError as error:
            if self._follow and self._last is None:
                # `--latest --follow` opened before the root's first run: wait for it
                waiting = RunView(
                    run_id=LATEST_NAME,
                    run_dir=str(self.root),
                    following=True,
                    problem=f"no run under {self.root} yet; the first one started is shown",
                )
                return self._finish(waiting, remember=False)
            return self._stale(str(error))
        if run_dir != self._run_dir:
            if self._run_dir is not None and self._follow:
                self._notice = f"following latest: switched to the newer run {run_dir.name}"
            self._switch(run_dir, "")
        reader = self._reader
        if reader is None:
            path = metrics_files(run_dir)[0]
            if not path.exists():
                if self._last is None:
                    return self._finish(
                        RunView(
                            run_id=run_dir.name,
                            run_dir=str(run_dir),
                            following=self._follow,
                            problem=f"the trainer has not created {path} yet",
                        ),
                        remember=False,
                    )
                return self._stale(f"{path}: the metrics file is gone (run directory cleaned up?)")
            try:
                reader = self._open(run_dir)
            except MetricsFileError as error:
                return self._stale(str(error))
        try:
            run = reader.read()
            history = reader.history(self._history_head)
        except MetricsFileError as error:
            # Open the file again at the next look: a file replaced by a new one is read
            # from its start then; one that stays unreadable keeps its last values on screen.
            self._close_reader()
            self._wake.set()
            return self._stale(str(error))
        self._add_history(history, run_dir)
        return self._finish(self._view(run_dir, run, history.head))

    def _view(self, run_dir: Path, run: RunSnapshot, history_head: int) -> RunView:
        """What to draw for one good read of the run."""
        snapshot = run.total
        metrics = snapshot.metrics()
        uptime = run_uptime(
            snapshot.status,
            self.clock(),
            snapshot.created_wall_ns / 1e9,
            snapshot.heartbeat_wall_ns / 1e9,
            metrics.get(ELAPSED_BEFORE),
        )
        return RunView(
            # the directory's name, as `operant runs` and the exporter name it and commands
            # take it (a copied run's file still names the run it was copied from)
            run_id=run_dir.name,
            run_dir=str(run_dir),
            env_id=snapshot.env_id,
            status=snapshot.status,
            state=snapshot.state,
            interrupted=snapshot.interrupted,
            reason=snapshot.reason,
            pid=snapshot.pid,
            hostname=snapshot.hostname,
            uptime_s=max(0.0, uptime),
            heartbeat_age_s=snapshot.heartbeat_age_s,
            heartbeat_interval_s=snapshot.heartbeat_interval_s,
            progress=self._progress(run, history_head),
            metrics=metrics,
            columns=self._columns,
            history=self._curve_tuples,
            history_head=history_head,
            process=self._process_info(snapshot.status, snapshot.hostname, metrics),
            world_size=run.world_size,
            ranks=run.ranks,
            status_ranks=run.status_ranks,
            unread_ranks=run.unread_ranks,
            frame=snapshot.frame,
            following=self._follow,
        )

    def _progress(self, run: RunSnapshot, history_head: int) -> Progress:
        """Whether the run still trains, its updates' durations from the curves already read
        (the elapsed_s curve runs, without gaps, up to record `history_head` - 1)."""
        elapsed = self._curve_tuples.get(progress.ELAPSED, ())
        tail = elapsed[-(progress.RECENT_UPDATES + 1) :]
        return progress.assess(
            run.total,
            tail,
            max(0, history_head - len(tail)),
            stuck_after_s=self.stuck_after_s,
        )

    def _resolve(self) -> Path:
        if self._run is None and not self._follow and self._run_dir is not None:
            return self._run_dir  # --latest without --follow stays on the run it found
        return resolve_newest(self.root, self._run)

    def _open(self, run_dir: Path) -> RunReader:
        reader = RunReader(run_dir)
        schema = reader.schema
        columns = [
            MetricInfo(m.name, m.kind, m.unit, m.description)
            for m in schema.metrics
            if m.kind in (fmt.KIND_COUNTER, fmt.KIND_GAUGE, fmt.KIND_TEXT)
        ]
        columns += [MetricInfo(f.name, "snapshot", f.unit, f.description) for f in schema.snapshot]
        if self._last is not None and reader.created_wall_ns != self._created_ns:
            self._notice = "the metrics file was replaced by a new one; reading the new file"
            self._reset_curves()
        self._created_ns = reader.created_wall_ns
        self._reader = reader
        self._columns = tuple(columns)
        self._curves = {
            f.name: self._curves.get(f.name, deque(maxlen=MAX_CURVE_POINTS)) for f in schema.history
        }
        self._process = None
        # A run of several processes: their CPU and memory are the trainer's own gauges,
        # summed over the ranks (psutil would see one of them).
        if not reader.distributed and schema.hostname == self._hostname and reader.pid:
            try:
                process = psutil.Process(reader.pid)
                if abs(process.create_time() - reader.pid_start_time) <= _START_TOLERANCE_S:
                    process.cpu_percent()  # the first call only starts the measurement
                    self._process = process
            except psutil.Error:
                self._process = None
        return reader

    def _add_history(self, history, run_dir: Path) -> None:
        names = list(self._curves)
        if self._history_head == 0 and history.records and history.records[0].index > 0:
            # Attached late to a run whose ring has lapped its first records: the curves
            # start from progress.jsonl's, up to MAX_CURVE_POINTS in all, as a monitor
            # attached from the start draws them.
            room = MAX_CURVE_POINTS - len(history.records)
            first = history.records[0].index + 1  # record n is update n + 1
            for point in older_points(run_dir, names, first, room):
                for name, value in zip(names, point):
                    self._curves[name].append(value)
        for entry in history.records:
            for name, value in zip(names, entry.values):
                self._curves[name].append(value)
        self._history_head = history.head
        if history.records or len(self._curve_tuples) != len(names):
            # Frozen copies only when something changed: between updates a view hands the
            # app the very same tuples, and the curves see nothing to redraw.
            self._curve_tuples = {name: tuple(curve) for name, curve in self._curves.items()}

    def _process_info(
        self, status: str, hostname: str, metrics: dict[str, int | float | str]
    ) -> ProcessInfo | None:
        if self._process is not None and status in ("running", "stalled"):
            try:
                with self._process.oneshot():
                    return ProcessInfo(
                        self._process.cpu_percent(),
                        float(self._process.memory_info().rss),
                        "psutil",
                    )
            except psutil.Error:
                self._process = None
        cpu, rss = metrics.get("cpu_percent"), metrics.get("rss_bytes")
        if isinstance(cpu, (int, float)) or isinstance(rss, (int, float)):
            return ProcessInfo(
                float(cpu) if isinstance(cpu, (int, float)) else math.nan,
                float(rss) if isinstance(rss, (int, float)) else math.nan,
                "trainer",
            )
        return None

    def _switch(self, run_dir: Path | None, notice: str) -> None:
        self._close_reader()
        self._run_dir = run_dir
        self._last = None
        self._columns = ()
        self._reset_curves()
        if notice:
            self._notice = notice

    def _reset_curves(self) -> None:
        self._curves = {}
        self._curve_tuples = {}
        self._history_head = 0

    def _close_reader(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def _stale(self, problem: str) -> RunView:
        """The last values, marked with why they are not fresh."""
        if self._last is None:
            run_dir = self._run_dir
            name = run_dir.name if run_dir is not None else (self._run or LATEST_NAME)
            view = RunView(
                run_id=name,
                run_dir=str(run_dir or self.root),
                status=STATUS_UNKNOWN,
                problem=problem,
                following=self._follow,
            )
        else:
            view = msgspec.structs.replace(self._last, problem=problem, following=self._follow)
            if view.status in (STATUS_RUNNING, STATUS_STALLED) and self._trainer_gone():
                # its file unreadable and its trainer exited: "running" would stay forever
                view = msgspec.structs.replace(
                    view,
                    status=STATUS_UNKNOWN,
                    problem=f"{problem}; its trainer (pid {view.pid}) has exited",
                )
        return self._finish(view, remember=False)

    def _trainer_gone(self) -> bool:
        """Whether the trainer this monitor watched on this host has exited."""
        try:
            return self._process is not None and not self._process.is_running()
        except psutil.Error:
            return True

    def _finish(self, view: RunView, remember: bool = True) -> RunView:
        view = msgspec.structs.replace(view, taken_at=self.clock(), notice=self._notice)
        self._notice = ""
        if remember:
            self._last = view
        return view

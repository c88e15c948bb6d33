"""What the trainer publishes into its run's metrics file, and when.

The schema is built here from the declarations in operant.shared.record (every name, kind,
unit and description comes from there); readers (monitor, `operant runs`, `--json`,
exporter) render whatever it describes. Once per update the trainer stores counters
and gauges (one atomic word each), the per-phase times as one seqlocked snapshot (a coherent
breakdown), and one history record; a native thread ticks the heartbeat between updates,
so a long update never looks stalled. Nothing here runs per environment step.

A run whose observations are images, (C, H, W) of uint8 or bool (MinAtar's games), also
publishes env 0's latest observation once per update into the file's frame region
(`FrameSource`): the rule is the observation space's, not a family's, so a token env (Grid-v0's
(T, 3)) or a vector env publishes none.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from operant.envs.contract import NamesChannels, StacksFrames
from operant.shared import metrics_layout as layout
from operant.shared import record as names
from operant.shared.frame import frame_palette
from operant.shared.record import PHASES, MetricDeclaration, UpdateRecord

_PUBLISHED = tuple(declared for declared in names.RECORD_METRICS if declared.in_file)
_RECORD_CURVES = tuple(declared for declared in names.RECORD_METRICS if declared.in_history)


def _spec(declared: MetricDeclaration) -> tuple[str, str, str]:
    return declared.name, declared.unit, declared.description


COUNTERS = tuple(_spec(d) for d in _PUBLISHED if d.kind == names.COUNTER)
PROCESS_COUNTERS = tuple(_spec(d) for d in names.PROCESS_COUNTERS.values())
TRAINED = (_spec(names.TRAINED_STEPS),)
GAUGES = tuple(_spec(d) for d in (*_PUBLISHED, *names.RUN_METRICS) if d.kind == names.GAUGE)
TEXTS = tuple(_spec(d) for d in names.RUN_METRICS if d.kind == names.TEXT)
PHASE_FIELDS = tuple(_spec(d) for d in names.PHASE_METRICS)
HISTORY = tuple((d.name, d.unit) for d in (*_RECORD_CURVES, *names.PHASE_METRICS))
"""A history record: the record's curves in record order, then each phase's seconds."""

HISTORY_CAPACITY = 8192
HEARTBEAT_INTERVAL_S = 0.5
RESOURCE_INTERVAL_S = 1.0


def build_schema(
    run_id: str,
    env_id: str,
    env_phases: tuple[str, ...] = (),
    *,
    rank: int = 0,
    world_size: int = 1,
    local_rank: int = 0,
    node: str = "",
    frame: layout.FrameSpec | None = None,
) -> layout.Schema:
    """The run's schema; `env_phases` (a profiling env's step phases) add one gauge each.
    `rank` of `world_size` (with `local_rank` and `node`) says which process of a training
    group writes the file; the defaults, the only one. `frame` adds the frame region."""
    from operant import __version__

    return layout.make_schema(
        run_id,
        env_id=env_id,
        counters=(*COUNTERS, *PROCESS_COUNTERS, *TRAINED),
        gauges=(*GAUGES, *(_spec(d) for d in names.env_phase_metrics(env_phases))),
        texts=TEXTS,
        snapshot=PHASE_FIELDS,
        history=HISTORY,
        writer=f"operant {__version__}",
        rank=rank,
        world_size=world_size,
        local_rank=local_rank,
        node=node,
        frame=frame,
    )


class FrameSource:
    """Where the frame comes from: row 0 of an env's observation buffer, as bytes.

    Made once, at the start (the contract's buffers are never rebound): for a host buffer the
    bytes are a view of row 0's newest frame, so publishing copies it straight from the env's
    memory without allocating; a device buffer (a torch env on a GPU) is copied to the host
    once per update (a few hundred bytes for MinAtar).
    """

    def __init__(self, spec: layout.FrameSpec, buffer: Any, view: np.ndarray | None):
        self.spec = spec
        self._buffer = buffer
        self._view = view

    def frame(self) -> np.ndarray:
        """The newest frame of env 0, C*H*W uint8 in C order."""
        if self._view is not None:
            return self._view
        row = _host_row(self._buffer)
        if row is None:
            row = self._buffer[0].detach().to("cpu").numpy()
        return _row_bytes(row, self.spec)


def carried_steps(path: Path) -> int:
    """The steps the run's earlier processes trained: `trained_steps` of the metrics file at
    `path`, which this process's file is about to replace (a resumed or restarted run's); 0
    when there is none, or it is unreadable (a new run; a lost file: a counter reset)."""
    from operant.shared.reader import MetricsFileError, MetricsReader

    try:
        with MetricsReader(path) as reader:
            return int(reader.snapshot().counters.get(names.TRAINED_STEPS.name, 0))
    except (OSError, MetricsFileError):
        return 0


def _host_row(buffer: Any) -> np.ndarray | None:
    """Row 0 of a buffer in host memory (numpy, or a torch tensor on the CPU) as a numpy
    array sharing its memory; None for a device buffer."""
    if isinstance(buffer, np.ndarray):
        return buffer[0]
    if getattr(getattr(buffer, "device", None), "type", None) == "cpu":
        return buffer[0].numpy()
    return None


def _row_bytes(row: np.ndarray, spec: layout.FrameSpec) -> np.ndarray:
    """A row's last `spec.shape[0]` channels (its newest frame) as flat uint8; a view of the
    row's memory where it is contiguous (the contract's buffers are)."""
    channels = spec.shape[0]
    return np.ascontiguousarray(row[row.shape[0] - channels :]).reshape(-1).view(np.uint8)


def frame_source(env: Any) -> FrameSource | None:
    """The frame env 0 shows, for an env whose observation is an image, else None.

    An image is what `obs_spec` says it is, whatever the family: three dimensions, channels
    first, one byte per value (uint8 or bool) and not a 0-255 picture (ObsSpec.scale 1),
    within the frame region's bounds (metrics_layout.frame_problem). Channel names are the env's
    `channels` where it declares them (MinAtar's object kinds); an observation of k stacked frames
    (env.frame_stack, k x C channels) shows its newest frame, the last C channels (C from the
    declared names, or the stack's depth for an env that declares none). Everything else (vectors,
    Grid-v0's (T, 3) tokens, float images) has no frame.
    """
    spec = env.obs_spec
    if len(spec.shape) != 3 or spec.dtype not in (np.dtype(np.uint8), np.dtype(np.bool_)):
        return None
    if spec.scale != 1.0:  # 0-255 pictures: every cell of every channel would read as set
        return None
    declared = tuple(str(name) for name in env.channels) if isinstance(env, NamesChannels) else ()
    channels = spec.shape[0]
    if declared and channels % len(declared) == 0:
        channels = len(declared)
    else:
        declared = ()
        depth = env.depth if isinstance(env, StacksFrames) else 1
        if depth > 1 and channels % depth == 0:
            channels //= depth
    frame = layout.FrameSpec(
        shape=(channels, spec.shape[1], spec.shape[2]),
        dtype="bool" if spec.dtype == np.dtype(np.bool_) else "uint8",
        channels=declared,
        colors=frame_palette(channels),
    )
    if layout.frame_problem(frame):
        return None
    row = _host_row(env.obs)
    view = None
    if row is not None:
        view = _row_bytes(row, frame)
        if not np.shares_memory(view, row):
            view = None  # a copy would freeze the first frame: copy at each publish instead
    return FrameSource(frame, env.obs, view)


def _number(value: Any) -> float:
    return float("nan") if value is None else float(value)


class Publisher:
    """The trainer's side of the metrics file for one run, or for one rank of a run trained
    by several processes (`rank` of `world_size`: that rank's own file and values)."""

    def __init__(
        self,
        path: Path,
        run_id: str,
        env_id: str,
        impl: str,
        device: str,
        total_steps: int,
        env_phases: tuple[str, ...] = (),
        *,
        rank: int = 0,
        world_size: int = 1,
        local_rank: int = 0,
        node: str = "",
        frame: FrameSource | None = None,
        prepare: Callable[[Publisher], None] | None = None,
    ):
        """`frame` (`frame_source(env)`): publish env 0's latest observation each update.
        `prepare(publisher)`, where passed, gives the file its first values (a resumed run's:
        `resume`, `continue_history`, `set_elapsed_before`) before it appears under `path`."""
        self.schema = build_schema(
            run_id,
            env_id,
            env_phases,
            rank=rank,
            world_size=world_size,
            local_rank=local_rank,
            node=node,
            frame=frame.spec if frame is not None else None,
        )
        self.frame = frame
        self._start: dict[str, int] = {}  # the record's counters when this process began
        self._carried = carried_steps(path)  # before this process's file replaces it
        self._take_slots(env_phases)
        self._history_names = [d.name for d in _RECORD_CURVES]
        self._history = np.zeros(len(HISTORY), dtype=np.float64)
        self._phases = np.zeros(len(PHASE_FIELDS), dtype=np.float64)
        self._process = psutil.Process()
        self._process.cpu_percent()  # primes psutil's CPU-time baseline
        self._last_resources = 0.0
        self.writer = self._create_writer(path, total_steps, env_id, impl, device, prepare)

    def _take_slots(self, env_phases: tuple[str, ...]) -> None:
        """Look up once the schema's slot of every value `store` and `publish` write."""
        slot = self.schema.slot
        self._counter_slots = [(name, slot(name)) for name, _, _ in COUNTERS]
        self._process_slots = [
            (name, slot(declared.name)) for name, declared in names.PROCESS_COUNTERS.items()
        ]
        self._trained_slot = slot(names.TRAINED_STEPS.name)
        self._gauge_slots = [(d.name, slot(d.name)) for d in _PUBLISHED if d.kind == names.GAUGE]
        self._env_phase_slots = [
            (phase, slot(names.env_phase_metric(phase))) for phase in env_phases
        ]
        self._cpu_slot, self._rss_slot = slot(names.CPU_PERCENT.name), slot(names.RSS_BYTES.name)
        self._update_time_slot = slot(names.LAST_UPDATE_UNIX_S.name)

    def _create_writer(
        self,
        path: Path,
        total_steps: int,
        env_id: str,
        impl: str,
        device: str,
        prepare: Callable[[Publisher], None] | None,
    ) -> Any:
        """The metrics file's writer, the file given its first values (the run's size, env and
        device, the steps carried over, then `prepare`'s) before it appears under `path`."""
        from operant.cext.metrics import MetricsWriter

        slot = self.schema.slot

        def first_values(writer: Any) -> None:
            self.writer = writer
            writer.set_gauge(slot(names.TOTAL_STEPS.name), float(total_steps))
            writer.set_counter(self._trained_slot, self._carried)
            writer.set_text(slot(names.ENV_ID.name), env_id)
            writer.set_text(slot(names.ENV_IMPL.name), impl)
            writer.set_text(slot(names.DEVICE.name), device)
            if prepare is not None:
                prepare(self)

        return MetricsWriter.create(
            path,
            self.schema,
            history_capacity=HISTORY_CAPACITY,
            heartbeat_interval_s=HEARTBEAT_INTERVAL_S,
            prepare=first_values,
        )

    def set_elapsed_before(self, seconds: float) -> None:
        """Seconds the run trained before this process (a resumed run's), for the monitor's
        uptime."""
        self.writer.set_gauge(self.schema.slot(names.ELAPSED_BEFORE_S.name), float(seconds))

    def warn(self, text: str) -> None:
        """Show `text` as the run's warning (empty clears it)."""
        self.writer.set_text(self.schema.slot(names.WARNING.name), text)

    def start(self) -> None:
        """The run is running: heartbeat thread on, state word last."""
        self.writer.start_heartbeat()
        self.writer.set_state(layout.STATE_RUNNING)

    def publish(self, record: UpdateRecord) -> None:
        """Store `record`, the update this process just finished (`store`), then when it
        finished: last, so a reader that sees the time sees the record too. Readers tell a
        run whose heartbeat goes on but whose updates stopped (a hung env step) by it."""
        self.store(record)
        self.writer.set_gauge(self._update_time_slot, time.time())

    def store(self, record: UpdateRecord) -> None:
        """Store `record`'s counters and gauges, its phases (one snapshot) and its curves (one
        history record). A metric's name is the record's attribute that holds it."""
        writer = self.writer
        for name, slot in self._counter_slots:
            writer.set_counter(slot, int(getattr(record, name)))
        for name, slot in self._process_slots:
            # An earlier process's replayed record (resume) did nothing of this one's: 0.
            done = max(0, int(getattr(record, name)) - self._start.get(name, 0))
            writer.set_counter(slot, done)
            if name == "global_step":
                writer.set_counter(self._trained_slot, self._carried + done)
        for name, slot in self._gauge_slots:
            writer.set_gauge(slot, _number(getattr(record, name)))
        if record.env_phase_s is not None:
            for phase, slot in self._env_phase_slots:
                writer.set_gauge(slot, _number(record.env_phase_s.get(phase)))
        phases = record.phase_s
        for index, phase in enumerate(PHASES):
            self._phases[index] = _number(phases.get(phase))
        writer.publish_snapshot(self._phases)
        history = self._history
        for index, name in enumerate(self._history_names):
            history[index] = _number(getattr(record, name))
        history[len(self._history_names) :] = self._phases
        writer.append_history(history)
        if self.frame is not None:
            # After the record: a reader that sees update n's frame sees its record too.
            writer.publish_frame(self.frame.frame(), record.updates, record.global_step)
        now = time.monotonic()
        if now - self._last_resources >= RESOURCE_INTERVAL_S:
            # Two /proc reads: throttled so that even tiny updates pay for them rarely.
            self._last_resources = now
            writer.set_gauge(self._cpu_slot, self._process.cpu_percent())
            writer.set_gauge(self._rss_slot, float(self._process.memory_info().rss))

    def resume(self, records: list[UpdateRecord], counters: dict[str, int]) -> None:
        """Continue a resumed run in this new file (from `prepare`, before it appears):
        number the history from the first of `records` (the run's newest progress records,
        oldest first, at most HISTORY_CAPACITY), replay them, and so show the last one's
        values, as if this file had been written all along; the counters are `counters`
        (this process's own at the checkpoint: under torchrun a rank's, where the records
        hold the run's pooled ones), so no reader sees a counter step back. Readers of the
        run's previous file see it replaced and reopen."""
        self._start = dict(counters)
        if records:
            self.writer.skip_history(records[0].updates - 1)
            for record in records:
                self.store(record)  # updates of earlier processes: no update time of this one
        self.set_counters(counters)

    def continue_history(self, updates: int, counters: dict[str, int]) -> None:
        """Number this file's history from record `updates` on, replaying nothing: a resumed
        run's rank that has no progress records to replay (under torchrun only rank 0 reads
        progress.jsonl) still numbers record n as update n + 1, as every file of the run; its
        counters start from `counters`, its own at the checkpoint."""
        self.writer.skip_history(updates)
        self.set_counters(counters)

    def set_counters(self, counters: dict[str, int]) -> None:
        """The record's counters at `counters` (a checkpoint's), and this process's at 0."""
        self._start = {name: int(counters[name]) for name, _ in self._counter_slots}
        for name, slot in self._counter_slots:
            self.writer.set_counter(slot, int(counters[name]))
        for _, slot in self._process_slots:
            self.writer.set_counter(slot, 0)
        self.writer.set_counter(self._trained_slot, self._carried)

    def finish(self, interrupted: bool = False, reason: str = "") -> None:
        self.writer.set_state(layout.STATE_FINISHED, reason, interrupted=interrupted)

    def fail(self, reason: str) -> None:
        self.writer.set_state(layout.STATE_FAILED, reason)

    def close(self) -> None:
        self.writer.close()

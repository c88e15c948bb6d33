"""TensorBoard event files of a run (`train.tensorboard = true`, `operant-train --tensorboard`).

This module owns
- where a run's event files go: `runs/<run_id>/tensorboard/`, so `tensorboard --logdir
  RUNS_ROOT` shows every run (as `<run_id>/tensorboard`);
- which scalars an update writes (`SCALARS`): every counter and gauge of UpdateRecord, derived
  from operant.shared.record's table under progress.jsonl's names (`update`, `global_step`,
  `sps`, ...), a field holding a mapping as one scalar per key (`phase_s` as `phase/env`,
  `phase/forward`, ...), a bool as 0 or 1; a None (not measured) writes no point;
- `WriteTensorBoard`, the session's service (rank 0 only) that writes them.

The writer is torch.utils.tensorboard's `FileWriter` (the layer under its SummaryWriter), with
the `tensorboard` package as the optional extra `operant-rl[tensorboard]`: torch is a
dependency already, the same package is what reads and shows the files (`tensorboard
--logdir`, EventAccumulator), and its writer hands serialized events to one background thread
through a plain queue.Queue (tensorboardX sends protobuf objects through a
multiprocessing.Queue: a pipe, a feeder thread and a pickle per event; docs/tensorboard.md).

Off the loop's path: the loop's thread only appends an update's record to a deque. The
service's thread wakes every DRAIN_SECONDS, turns what is queued into events (one Summary of
all an update's values, not one event per scalar) and queues them for the FileWriter's thread,
which checksums, writes and flushes (every FLUSH_SECONDS) them. Both threads hold the
interpreter's lock while they work, so that work is kept small: tensorboard's per-byte Python
CRC32C is replaced by operant.cext.crc32c's (`use_compiled_checksum`).

A resumed run appends a new event file to the same folder and first writes a
SessionLog.START at the step after its checkpoint: TensorBoard's own sign of a restart, on
which its reader discards what the previous process wrote past the checkpoint (the updates
this process redoes), and the data server's series keep a redone step's newest value. Event
files that cannot be written (a full disk) cost one warning line; training goes on without
them.
"""

from __future__ import annotations

import collections
import sys
import threading
import typing
from pathlib import Path
from typing import Any

import msgspec

from operant.shared.record import RECORD_METRICS, TEXT, UpdateRecord
from operant.trainer.config import ConfigError
from operant.trainer.services.protocol import Role, Service

TENSORBOARD_DIR = "tensorboard"
"""The event files' folder inside a run directory."""
EXTRA = "pip install 'operant-rl[tensorboard]'"
FLUSH_SECONDS = 5.0
"""How often the writer's thread flushes: TensorBoard's own reload interval."""
QUEUE_EVENTS = 1000
"""Events (one per update) the FileWriter's queue holds before the service's thread waits."""
DRAIN_SECONDS = 1.0
"""How often the service's thread turns the updates queued since into events."""
REDO_SECONDS = 2 * (FLUSH_SECONDS + DRAIN_SECONDS)
"""A resumed run writes again its records of the last this many seconds before its
checkpoint: at most FLUSH_SECONDS + DRAIN_SECONDS of them can be unwritten, twice that for a
writer's thread that lagged."""


def _scalars() -> tuple[tuple[str, str, bool], ...]:
    """(attribute, tag, holds a mapping) for every numeric field of UpdateRecord, in
    progress.jsonl's order; a mapping's tag is its field's name without the unit's suffix."""
    fields = {field.name: field for field in msgspec.structs.fields(UpdateRecord)}
    scalars = []
    for declared in RECORD_METRICS:
        if declared.kind == TEXT:
            continue
        field = fields[declared.name]
        value_type = typing.get_args(field.type)[0]  # Annotated[type, declaration]
        # A mapping, or a mapping that may be None (env_phase_s).
        if dict in {typing.get_origin(t) for t in (value_type, *typing.get_args(value_type))}:
            tag = field.encode_name.removesuffix(f"_{declared.unit}")
            scalars.append((declared.name, tag, True))
        else:
            scalars.append((declared.name, field.encode_name, False))
    return tuple(scalars)


SCALARS = _scalars()
"""(UpdateRecord attribute, TensorBoard tag or tag prefix, holds a mapping), in order."""


def scalars(record: UpdateRecord) -> list[tuple[str, float]]:
    """The (tag, value) pairs one update writes; None values are left out."""
    pairs: list[tuple[str, float]] = []
    for attribute, tag, mapping in SCALARS:
        value = getattr(record, attribute)
        if mapping and value is not None:
            pairs.extend(
                (f"{tag}/{key}", float(item)) for key, item in value.items() if item is not None
            )
        elif not mapping and value is not None:
            pairs.append((tag, float(value)))
    return pairs


def use_compiled_checksum() -> None:
    """Give tensorboard's record writer operant.cext.crc32c's masked CRC32C in place of its
    Python loop over every byte (~70 us an event, holding the interpreter's lock; ~1 us here).
    The same function (tests/test_tensorboard.py); a writer already given another is left."""
    from tensorboard.compat.tensorflow_stub import (
        pywrap_tensorflow,
    )
    from tensorboard.summary.writer import record_writer

    from operant.cext.crc32c import masked_crc32c

    if record_writer.masked_crc32c is pywrap_tensorflow.masked_crc32c:
        record_writer.masked_crc32c = masked_crc32c


def unflushed(records: list[UpdateRecord]) -> list[UpdateRecord]:
    """The newest of a resumed run's records that its earlier process may have left
    unwritten (the FileWriter flushes every FLUSH_SECONDS after the service's thread queued
    them): those of the last REDO_SECONDS of its training, oldest first."""
    if not records:
        return []
    newest = records[-1].elapsed_s
    first = len(records) - 1
    while (
        first > 0
        and records[first - 1].elapsed_s <= records[first].elapsed_s  # not an earlier process
        and newest - records[first - 1].elapsed_s <= REDO_SECONDS
    ):
        first -= 1
    return records[first:]


def require() -> None:
    """Refuse, before anything starts, a run that asks for event files without the writer:
    ConfigError naming the setting and the extra to install."""
    try:
        import torch.utils.tensorboard  # noqa: F401
    except ImportError as error:
        raise ConfigError(
            f"train.tensorboard = true (--tensorboard) needs the tensorboard "
            f"package ({error}): {EXTRA}, or leave it off (--set train.tensorboard=false)"
        ) from None


class WriteTensorBoard(Service):
    """Every update's scalars (`scalars`) into the run's event files at its global_step.

    The loop's thread only appends the update's record to a deque. The service's own thread
    wakes every DRAIN_SECONDS (or at close), builds those records' events and hands them to
    the FileWriter, whose thread checksums and writes them."""

    role = Role.RANK_ZERO

    def __init__(self, directory: Path, trainer: Any, resumed: Any = None):
        """`resumed` (ContinueRecords, on before this): a resumed run's records, the newest
        of which the earlier process may not have flushed."""
        self.directory, self.trainer, self.resumed = directory, trainer, resumed
        self.writer: Any = None
        self._pending: collections.deque[UpdateRecord] = collections.deque()
        self._wake = threading.Event()
        self._closing = False
        self._thread: threading.Thread | None = None

    def on_start(self) -> None:
        # (untyped: see use_compiled_checksum)
        from tensorboard.compat.proto.event_pb2 import (
            Event,
            SessionLog,
        )
        from torch.utils.tensorboard import FileWriter

        use_compiled_checksum()
        try:
            self.writer = FileWriter(
                self.directory, max_queue=QUEUE_EVENTS, flush_secs=FLUSH_SECONDS
            )
            # TensorBoard's sign of a restart: what an earlier process wrote from this step on
            # is dropped: the updates a resumed run redoes after its checkpoint, and the
            # checkpoint's last records, which a killed process may not have flushed (they
            # are written again from progress.jsonl; a SIGKILL left a hole there for good).
            again = unflushed(self.resumed.records if self.resumed is not None else [])
            start = again[0].global_step if again else self.trainer.global_step + 1
            self.writer.add_event(
                Event(session_log=SessionLog(status=SessionLog.START)), step=start
            )
            self._pending.extend(again)
        except OSError as error:
            self._give_up(error)
            return
        self._thread = threading.Thread(
            target=self._drain_until_closed, name="operant-tensorboard", daemon=True
        )
        self._thread.start()

    def on_update(self, record: UpdateRecord) -> None:
        if self.writer is not None:
            self._pending.append(record)

    def close(self) -> None:
        if self._thread is not None:
            self._closing = True
            self._wake.set()
            self._thread.join()
            self._thread = None
        writer, self.writer = self.writer, None
        if writer is not None:
            try:
                writer.close()  # flushes, then ends the writer's thread
            except OSError as error:
                self._warn(error)

    def _drain_until_closed(self) -> None:
        # (untyped: see use_compiled_checksum)
        from tensorboard.compat.proto.summary_pb2 import Summary

        value = Summary.Value
        while self.writer is not None:
            self._wake.wait(DRAIN_SECONDS)
            closing = self._closing
            try:
                while self._pending:
                    record = self._pending.popleft()
                    values = [
                        value(tag=tag, simple_value=number) for tag, number in scalars(record)
                    ]
                    self.writer.add_summary(Summary(value=values), record.global_step)
            except OSError as error:  # the FileWriter's thread failed; it says so here
                self._give_up(error)
            if closing:
                return

    def _give_up(self, error: OSError) -> None:
        self._warn(error)
        writer, self.writer = self.writer, None
        if writer is not None:
            try:
                writer.close()
            except OSError:
                pass  # the same failure, said once already

    def _warn(self, error: OSError) -> None:
        print(
            f"operant-train: warning: cannot write TensorBoard event files in "
            f"{self.directory}: {error}; training goes on without them",
            file=sys.stderr,
            flush=True,
        )

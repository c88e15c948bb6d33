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

Off the loop's path: an update's scalars are one Event (one Summary of all its values, not
one event per scalar), serialized on the loop's thread and queued; the file's writes, its
checksums and its flushes (every FLUSH_SECONDS) happen on the writer's thread. The queue holds
QUEUE_EVENTS events, so the loop would wait on the disk only after that many updates stalled.

A resumed run appends a new event file to the same folder and first writes a
SessionLog.START at the step after its checkpoint: TensorBoard's own sign of a restart, on
which its reader discards what the previous process wrote past the checkpoint (the updates
this process redoes), and the data server's series keep a redone step's newest value. Event
files that cannot be written (a full disk) cost one warning line; training goes on without
them.
"""

from __future__ import annotations

import sys
import typing
from pathlib import Path
from typing import Any

import msgspec

from operant.shared.record import RECORD_METRICS, TEXT, UpdateRecord
from operant.trainer.config import ConfigError
from operant.trainer.service_protocol import Role, Service

TENSORBOARD_DIR = "tensorboard"
"""The event files' folder inside a run directory."""
EXTRA = "pip install 'operant-rl[tensorboard]'"
FLUSH_SECONDS = 5.0
"""How often the writer's thread flushes: TensorBoard's own reload interval."""
QUEUE_EVENTS = 1000
"""Events (one per update) the writer's queue holds before the loop would wait on the disk."""


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
    pairs = []
    for attribute, tag, mapping in SCALARS:
        value = getattr(record, attribute)
        if mapping and value is not None:
            pairs.extend(
                (f"{tag}/{key}", float(item)) for key, item in value.items() if item is not None
            )
        elif not mapping and value is not None:
            pairs.append((tag, float(value)))
    return pairs


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
    """Every update's scalars (`scalars`) into the run's event files at its global_step."""

    role = Role.RANK_ZERO

    def __init__(self, directory: Path, trainer: Any):
        self.directory, self.trainer = directory, trainer
        self.writer: Any = None
        self._summary: Any = None
        self._value: Any = None

    def on_start(self) -> None:
        from tensorboard.compat.proto.event_pb2 import Event, SessionLog
        from tensorboard.compat.proto.summary_pb2 import Summary
        from torch.utils.tensorboard import FileWriter

        self._summary, self._value = Summary, Summary.Value
        try:
            self.writer = FileWriter(
                self.directory, max_queue=QUEUE_EVENTS, flush_secs=FLUSH_SECONDS
            )
            # TensorBoard's sign of a restart: what an earlier process wrote past this step
            # (the updates a resumed run redoes after its checkpoint) is dropped.
            self.writer.add_event(
                Event(session_log=SessionLog(status=SessionLog.START)),
                step=self.trainer.global_step + 1,
            )
        except OSError as error:
            self._give_up(error)

    def on_update(self, record: UpdateRecord) -> None:
        if self.writer is None:
            return
        value = self._value
        summary = self._summary(
            value=[value(tag=tag, simple_value=number) for tag, number in scalars(record)]
        )
        try:
            self.writer.add_summary(summary, record.global_step)
        except OSError as error:  # the writer's thread failed; it says so here
            self._give_up(error)

    def close(self) -> None:
        writer, self.writer = self.writer, None
        if writer is not None:
            try:
                writer.close()  # flushes, then ends the writer's thread
            except OSError as error:
                self._warn(error)

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

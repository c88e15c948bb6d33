"""The services a training session runs around the loop (the hooks and roles they implement:
operant.trainer.services.protocol; the order they run in: operant.trainer.run.session.compose).
What a person reads is operant.trainer.run.console's; the verdict and best.pt,
operant.trainer.services.best's.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from operant.shared import atomic, runs
from operant.shared.record import UpdateRecord
from operant.trainer.checkpoint.resume import RunPlan
from operant.trainer.checkpoint.store import Checkpointer
from operant.trainer.config import Derived, to_dict
from operant.trainer.run.errors import describe_storage_error, is_storage_error, storage_errors
from operant.trainer.run.sdnotify import SystemdNotifier
from operant.trainer.run.signals import StopSignals
from operant.trainer.services.progress import (
    ProgressLog,
    console_mode,
    cut_progress,
    kept_length,
    number_or_dash,
    progress_tail,
)
from operant.trainer.services.protocol import Outcome, Rank, Role, Service

# Ask systemd for this many times the last checkpoint's duration (and at least the floor)
# before writing the shutdown checkpoint, in case TimeoutStopSec is short for it.
STOP_TIMEOUT_FACTOR = 4.0
STOP_TIMEOUT_FLOOR_S = 30.0


class StopOnSignal(Service):
    """SIGTERM/SIGINT (operant.trainer.run.signals) stop the loop at the next update boundary."""

    role = Role.EVERY_RANK

    def __init__(self, signals: StopSignals):
        self.signals = signals

    def on_boundary(self) -> bool:
        return self.signals.stop_requested


class ContinueRecords(Service):
    """A resumed run continues its records: the newest records it keeps (progress.jsonl up
    to the checkpoint's length; the updates after it are redone) are read back for the metrics
    file. Nothing is changed yet: `take_over` (CutRecords) cuts progress.jsonl and deletes
    checkpoints after the resumed one and writers' leftovers, once what can fail for want of
    space has been written, so a start that fails leaves the run as it was. A run restarted
    before its first checkpoint starts its records afresh."""

    def __init__(self, plan: RunPlan, progress_path: Path, checkpointer: Checkpointer):
        self.plan, self.progress_path, self.checkpointer = plan, progress_path, checkpointer
        self.records: list[UpdateRecord] = []
        """The run's newest progress records before this process, oldest first."""

    def on_start(self) -> None:
        payload = self.plan.payload
        if payload is not None:
            from operant.trainer.services.telemetry import HISTORY_CAPACITY

            kept = kept_length(self.progress_path, payload["progress_bytes"])
            self.records = progress_tail(self.progress_path, HISTORY_CAPACITY, end=kept)

    def take_over(self) -> None:
        payload = self.plan.payload
        if payload is not None:
            update = payload["trainer"]["counters"]["update"]
            cut_progress(self.progress_path, payload["progress_bytes"])
            self.checkpointer.remove_leftovers(newer_than=update)
            # (a plan's payload is its checkpoint's: resume._attach sets the two together)
            self.checkpointer.resumed_from(cast(Path, self.plan.checkpoint), update)
        elif self.plan.restart:
            cut_progress(self.progress_path, 0)
            self.checkpointer.remove_leftovers()

    def on_stopping(self, outcome: Outcome) -> None:
        # A resumed run that was already complete trained nothing: its last record is the log's.
        if outcome.last_record is None and self.records:
            outcome.last_record = self.records[-1]


class CutRecords(Service):
    """A resumed run's records cut back to its checkpoint (ContinueRecords.take_over): after
    the metrics file and run.json are written (a full disk refuses those), before progress.jsonl
    is appended to."""

    def __init__(self, records: ContinueRecords):
        self.records = records

    def on_start(self) -> None:
        self.records.take_over()


class RunRecord(Service):
    """run.json: what ran, where, with what; a resumed run keeps its start time and appends
    this process to its `resumes`."""

    def __init__(self, plan: RunPlan, run_dir: Path, impl: str, derived: Derived):
        self.plan, self.run_dir, self.impl, self.derived = plan, run_dir, impl, derived

    def on_start(self) -> None:
        atomic.write_json(self.run_dir / runs.RUN_FILE, self._metadata())

    def _metadata(self) -> dict[str, Any]:
        from operant.trainer.loop.train import run_metadata

        plan = self.plan
        metadata = run_metadata(plan.config, plan.run_id, self.impl, self.derived)
        if not (plan.payload or plan.restart):
            return metadata
        try:
            previous = json.loads((self.run_dir / runs.RUN_FILE).read_text())
        except (OSError, ValueError):
            previous = {}
        # What started the run stays (it was rebuilt from each resuming process): when, with
        # what command, from where; `pid` is the process that holds the run now, and each
        # resume's own command is in its entry
        for key in ("started_at", "argv", "cwd"):
            metadata[key] = previous.get(key, metadata[key])
        metadata["resumes"] = [
            *previous.get("resumes", []),
            {
                "at": time.time(),
                "pid": os.getpid(),
                "argv": sys.argv,
                "cwd": os.getcwd(),
                "checkpoint": plan.checkpoint.name if plan.checkpoint else None,
                "update": plan.resumed_update,
            },
        ]
        return metadata


class PublishMetrics(Service):
    """The metrics file (operant.trainer.services.telemetry.Publisher): created complete,
    continuing a
    resumed run's history, one record per update, and its state at the end. Every rank of a
    run trained by several processes writes its own file (operant.shared.runs.metrics_path)
    with its own values: the steps it stepped, its steps/s, its episodes' returns; readers
    add them up (operant.shared.ranks)."""

    role = Role.EVERY_RANK

    def __init__(
        self,
        plan: RunPlan,
        run_dir: Path,
        trainer: Any,
        history: ContinueRecords,
        *,
        rank: Rank | None = None,
    ):
        self.plan, self.run_dir, self.trainer, self.history = plan, run_dir, trainer, history
        self.rank = rank or Rank()
        self.publisher: Any = None

    def on_start(self) -> None:
        from operant.trainer.services.telemetry import Publisher, frame_source

        config = self.plan.config
        rank, world_size = self.rank.rank, self.rank.world_size
        path = runs.metrics_path(self.run_dir, rank, world_size)
        path.parent.mkdir(parents=True, exist_ok=True)  # another node: no run dir yet
        # A pixel env's latest frame (env 0); none for other envs or a trainer without one.
        env = getattr(self.trainer, "env", None)
        self.publisher = Publisher(
            path,
            self.plan.run_id,
            config.env.id,
            self.trainer.impl,
            config.train.device,
            self.trainer.derived.total_steps,
            env_phases=self.trainer.env_phases(),
            rank=rank,
            world_size=world_size,
            local_rank=self.rank.local_rank,
            node=socket.gethostname() if world_size > 1 else "",
            frame=frame_source(env) if env is not None else None,
            prepare=self._first_values,
        )
        self.publisher.start()

    def _first_values(self, publisher: Any) -> None:
        """A resumed run's file, before it appears: its history replayed and this process's
        own counters at the checkpoint (a reader saw them climb from 0, or a rank's file
        holding the run's pooled ones, and took it for a counter reset)."""
        trainer = self.trainer
        publisher.set_elapsed_before(trainer.elapsed_offset_s)
        if not (self.history.records or trainer.update):
            return  # a new run: its counters start at 0
        counters = {
            "updates": trainer.update,
            "global_step": trainer.global_step // trainer.derived.world_size,
            "episodes": trainer.episodes,
        }
        if self.history.records:
            publisher.resume(self.history.records, counters)
        else:
            # A resumed run's rank other than 0: the run's records are rank 0's to replay
            # (ContinueRecords runs there), but its file's records keep the run's numbers,
            # so readers combine the ranks' record n (operant.shared.ranks).
            publisher.continue_history(trainer.update, counters)

    def warn(self, text: str) -> None:
        """The metrics file's warning text (empty clears it)."""
        if self.publisher is not None:
            self.publisher.warn(text)

    def on_update(self, record: Any) -> None:
        # This rank's own values (the run's are pooled over its ranks under torchrun).
        self.publisher.publish(getattr(self.trainer, "rank_record", None) or record)

    def on_stop(self, outcome: Outcome) -> None:
        publisher = self.publisher
        if publisher is None:  # its creation failed
            return
        kind = outcome.kind
        if kind == "finished":
            publisher.finish()
        elif kind == "stopped":
            reason = f"stopped by {outcome.stopped_by} at update {self.trainer.update}" + (
                f"; checkpoint {outcome.checkpoint.name}" if outcome.checkpoint else ""
            )
            publisher.finish(interrupted=True, reason=reason)
        elif kind == "failed" and isinstance(outcome.error, FloatingPointError):
            publisher.fail(f"non-finite values: {outcome.error}")
        elif kind == "failed":
            publisher.fail(str(outcome.error))
        elif kind == "interrupted":
            publisher.finish(
                interrupted=True,
                reason="interrupted by a second SIGINT, without a final checkpoint",
            )
        elif kind == "no_space":
            publisher.fail(f"the disk is full: {outcome.error}")
        else:
            publisher.fail(f"{type(outcome.error).__name__}: {outcome.error}")

    def close(self) -> None:
        if self.publisher is not None:
            self.publisher.close()


class UpdateLatest(Service):
    """The runs root's `latest` points at this run once its metrics file exists (so it goes
    after PublishMetrics)."""

    def __init__(self, plan: RunPlan):
        self.plan = plan

    def on_start(self) -> None:
        problem = runs.update_latest(self.plan.root, self.plan.run_id)
        if problem is not None:
            print(f"operant-train: warning: {problem}", file=sys.stderr, flush=True)


class WriteProgress(Service):
    """Every update's record to progress.jsonl, and to stdout as operant.trainer.services.progress's
    console_mode says; a terminal's status line ends when the run stops, before the lines
    that say how it ended."""

    def __init__(
        self,
        path: Path,
        args: Any,
        plan: RunPlan,
        derived: Derived,
        signals: StopSignals | None = None,
    ):
        self.path, self.args, self.plan = path, args, plan
        self.derived, self.signals = derived, signals
        self.log: ProgressLog | None = None

    def on_start(self) -> None:
        config, args = self.plan.config, self.args
        self.log = ProgressLog(
            self.path,
            sys.stdout,
            console_mode(args.log_format, sys.stdout),
            config.train.log_every,
            self.derived.num_updates,
            args.quiet,
            total_steps=self.derived.total_steps,
        )
        if self.log.live is not None and self.signals is not None:
            self.signals.line_start = self.log.live.erase_prefix()

    def on_update(self, record: Any) -> None:
        cast(ProgressLog, self.log)(record)  # (made in on_start, before any update)

    def on_stop(self, outcome: Outcome) -> None:
        self._end_line()

    def _end_line(self) -> None:
        if self.log is not None:
            self.log.end_line()
        if self.signals is not None:
            self.signals.line_start = b""

    def synced_length(self) -> int:
        """progress.jsonl's length once everything written so far is on disk."""
        handle = cast(ProgressLog, self.log).file  # (made in on_start)
        handle.flush()
        os.fsync(handle.fileno())
        return handle.tell()

    def close(self) -> None:
        if self.log is None:
            return
        self._end_line()
        try:
            self.log.close()
        except OSError as error:
            # A full disk, or a filesystem turned read-only (operant.trainer.run.run_dir_watch),
            # that refused the last lines has ended the run already, and said so.
            if not (is_storage_error(error) or error.errno == errno.EROFS):
                raise


class Checkpoints(Service):
    """Periodic checkpoints (checkpoint.every_updates / every_seconds), one on SIGUSR1 (said in
    one line), and the final one when the loop ends cleanly; never for update 0, never twice
    for one. A periodic or SIGUSR1 checkpoint the disk refuses is one warning line and the
    metrics file's warning (operant.trainer.run.errors: the full-disk policy); the next
    interval tries again. A final one it refuses ends the run (the error propagates:
    Outcome.kind "no_space")."""

    def __init__(
        self,
        trainer: Any,
        checkpointer: Checkpointer,
        signals: StopSignals,
        progress: WriteProgress,
        warn: Callable[[str], None] = lambda text: None,
        explain: Callable[[BaseException], BaseException] = lambda error: error,
    ):
        self.trainer, self.checkpointer, self.signals = trainer, checkpointer, signals
        self.progress, self.warn = progress, warn
        self.explain = explain
        """The run directory's watch (WatchRunDir.explain): a refused write that its loss
        caused ends the run instead of a warning."""
        self.config_dict = to_dict(trainer.config)
        self.failing = False
        """The last periodic checkpoint was refused (warned once until one is written)."""

    def on_boundary(self) -> bool:
        # A request before the first update waits for it (update 0 has no checkpoint: the
        # request was taken there and dropped, nothing said)
        requested = self.trainer.update > 0 and self.signals.take_checkpoint_request()
        if requested or self.checkpointer.due(self.trainer.update):
            path = self._try_checkpoint()
            if requested and path is not None:
                print(
                    f"operant-train: SIGUSR1: checkpoint {path} (update "
                    f"{self.trainer.update}, step {self.trainer.global_step:,})",
                    file=sys.stderr,
                    flush=True,
                )
        return self.signals.stop_requested  # a signal during that checkpoint stops here too

    def _refused(self, error: OSError) -> str:
        """Why the disk refused a checkpoint (the space free, the size needed), the refusal
        counted; an error that is not a full disk propagates."""
        if not is_storage_error(error):
            raise error
        lost = self.explain(error)
        if lost is not error:
            # the run directory's loss (ext4 turned read-only on a disk error, which fails the
            # write in flight with EIO): the run ends in its one line, not a full disk's warning
            raise lost
        self.checkpointer.failed()
        return describe_storage_error(
            error, self.checkpointer.directory, self.checkpointer.last_size
        )

    def _try_checkpoint(self) -> Path | None:
        try:
            path = self.checkpoint()
        except OSError as error:
            text = (
                f"checkpoint of update {self.trainer.update} not written: "
                f"{self._refused(error)}; training goes on, the next checkpoint interval tries "
                "again"
            )
            self.warn(text)
            if not self.failing:
                print(f"operant-train: warning: {text}", file=sys.stderr, flush=True)
            self.failing = True
            return None
        if self.failing:
            self.failing = False
            self.warn("")
            print(
                f"operant-train: checkpoints are written again: {path}", file=sys.stderr, flush=True
            )
        return path

    def on_stopping(self, outcome: Outcome) -> None:
        if outcome.model is not None:
            # The run finished and its policy is written (model.pt first, SaveModel): a disk
            # that refuses the final checkpoint now costs only training it further, a warning
            # as for a periodic one; the run ends finished.
            outcome.checkpoint = self._try_final() or self.checkpointer.last_path
            return
        outcome.writing = "the final checkpoint"
        outcome.checkpoint = self.checkpoint()
        outcome.writing = ""

    def _try_final(self) -> Path | None:
        try:
            return self.checkpoint()
        except OSError as error:
            last = self.checkpointer.last_path
            text = (
                f"the final checkpoint not written: {self._refused(error)}; model.pt holds the "
                "finished policy; "
                + (f"a resume continues from {last}" if last else "the run has no checkpoint")
            )
            self.warn(text)
            print(f"operant-train: warning: {text}", file=sys.stderr, flush=True)
            return None

    def checkpoint(self) -> Path | None:
        """A checkpoint of the current update, or the newest one if it has one already."""
        update = self.trainer.update
        if update == 0 or update == self.checkpointer.last_update:
            return self.checkpointer.last_path
        return self.checkpointer.save(self.trainer, self.config_dict, self.progress.synced_length())


class SaveModel(Service):
    """model.pt, the policy with what it needs to act, when the run has finished. A lone
    trainer writes it before the final checkpoint (operant.trainer.run.session.compose): on a disk
    with room for one of them, the finished policy is what is kept."""

    def __init__(self, trainer: Any, run_dir: Path):
        self.trainer, self.run_dir = trainer, run_dir

    def on_stopping(self, outcome: Outcome) -> None:
        if outcome.kind == "finished":
            outcome.writing = "model.pt"
            with storage_errors():
                self.trainer.save_model(self.run_dir / "model.pt")
            outcome.writing, outcome.model = "", self.run_dir / "model.pt"


class NotifySystemd(Service):
    """sd_notify (operant.trainer.run.sdnotify): READY with the first update's status, STATUS per
    update, watchdog pings while steps advance, STOPPING with more time before the shutdown
    checkpoint, a forced STATUS on failure. Silent without $NOTIFY_SOCKET."""

    def __init__(
        self,
        notifier: SystemdNotifier,
        checkpointer: Checkpointer,
        trainer: Any,
        total_updates: int,
    ):
        self.notifier, self.checkpointer, self.trainer = notifier, checkpointer, trainer
        self.total_updates = total_updates
        self.ready = False

    def on_start(self) -> None:
        if self.notifier.environment_error:
            print(f"operant-train: {self.notifier.environment_error}", file=sys.stderr)

    def on_update(self, record: Any) -> None:
        self.notifier.progress(record.global_step)
        status = (
            f"training: update {record.updates}/{self.total_updates}, "
            f"step {record.global_step:,}, {record.sps:,.0f} steps/s, return "
            f"{number_or_dash(record.episode_return_mean, '.1f')}"
        )
        if self.ready:
            self.notifier.status(status)
        else:
            self.notifier.ready(status)
            self.ready = True

    def on_stopping(self, outcome: Outcome) -> None:
        # READY=1 if it was never sent (a run stopped or finished before its first update):
        # systemd's start job must end before its stop job can.
        if not self.ready:
            self.notifier.ready("starting")
            self.ready = True
        if outcome.stopped_by:
            self.notifier.stopping(
                f"{outcome.stopped_by}: checkpointing at step {self.trainer.global_step:,}"
            )
            self.notifier.extend_timeout(
                max(STOP_TIMEOUT_FLOOR_S, STOP_TIMEOUT_FACTOR * self.checkpointer.last_duration_s)
            )

    def on_stop(self, outcome: Outcome) -> None:
        if outcome.kind == "finished":
            self.notifier.stopping("finished")
        elif outcome.kind == "failed":
            self.notifier.status(f"failed: {outcome.error}", force=True)

    def close(self) -> None:
        self.notifier.close()


class ReleaseRunLock(Service):
    """The run directory's lock (taken when the run was planned) is released last but one:
    after every file of the run is closed."""

    def __init__(self, plan: RunPlan):
        self.plan = plan

    def close(self) -> None:
        self.plan.release()

"""One trainer process's life around the training loop: start or resume, run, stop cleanly.

`run()` is what operant-train does once it knows what to train (trainer.resume.RunPlan):

1. build the trainer and, when resuming, load the checkpoint into it (any refusal happens
   before the run directory is touched);
2. continue the run's records: progress.jsonl is cut back to the checkpoint's length (the
   updates after it are redone) and appended to; a new metrics.bin replaces the old one and
   continues its history (docs/metrics-file.md, "Resumed runs");
3. train, with a `Supervisor` between updates: the NaN guard, sd_notify, periodic and
   on-demand checkpoints, and the stop flag that SIGTERM/SIGINT set (trainer.signals);
4. end: a final checkpoint and the model when the budget is spent; a checkpoint and
   finished+interrupted when stopped by a signal (exit 0, so a service restart resumes); the
   run marked failed and the last good checkpoint kept on a NaN (exit 1).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from operant.shared import runs
from operant.trainer.checkpoint import Checkpointer, CheckpointError
from operant.trainer.config import to_dict
from operant.trainer.main import EXIT_FAILED, EXIT_OK, EXIT_USAGE, ProgressLog, _fmt
from operant.trainer.resume import RunPlan, cut_progress, progress_tail
from operant.trainer.sdnotify import SystemdNotifier
from operant.trainer.signals import StopSignals

EXIT_INTERRUPTED = 130
# Ask systemd for this many times the last checkpoint's duration (and at least the floor)
# before writing the shutdown checkpoint, in case TimeoutStopSec is short for it.
STOP_TIMEOUT_FACTOR = 4.0
STOP_TIMEOUT_FLOOR_S = 30.0


def _sync_length(progress: ProgressLog) -> int:
    """progress.jsonl's length once everything written so far is on disk."""
    handle = progress.file
    handle.flush()
    os.fsync(handle.fileno())
    return handle.tell()


class Supervisor:
    """What happens between updates. `log` is the trainer's per-update callback; `at_boundary`
    is its `should_stop`, called before every update."""

    def __init__(self, trainer: Any, checkpointer: Checkpointer, signals: StopSignals,
                 notifier: SystemdNotifier, progress: ProgressLog, publisher: Any,
                 total_updates: int):
        self.trainer, self.checkpointer, self.signals = trainer, checkpointer, signals
        self.notifier, self.progress, self.publisher = notifier, progress, publisher
        self.total_updates = total_updates
        self.config_dict = to_dict(trainer.config)
        self.ready = False

    def log(self, record: dict[str, Any]) -> None:
        # The NaN guard comes first: an update that produced non-finite parameters is never
        # published, logged or checkpointed.
        self.trainer.check_finite()
        if self.publisher is not None:
            self.publisher.publish(record)
        self.progress(record)
        self.notifier.progress(record["global_step"])
        status = (f"training: update {record['update']}/{self.total_updates}, step "
                  f"{record['global_step']:,}, {record['sps']:,.0f} steps/s, return "
                  f"{_fmt(record.get('episode_return_mean'), '.1f')}")
        if self.ready:
            self.notifier.status(status)
        else:
            self.notifier.ready(status)
            self.ready = True

    def at_boundary(self) -> bool:
        if self.signals.stop_requested:
            return True
        if (self.signals.take_checkpoint_request()
                or self.checkpointer.due(self.trainer.update)):
            self.checkpoint()
        return self.signals.stop_requested  # a signal during that checkpoint stops here too

    def checkpoint(self) -> Path | None:
        """A checkpoint of the current update (none for update 0, nor twice for one update)."""
        update = self.trainer.update
        if update == 0 or update == self.checkpointer.last_update:
            return self.checkpointer.last_path
        return self.checkpointer.save(self.trainer, self.config_dict, _sync_length(self.progress))

    def ensure_ready(self) -> None:
        """READY=1 if it was never sent (a run stopped or finished before its first update):
        systemd's start job must end before its stop job can."""
        if not self.ready:
            self.notifier.ready("starting")
            self.ready = True


def _run_metadata(plan: RunPlan, trainer: Any) -> dict[str, Any]:
    from operant.trainer.train import run_metadata

    metadata = run_metadata(plan.config, plan.run_id, trainer.impl)
    if plan.run_dir is None or not (plan.payload or plan.restart):
        return metadata
    try:
        previous = json.loads((plan.run_dir / runs.RUN_FILE).read_text())
    except (OSError, ValueError):
        previous = {}
    metadata["started_at"] = previous.get("started_at", metadata["started_at"])
    metadata["resumes"] = [*previous.get("resumes", []), {
        "at": time.time(), "pid": os.getpid(), "argv": sys.argv,
        "checkpoint": plan.checkpoint.name if plan.checkpoint else None,
        "update": plan.resumed_update,
    }]
    return metadata


def run(args: Any, plan: RunPlan, signals: StopSignals) -> int:
    """Train what `plan` says; returns operant-train's exit status."""
    from operant.shared import atomic
    from operant.trainer.state import restore_global_rng
    from operant.trainer.train import Trainer

    config, derived = plan.config, plan.derived
    try:
        trainer = Trainer(config)
        if plan.payload is not None:
            trainer.load_state_dict(plan.payload["trainer"])
            restore_global_rng(plan.payload["rng"])
    except CheckpointError as error:
        print(f"operant-train: {plan.checkpoint}: {error}", file=sys.stderr)
        plan.release()
        return EXIT_USAGE
    from operant.trainer import resume

    try:
        run_dir = resume.create(plan)
    except FileExistsError:
        print(f"operant-train: run {plan.run_id!r} already exists under {plan.root}; resume it "
              f"with --resume {plan.run_id}, or choose another --run-id", file=sys.stderr)
        return EXIT_USAGE
    except (OSError, ValueError, resume.RunInUseError) as error:
        print(f"operant-train: cannot create the run directory under {plan.root}: {error}",
              file=sys.stderr)
        return EXIT_USAGE
    trainer.run_dir = run_dir

    notifier = SystemdNotifier.from_environ(unset_environment=True)
    if notifier.environment_error:
        print(f"operant-train: {notifier.environment_error}", file=sys.stderr)
    progress_path = run_dir / runs.PROGRESS_FILE
    checkpointer = Checkpointer(run_dir / runs.CHECKPOINT_DIR, config.checkpoint.every_updates,
                                config.checkpoint.every_seconds, config.checkpoint.keep,
                                beat=notifier.beat)
    tail: list[dict[str, Any]] = []
    if plan.payload is not None:
        cut_progress(progress_path, plan.payload["progress_bytes"])
        checkpointer.remove_leftovers(newer_than=trainer.update)
        checkpointer.resumed_from(plan.checkpoint, trainer.update)
        from operant.trainer.telemetry import HISTORY_CAPACITY

        tail = progress_tail(progress_path, HISTORY_CAPACITY)
    elif plan.restart:
        cut_progress(progress_path, 0)
        checkpointer.remove_leftovers()

    progress = ProgressLog(progress_path, sys.stdout, args.log_format, config.train.log_every,
                           derived.num_updates, args.quiet)
    publisher = None
    supervisor = None
    run_id = plan.run_id
    try:
        atomic.write_json(run_dir / runs.RUN_FILE, _run_metadata(plan, trainer))
        if config.train.publish_metrics:
            from operant.trainer.telemetry import Publisher

            # The metrics file appears complete (os.replace), then `latest` points at it.
            publisher = Publisher(run_dir / runs.METRICS_FILE, run_id, config.env.id,
                                  trainer.impl, config.train.device, config.train.total_steps)
            publisher.resume(tail)
        runs.update_latest(plan.root, run_id)
        supervisor = Supervisor(trainer, checkpointer, signals, notifier, progress, publisher,
                                derived.num_updates)
        trainer.log = supervisor.log
        if args.log_format == "plain" and not args.quiet:
            origin = (f", resumed at update {trainer.update} from {plan.checkpoint.name}"
                      if plan.payload is not None else "")
            print(f"run {run_id}: {config.env.id} ({trainer.impl}), {config.env.num_envs} envs, "
                  f"{derived.num_updates} updates of {derived.batch_size} steps{origin} -> "
                  f"{run_dir}", flush=True)
        elif plan.payload is not None:
            print(f"operant-train: run {run_id} resumed at update {trainer.update} from "
                  f"{plan.checkpoint}", file=sys.stderr, flush=True)
        if publisher is not None:
            publisher.start()
        started = time.perf_counter()
        # A resumed run that is already complete trains nothing: its last record is the log's.
        last = trainer.run(should_stop=supervisor.at_boundary) or (tail[-1] if tail else {})
        supervisor.ensure_ready()
        stopped_by = signals.name
        if stopped_by:
            notifier.stopping(f"{stopped_by}: checkpointing at step {trainer.global_step:,}")
            notifier.extend_timeout(max(STOP_TIMEOUT_FLOOR_S,
                                        STOP_TIMEOUT_FACTOR * checkpointer.last_duration_s))
        path = supervisor.checkpoint()
        if stopped_by:
            reason = (f"stopped by {stopped_by} at update {trainer.update}"
                      + (f"; checkpoint {path.name}" if path else ""))
            if publisher is not None:
                publisher.finish(interrupted=True, reason=reason)
        else:
            trainer.save_model(run_dir / "model.pt")
            if publisher is not None:
                publisher.finish()
            notifier.stopping("finished")
    except FloatingPointError as error:
        if publisher is not None:
            publisher.fail(f"non-finite values: {error}")
        notifier.status(f"failed: {error}", force=True)
        kept = (f"; the last good checkpoint is {checkpointer.last_path}"
                if checkpointer.last_path else "; no checkpoint was written")
        print(f"operant-train: training failed: {error}{kept}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        if publisher is not None:
            publisher.finish(interrupted=True,
                             reason="interrupted by a second SIGINT, without a final checkpoint")
        print(f"operant-train: interrupted; the last checkpoint is "
              f"{checkpointer.last_path or 'none'}; run directory {run_dir}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BaseException as error:
        if publisher is not None:
            publisher.fail(f"{type(error).__name__}: {error}")
        raise
    finally:
        progress.close()
        if publisher is not None:
            publisher.close()
        notifier.close()
        plan.release()
    _summary(args, run_id, trainer, last, time.perf_counter() - started, run_dir, stopped_by,
             path)
    return EXIT_OK


def _summary(args: Any, run_id: str, trainer: Any, last: dict[str, Any], seconds: float,
             run_dir: Path, stopped_by: str, path: Path | None) -> None:
    summary = {
        "run_id": run_id, "global_step": trainer.global_step,
        "episode_return_mean": last.get("episode_return_mean"),
        "elapsed_s": round(seconds, 3),
        "sps_mean": last.get("sps_mean"), "solved_at_s": trainer.solved_at,
        "run_dir": str(run_dir),
        "stopped_by": stopped_by or None,
        "checkpoint": str(path) if path else None,
    }
    if args.log_format == "json":
        print(json.dumps({"summary": summary}), flush=True)
        return
    if stopped_by:
        print(f"stopped by {stopped_by} at step {trainer.global_step:,} (update "
              f"{trainer.update}); checkpoint {path or 'none'}; continue with "
              f"operant-train --resume {run_id}", flush=True)
        return
    solved = (f", solved in {trainer.solved_at:.2f}s" if trainer.solved_at is not None else "")
    print(f"done: {summary['global_step']:,} steps in {summary['elapsed_s']:.1f}s "
          f"({_fmt(summary['sps_mean'], ',.0f')} steps/s), mean return of the last 100 "
          f"episodes {_fmt(summary['episode_return_mean'], '.1f')}{solved} -> {run_dir}",
          flush=True)

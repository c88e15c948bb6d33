"""One trainer process's life around the training loop: start or resume, run, stop cleanly.

`run()` is what operant-train does once it knows what to train (trainer.resume.RunPlan):

1. build the trainer and, when resuming, load the checkpoint into it; then create (or take
   over) the run directory. Any refusal happens here, before the run directory is touched;
2. compose the session's services (operant.trainer.services.hooks; their hooks and roles:
   operant.trainer.services.protocol) and start them: the metrics file (a resumed run's new
   metrics.bin continues the old history), run.json, then the run's records continue (a
   resumed run's progress.jsonl is cut back to its checkpoint: only once the writes a full
   disk can refuse are done, so a start that fails leaves the run as it was), `latest`;
3. train: the services see every record (NaN guard, metrics, progress log, systemd) and every
   update boundary (stop signals, periodic and on-demand checkpoints);
4. end: a final checkpoint and the model when the budget is spent; a checkpoint and
   finished+interrupted when stopped by a signal (exit 0, so a service restart resumes); the
   run marked failed and the last good checkpoint kept on a NaN (exit 1); exit 130 on a
   second SIGINT, without a new checkpoint.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from operant.envs.reference import step_deadline
from operant.envs.registry import EnvFailedError
from operant.shared import runs
from operant.trainer.checkpoint.file_format import CheckpointError
from operant.trainer.checkpoint.resume import RunPlan
from operant.trainer.checkpoint.store import Checkpointer
from operant.trainer.run.console import Console, env_failed_at_start
from operant.trainer.run.errors import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_NO_SPACE,
    EXIT_OK,
    EXIT_USAGE,
    describe_storage_error,
    is_storage_error,
)
from operant.trainer.run.run_dir_watch import WatchRunDir
from operant.trainer.run.sdnotify import SystemdNotifier
from operant.trainer.run.signals import StopSignals
from operant.trainer.services.best import TrackBest
from operant.trainer.services.hooks import (
    Checkpoints,
    ContinueRecords,
    CutRecords,
    NotifySystemd,
    PublishMetrics,
    ReleaseRunLock,
    RunRecord,
    SaveModel,
    StopOnSignal,
    UpdateLatest,
    WriteProgress,
)
from operant.trainer.services.protocol import HOOKS, Outcome, Rank, Role, Service
from operant.trainer.services.tensorboard import TENSORBOARD_DIR, WriteTensorBoard

_EXIT = {
    "finished": EXIT_OK,
    "stopped": EXIT_OK,
    "failed": EXIT_FAILED,
    "interrupted": EXIT_INTERRUPTED,
    "no_space": EXIT_NO_SPACE,
}


def run(args: Any, plan: RunPlan, signals: StopSignals) -> int:
    """Train what `plan` says; returns operant-train's exit status."""
    try:
        trainer = build_trainer(plan)
    except CheckpointError as error:
        print(f"operant-train: {plan.checkpoint}: {error}", file=sys.stderr)
        plan.release()
        return EXIT_USAGE
    except EnvFailedError as error:  # the user's env, built and reset with the trainer
        env_failed_at_start(plan, error)
        plan.release()
        return EXIT_FAILED
    from operant.trainer.run.main import say_notes

    say_notes(plan)
    fresh = plan.run_dir is None
    run_dir, status = open_run_dir(plan)
    if run_dir is None:
        return status
    trainer.run_dir = run_dir
    session = Session(trainer, compose(args, plan, signals, trainer, run_dir), signals)
    status = session.run()
    if status == EXIT_NO_SPACE and fresh and not session.started:
        # A new run that could not start leaves nothing behind (its lock is released).
        from operant.trainer.checkpoint.resume import discard

        discard(plan)
    return status


def build_trainer(plan: RunPlan, group: Any = None) -> Any:
    """The trainer (of this rank, under torchrun), with the checkpoint's state when resuming;
    CheckpointError if it does not fit."""
    from operant.trainer.checkpoint.state import restore_global_rng
    from operant.trainer.loop.train import Trainer

    trainer = Trainer(plan.config, group=group, derived=plan.derived)
    if plan.payload is not None:
        trainer.load_state_dict(plan.payload["trainer"])
        restore_global_rng(plan.payload["rng"])
    return trainer


def open_run_dir(plan: RunPlan) -> tuple[Path | None, int]:
    """The run's directory, created and locked (a resumed run's is already); (None, exit
    status), said why, if it cannot be."""
    from operant.trainer.checkpoint import resume

    try:
        return resume.create(plan), EXIT_OK
    except FileExistsError:
        print(
            f"operant-train: run {plan.run_id!r} already exists under {plan.root}; resume it "
            f"with --resume {plan.run_id}, or choose another --run-id",
            file=sys.stderr,
        )
    except OSError as error:
        if not is_storage_error(error):
            print(
                f"operant-train: cannot create the run directory under {plan.root}: {error}",
                file=sys.stderr,
            )
            return None, EXIT_USAGE
        print(
            f"operant-train: cannot create the run directory under {plan.root}: "
            f"{describe_storage_error(error, plan.root)}; nothing was created; free space "
            "and run again",
            file=sys.stderr,
        )
        resume.discard(plan)
        return None, EXIT_NO_SPACE
    except (ValueError, resume.RunInUseError) as error:
        print(
            f"operant-train: cannot create the run directory under {plan.root}: {error}",
            file=sys.stderr,
        )
    return None, EXIT_USAGE


def _checkpointer(plan: RunPlan, run_dir: Path, notifier: SystemdNotifier) -> Checkpointer:
    """The run's checkpointer, on the schedule and keep its config says; a long write counts
    as progress to systemd's watchdog (`notifier.beat`)."""
    config = plan.config
    return Checkpointer(
        run_dir / runs.CHECKPOINT_DIR,
        config.checkpoint.every_updates,
        config.checkpoint.every_seconds,
        config.checkpoint.keep,
        beat=notifier.beat,
    )


def compose(
    args: Any,
    plan: RunPlan,
    signals: StopSignals,
    trainer: Any,
    run_dir: Path,
    rank: Rank | None = None,
    group: Any = None,
) -> list[Service]:
    """The services of this process's session, in the order their hooks are called. Under
    torchrun (`group`), checkpoints and stops are decided by all ranks together
    (operant.trainer.distributed.ranks.GroupCheckpoints), and each rank publishes its own metrics
    file."""
    rank = rank or Rank()
    config = plan.config
    notifier = SystemdNotifier.from_environ(unset_environment=True)
    checkpointer = _checkpointer(plan, run_dir, notifier)
    records = ContinueRecords(plan, run_dir / runs.PROGRESS_FILE, checkpointer)
    progress = WriteProgress(run_dir / runs.PROGRESS_FILE, args, plan, trainer.derived, signals)
    publish = (
        [PublishMetrics(plan, run_dir, trainer, records, rank=rank)]
        if config.train.publish_metrics
        else []
    )
    tensorboard = (
        [WriteTensorBoard(run_dir / TENSORBOARD_DIR, trainer, records)]
        if config.train.tensorboard
        else []
    )
    best = TrackBest(trainer, run_dir, records)
    watch = WatchRunDir(run_dir, trainer, checkpointer)
    services: list[Service] = [
        # Under torchrun the stop is the group's decision, taken with the checkpoints'.
        *([StopOnSignal(signals)] if group is None else []),
        StopsReachEnvSteps(config.env.stop_grace_s),
        # Before the checkpoints at each boundary: a run directory gone from its path stops
        # the run before anything else writes into it.
        watch,
        records,
        # What a full disk refuses first (the metrics file, run.json, each written whole or
        # not at all); then a resumed run's records are cut: a start that fails leaves them.
        *publish,  # the metrics file appears complete, then `latest` points at it
        RunRecord(plan, run_dir, trainer.impl, trainer.derived),
        CutRecords(records),
        UpdateLatest(plan),
        progress,
        *tensorboard,
        NotifySystemd(notifier, checkpointer, trainer, trainer.derived.num_updates),
        # model.pt before the final checkpoint where the disk has room for one only; under
        # torchrun after it (the checkpoint is a collective every rank must reach)
        *([SaveModel(trainer, run_dir)] if group is None else []),
        _checkpoints(
            trainer,
            checkpointer,
            signals,
            progress,
            publish[0].warn if publish else lambda text: None,
            watch.explain,
            group,
            plan,
        ),
        *([SaveModel(trainer, run_dir)] if group is not None else []),
        best,
        ReleaseRunLock(plan),
        Console(args, plan, trainer, run_dir, checkpointer, best),
    ]
    return [service for service in services if rank.runs(service.role)]


class StopsReachEnvSteps(Service):
    """A stop waits for an update boundary; an env step that hangs must not hold it for good:
    operant-train's main watches env steps from its first second
    (operant.envs.reference.step_deadline:
    a worker's step, or a Python env's in this process, ends as the env's failure `grace_s`
    after a stop signal); the session gives that watch the run's own grace (a torchrun rank
    plans its run apart from main's plan)."""

    role = Role.EVERY_RANK

    def __init__(self, grace_s: float):
        self.grace_s = grace_s

    def on_start(self) -> None:
        step_deadline.set_grace(self.grace_s)


def _checkpoints(
    trainer: Any,
    checkpointer: Checkpointer,
    signals: StopSignals,
    progress: WriteProgress,
    warn: Any,
    explain: Any,
    group: Any,
    plan: RunPlan,
) -> Service:
    if group is None:
        return Checkpoints(trainer, checkpointer, signals, progress, warn=warn, explain=explain)
    from operant.trainer.distributed.ranks import GroupCheckpoints

    return GroupCheckpoints(
        trainer,
        checkpointer,
        signals,
        progress,
        warn=warn,
        explain=explain,
        group=group,
        plan=plan,
    )


class Session:
    """Runs the trainer's loop with its services' hooks (operant.trainer.services.hooks)."""

    def __init__(self, trainer: Any, services: list[Service], signals: StopSignals):
        self.trainer, self.signals = trainer, signals
        self.started = False
        """Every service's on_start has run."""
        self.outcome = Outcome()
        """How the run ended (after `run()`)."""
        self.watches = [service for service in services if isinstance(service, WatchRunDir)]
        # Only the services that override a hook are called for it: on_update and
        # on_boundary run once per update.
        self.hooks = {
            name: [
                getattr(service, name)
                for service in services
                if getattr(type(service), name) is not getattr(Service, name)
            ]
            for name in HOOKS
        }

    def run(self) -> int:
        """Start, train, stop; operant-train's exit status (an unexpected error propagates,
        after the services have marked the run failed and closed)."""
        outcome = self.outcome
        try:
            self._call("on_start")
            self.started = True
            self.trainer.log = self.on_update
            outcome.last_record = self.trainer.run(should_stop=self.should_stop)
            # A signal that came while the last update ran stopped nothing: the run finished.
            outcome.stopped_by = "" if self.trainer.finished else self.signals.name
            outcome.ending = True
            self._call("on_stopping", outcome)
            self._call("on_stop", outcome)
            self.signals.settled = True
        except BaseException as error:
            for watch in self.watches:  # a write the run directory's loss refused
                error = watch.explain(error)
            outcome.error = error
            self._call("on_stop", outcome)
            # Its line is out: a stop signal now (torchrun's SIGTERM to a failed group's
            # ranks) is not announced as a stop "with a checkpoint" under that failure.
            self.signals.announce = False
            if outcome.kind == "crashed":
                raise
        finally:
            self._call("close")
        return _EXIT[outcome.kind]

    def on_update(self, record: Any) -> None:
        """The trainer's per-update callback."""
        for hook in self.hooks["on_update"]:
            hook(record)

    def should_stop(self) -> bool:
        """The trainer's should_stop, asked before every update."""
        return any(hook() for hook in self.hooks["on_boundary"])

    def _call(self, name: str, *args: Any) -> None:
        for hook in self.hooks[name]:
            hook(*args)

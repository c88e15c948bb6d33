"""What a person reads from operant-train: the run's first line, why it failed, and its summary
(the verdict and the best policy from operant.trainer.services.best). A session service
(operant.trainer.services.protocol), last in the session's list."""

from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any, cast

import msgspec

from operant.shared.record import RunSummary
from operant.trainer.checkpoint.resume import RunPlan, resume_hint
from operant.trainer.checkpoint.store import Checkpointer
from operant.trainer.run.errors import counted, describe_storage_error
from operant.trainer.run.run_dir_watch import RunDirLost
from operant.trainer.services.progress import number_or_dash
from operant.trainer.services.protocol import Outcome, Service


class Console(Service):
    """What a person reads: the run's first line, why it failed, and its summary (last, after
    the run's lock is released, so the run can be resumed the moment it is printed)."""

    def __init__(
        self,
        args: Any,
        plan: RunPlan,
        trainer: Any,
        run_dir: Path,
        checkpointer: Checkpointer,
        best: Any = None,
    ):
        self.args, self.plan, self.trainer, self.run_dir = args, plan, trainer, run_dir
        self.checkpointer, self.best = checkpointer, best
        self.started = 0.0
        self.start_step = 0
        self.outcome: Outcome | None = None

    def on_start(self) -> None:
        plan, trainer = self.plan, self.trainer
        derived = trainer.derived
        if self.args.log_format != "json" and not self.args.quiet:
            origin = (
                f", resumed at update {trainer.update} from {plan.checkpoint.name}"
                if plan.payload is not None and plan.checkpoint is not None
                else ""
            )
            print(
                f"run {plan.run_id}: {plan.config.env.id} ({trainer.impl}), "
                f"{counted(plan.config.env.num_envs, 'env')}, {_policy(trainer)}, "
                f"{counted(derived.num_updates, 'update')} of "
                f"{derived.batch_size} steps{origin} -> {self.run_dir}",
                flush=True,
            )
        elif plan.payload is not None:
            print(
                f"operant-train: run {plan.run_id} resumed at update {trainer.update} from "
                f"{plan.checkpoint}",
                file=sys.stderr,
                flush=True,
            )
        if trainer.reseeded:
            self._warn_reseeded()
        for warning in (
            large_cnn_warning(plan.config, trainer),
            unread_policy_options(plan.config),
        ):
            if warning is not None:
                print(f"operant-train: warning: {warning}", file=sys.stderr, flush=True)
        self.started = time.perf_counter()
        self.start_step = trainer.global_step  # a resumed run's steps before this process

    def _warn_reseeded(self) -> None:
        """A run resumed on another kind of device: its sampling could not continue as is."""
        plan = self.plan
        saved = plan.payload["config"]["train"]["device"] if plan.payload else "?"
        name = plan.checkpoint.name if plan.checkpoint is not None else "the checkpoint"
        print(
            f"operant-train: warning: {name} was written with train.device = "
            f"{saved!r} and this run trains on {plan.config.train.device!r}: the weights, the "
            "optimizer and the envs carry over, action sampling starts from a new seed, so the "
            f"run goes on but not as it would have on {saved!r}",
            file=sys.stderr,
            flush=True,
        )

    def on_stop(self, outcome: Outcome) -> None:
        self.outcome = outcome
        last_path = self.checkpointer.last_path
        if isinstance(outcome.error, RunDirLost):  # its line says where the checkpoints are
            print(f"operant-train: training failed: {outcome.error}", file=sys.stderr)
        elif outcome.kind == "failed":
            kept = (
                f"; the last good checkpoint is {last_path}"
                if last_path
                else "; no checkpoint was written"
            )
            if self.best is not None and self.best.best_line() is not None:
                kept += (
                    f"; the best policy (mean return {self.best.best_return:.1f}) is "
                    f"{self.best.path}"
                )
            culprit = getattr(outcome.error, "culprit", None)
            if culprit is not None:
                # The user's env or network is at fault: its own traceback first (a worker
                # has printed its own), then how to go on once it is fixed.
                _print_cause(outcome.error)
                kept += f"; once the {culprit} works, " + (
                    f"continue with {resume_hint(self.plan.run_id, self.run_dir.parent)}"
                    if last_path
                    else self._start_again()
                )
            print(f"operant-train: training failed: {outcome.error}{kept}", file=sys.stderr)
        elif outcome.kind == "interrupted":
            line = (
                f"the last checkpoint is {last_path}; run directory {self.run_dir}"
                if last_path
                else f"there is no checkpoint; run directory {self.run_dir}; {self._start_again()}"
            )
            print(f"operant-train: interrupted; {line}", file=sys.stderr)
        elif outcome.kind == "no_space":
            print(f"operant-train: {self._no_space(outcome)}", file=sys.stderr, flush=True)

    def _no_space(self, outcome: Outcome) -> str:
        """The full disk's line: what could not be written, the space, what to do."""
        # Outcome.kind is "no_space" only for an OSError of STORAGE_ERRNOS.
        error = cast(OSError, outcome.error)
        resume = resume_hint(self.plan.run_id, self.run_dir.parent)
        if not self.started:
            why = describe_storage_error(error, self.run_dir.parent)
            if self.plan.payload is not None:
                after = f"the run is as it was; free space, then {resume}"
            elif self.plan.restart:  # no checkpoint: `--resume RUN` would be refused
                again = resume_hint(self.plan.run_id, self.run_dir.parent, auto=True)
                after = (
                    "the run is as it was (it has no checkpoint to continue from); free space, "
                    f"then start it again (with the config it started with): {again}"
                )
            else:
                after = "nothing was created; free space and run again"
            return f"cannot start run {self.plan.run_id}: {why}; {after}"
        if outcome.ending:
            what = outcome.writing or "the final checkpoint"
            why = describe_storage_error(error, self.run_dir, self.checkpointer.last_size)
        else:  # the records' write is small: the size to free is the next checkpoint's
            what = "the run's records (progress.jsonl)"
            why = describe_storage_error(
                error, self.run_dir, self.checkpointer.last_size, "a checkpoint"
            )
        if self.checkpointer.last_path is None:
            again = resume_hint(self.plan.run_id, self.run_dir.parent, auto=True)
            return (
                f"{what} cannot be written: {why}; the run has no checkpoint to continue from: "
                f"free space, then start it again (with the config it started with): {again}"
            )
        return (
            f"{what} cannot be written: {why}; the last checkpoint is "
            f"{self.checkpointer.last_path}; free space, then {resume}"
        )

    def _start_again(self) -> str:
        """What a run with no checkpoint does instead of `--resume RUN` (which is refused)."""
        again = resume_hint(self.plan.run_id, self.run_dir.parent, auto=True)
        return f"start it again (with the config it started with): {again}"

    def close(self) -> None:
        if self.outcome is not None and self.outcome.kind in ("finished", "stopped"):
            self._summary(self.outcome, time.perf_counter() - self.started)

    def _summary(self, outcome: Outcome, seconds: float) -> None:
        trainer, run_id, last = self.trainer, self.plan.run_id, outcome.last_record
        path, stopped_by = outcome.checkpoint, outcome.stopped_by
        best = self.best
        verdict = best.summary_fields() if best is not None else {}
        if verdict.get("solved_at_s") is None:
            verdict["solved_at_s"] = trainer.solved_at
        summary = RunSummary(
            run_id=run_id,
            global_step=trainer.global_step,
            episode_return_mean=last.episode_return_mean if last else None,
            elapsed_s=round(seconds, 3),
            sps_mean=last.sps_mean if last else None,
            run_dir=str(self.run_dir),
            stopped_by=stopped_by or None,
            checkpoint=str(path) if path else None,
            steps_this_process=trainer.global_step - self.start_step,
            **verdict,
        )
        if self.args.log_format == "json":
            print(json.dumps({"summary": msgspec.to_builtins(summary)}), flush=True)
            return
        if stopped_by:
            how = (
                f"checkpoint {path}; continue with {resume_hint(run_id, self.run_dir.parent)}"
                if path
                else f"no checkpoint was written; {self._start_again()}"
            )
            print(
                f"stopped by {stopped_by} at step {trainer.global_step:,} (update "
                f"{trainer.update}); {how}",
                flush=True,
            )
            return
        solved = f", solved in {trainer.solved_at:.2f}s" if trainer.solved_at is not None else ""
        # A resumed run's total, and what this process trained of it in its seconds.
        here = summary.global_step - self.start_step
        rate = number_or_dash(summary.sps_mean, ",.0f")
        steps = (
            f"{summary.global_step:,} steps ({here:,} of them in this process's "
            f"{summary.elapsed_s:.1f}s; {rate} steps/s over the run)"
            if self.start_step
            else f"{summary.global_step:,} steps in {summary.elapsed_s:.1f}s ({rate} steps/s)"
        )
        mean = summary.episode_return_mean
        returns = (
            f"mean return of the last 100 episodes {number_or_dash(mean, '.1f')}"
            if mean is not None
            else "no episode finished"
        )
        print(f"done: {steps}, {returns}{solved} -> {self.run_dir}", flush=True)
        for line in (best.verdict(), best.best_line()) if best is not None else ():
            if line is not None:
                print(line, flush=True)


def _print_cause(error: BaseException | None) -> None:
    """The traceback of what the user's env or network raised (an EnvFailedError's or a
    PolicyFailedError's cause), if any."""
    cause = error.__cause__ if error is not None else None
    if cause is not None:
        traceback.print_exception(cause, file=sys.stderr)


def env_failed_at_start(plan: RunPlan, error: BaseException) -> None:
    """The env failed while it was built or first reset, before the run started: its
    traceback, then one line that says what is left and how to go on once the env works."""
    _print_cause(error)
    root = plan.run_dir.parent if plan.run_dir is not None else plan.root
    if plan.payload is not None:
        after = f"the run is as it was; once the env works: {resume_hint(plan.run_id, root)}"
    elif plan.restart:
        again = resume_hint(plan.run_id, root, auto=True)
        after = (
            "the run is as it was; once the env works, start it again (with the config it "
            f"started with): {again}"
        )
    else:
        after = "nothing was created; run again once the env works"
    print(f"operant-train: cannot start run {plan.run_id}: {error}; {after}", file=sys.stderr)


LARGE_CNN_PARAMETERS = 1_000_000
"""A built-in CNN this large (an Atari-size frame's) trains at Atari's learning rates."""
LARGE_CNN_MAX_LR = 1e-3


def large_cnn_warning(config: Any, trainer: Any) -> str | None:
    """What to say of a built-in CNN of Atari's size at a learning rate meant for the
    CartPole MLP (3e-3, the default): it diverges (docs/envs.md); None otherwise."""
    if getattr(trainer, "policy_name", None) != "cnn":
        return None
    count = sum(parameter.numel() for parameter in trainer.policy.parameters())
    rate = config.ppo.learning_rate
    if count <= LARGE_CNN_PARAMETERS or rate <= LARGE_CNN_MAX_LR:
        return None
    nature = "" if config.policy.conv_strides else "Nature's network and "
    default = (
        " (the default, the CartPole MLP's)" if rate == type(config.ppo)().learning_rate else ""
    )
    return (
        f"a {_size(count)}-parameter CNN at ppo.learning_rate = {rate:g}{default} tends to "
        f"diverge; large frames train with {nature}a rate like CleanRL's 2.5e-4 (the config "
        "is in docs/envs.md)"
    )


def unread_policy_options(config: Any) -> str | None:
    """What to say of [policy] options set for a user's network (policy.kind = "module:Name"),
    which builds its own: they are the built-in networks' and nothing reads them."""
    import msgspec

    from operant.trainer.policies.user import is_user_policy

    policy = config.policy
    if not is_user_policy(policy.kind):
        return None
    default = type(policy)()
    fields = [field.name for field in msgspec.structs.fields(policy) if field.name != "kind"]
    names = [f"policy.{name}" for name in fields if getattr(policy, name) != getattr(default, name)]
    if not names:
        return None
    return (
        f"{', '.join(names)}: the built-in networks' option{'s' if len(names) > 1 else ''}, not "
        f"read for {policy.kind}, which builds its own network"
    )


def _size(count: int) -> str:
    """13.8M, 9.2K, 643."""
    return next(
        (
            f"{count / scale:.1f}{unit}"
            for scale, unit in ((1e9, "G"), (1e6, "M"), (1e3, "K"))
            if count >= scale
        ),
        str(count),
    )


def _policy(trainer: Any) -> str:
    """'cnn policy (13.8M parameters)': which policy "auto" chose, and how big it is."""
    count = sum(parameter.numel() for parameter in trainer.policy.parameters())
    return f"{getattr(trainer, 'policy_name', 'the')} policy ({_size(count)} parameters)"

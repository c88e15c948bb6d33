"""The sweep's loop: ask the study for trials, run each trial's seeds as runs, feed the
pruner from their records as they come, tell the study how each ended.

W trials run at once (`--workers`), each a run process at a time (its seeds one after the
other; the first seed's records feed the pruner). A pruned trial's run is stopped with
SIGTERM (a checkpoint, exit 0). A run that fails (exit status not 0: a NaN, an env error, a
config the machine cannot hold) fails its trial with the run's last line as the reason, and
the sweep goes on.

SIGTERM, SIGINT and SIGHUP stop every run with a checkpoint; their trials are told failed
with `interrupted`, and the next `operant sweep` of the same file queues each again
(`resume_of`), continuing its runs from their checkpoints (operant-train --resume auto).
Sent to the sweep's process group or cgroup, they reach the sweep alone: its fork server and
runs ignore them (operant.trainer.sweep.trials), and the sweep sends each run its SIGTERM,
again every RESEND_S until it ends; a run that SIGTERM ended before its handler went in
stopped before it trained, and is interrupted too. A trial asked for as the signal came
starts no run.
Trials left running by a sweep process that died (SIGKILL, power loss) are found the same
way: with the SQLite storage the sweep directory's lock says no process runs them; with a
shared server their heartbeat (a user attribute, refreshed every HEARTBEAT_S) is older than
STALE_S.

Confirmation: once the study's n_trials have ended, the best `sweep.confirm` complete trials
are each run again on `sweep.confirm_seeds` seeds no trial used, as trials of their own
(enqueued with the trial's parameters and `confirm_of`; their runs are the trial's run id
with those seeds), and the best confirmed value is the sweep's best. A trial's value is one
run's (or a few) under timing noise, and the best of 64 such values is partly the luckiest
one: rerun, CartPole's winners regressed from 1.62x to 1.04x against the shipped config
(docs/sweeps.md). The trial's own run is left out of its confirmed value for that reason:
it is the run the trial was selected by. A confirmation is interrupted and continued like
any trial, its finished runs kept.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import msgspec

from operant.shared import atomic
from operant.shared.sweeps import BEST_FILE, SUMMARY_FILE, stopped_words
from operant.trainer.config import toml_value
from operant.trainer.sweep import objective as obj
from operant.trainer.sweep import pruning
from operant.trainer.sweep.spec import Sweep, assignment
from operant.trainer.sweep.study import confirm_of, row_state, summarize
from operant.trainer.sweep.trials import RunProcess, read_records, wait_until_free

POLL_S = 0.02
HEARTBEAT_S = 10.0
STALE_S = 60.0
LOG_DIR = "logs"


class Slot:
    """One trial in progress: its seeds, the run now training, the values so far."""

    def __init__(self, trial: Any, run_base: str, seeds: list[int], overrides: list[str]):
        self.trial, self.run_base, self.seeds = trial, run_base, seeds
        self.confirm_of = confirm_of(trial)
        """The trial this one confirms (operant.trainer.sweep.study), or None."""
        self.overrides = overrides
        """The trial's parameters as --set assignments."""
        self.budget_steps = 0
        """Each run's steps: train.total_steps rounded up to whole updates of its batch."""
        self.index = 0
        self.run: RunProcess | None = None
        self.values: list[float] = []
        self.reported = 0
        """The last grid point the first run passed (operant.trainer.sweep.objective)."""
        self.last_report: float | None = None
        """The value at that point."""
        self.stored = 0
        """The last grid point written to the study (where the pruner decides, and the last)."""
        self.pruned = ""
        """Why the trial was pruned; empty while it is not."""

    @property
    def run_id(self) -> str:
        return f"{self.run_base}-s{self.seeds[self.index]}"


class Driver:
    def __init__(
        self, sweep: Sweep, study: Any, directory: Path, workers: int, exclusive: bool, out: Any
    ):
        self.sweep, self.study, self.directory = sweep, study, directory
        self.workers, self.exclusive, self.out = workers, exclusive, out
        self.storage_text = ""
        self.slots: list[Slot] = []
        self.stopping = ""
        self.asking = True
        self.heartbeat_at = 0.0
        self.threads = max(1, (os.cpu_count() or 1) // workers)
        self.bound = pruning.time_bound(sweep)
        self.decides = pruning.decides(sweep)
        self.bound_read_at = 0.0
        (directory / LOG_DIR).mkdir(exist_ok=True)

    # --- the loop ---------------------------------------------------------------------------

    def run(self) -> int:
        previous = {
            signum: signal.signal(signum, self._on_signal)
            for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
        }
        try:
            self.recover()
            self.write_summary()
            self._read_bound()
            while True:
                while not self.stopping and self.asking and len(self.slots) < self.workers:
                    self._start_trial()
                if not self.slots:
                    if self.stopping or not self._enqueue_confirmations():
                        break
                    self.asking = True
                    continue
                self._poll()
                time.sleep(POLL_S)
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            self.write_summary()
        return self._report_end()

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self.stopping:
            return
        self.stopping = signal.Signals(signum).name
        os.write(
            2, f"operant sweep: {self.stopping}: stopping every trial with a checkpoint\n".encode()
        )
        for slot in self.slots:
            if slot.run is not None:
                slot.run.stop()

    def _poll(self) -> None:
        now = time.monotonic()
        beat = now - self.heartbeat_at >= HEARTBEAT_S
        if beat:
            self.heartbeat_at = now
        if not self.exclusive and now - self.bound_read_at >= pruning.REFRESH_S:
            self._read_bound()  # other processes complete trials of the study too
        for slot in list(self.slots):
            run = slot.run
            if run is None:
                continue
            if self.stopping or slot.pruned:
                run.stop()  # again, until it ends (a run started as the signal came, too)
            new = run.poll()
            feeds = slot.index == 0 and slot.confirm_of is None  # a confirmation is not pruned
            if new and not slot.pruned and not self.stopping:
                if feeds:
                    self._report(slot, new)
                elif slot.confirm_of is not None:
                    self._confirmation_lost(slot, new[-1].elapsed_s)
            if beat:
                self._set_attr(slot.trial, "heartbeat", time.time())
            if run.exitcode is not None:
                run.poll()
                self._run_ended(slot)

    def _report(self, slot: Slot, records: list[Any]) -> None:
        """Follow the first run on the grid; store the points its pruner decides at, and
        stop it where the pruner or the time bound says (operant.trainer.sweep.pruning)."""
        points = obj.reports(
            records,
            slot.budget_steps,
            self.sweep.direction,
            after=slot.reported,
            unit_s=self.sweep.report_unit_s,
        )
        if not points:
            return
        due = [(point, value) for point, value in points if self.decides(point)]
        for point, value in due:
            slot.trial.report(value, point)
        slot.reported, slot.last_report = points[-1]
        slot.stored = due[-1][0] if due else slot.stored
        if self.bound is not None and self.bound.passed(slot.reported):
            self._prune(slot, f"past the best {self.bound.keep}'s {self.bound.limit_s:.4g} s")
        elif due and slot.trial.should_prune():
            self._prune(slot, "")

    def _prune(self, slot: Slot, why: str) -> None:
        self._store_last(slot)  # the point it stopped at: the sampler ranks pruned trials by it
        unit = self.sweep.report_unit_s
        if unit is not None:
            said = f"pruned after {slot.reported * unit:.4g} s of training"
        else:
            said = f"pruned at {slot.reported}/{obj.REPORTS} of its budget"
        slot.pruned = f"{said}: {why}" if why else said
        assert slot.run is not None
        slot.run.stop()

    def _store_last(self, slot: Slot) -> None:
        if slot.last_report is not None and slot.stored < slot.reported:
            slot.trial.report(slot.last_report, slot.reported)
            slot.stored = slot.reported

    def _confirmation_lost(self, slot: Slot, running_s: float) -> bool:
        """Stop a confirmation that can no longer beat the best confirmed value (its running
        run, if any, with SIGTERM); True if it was stopped."""
        bound, objective = self.bound, self.sweep.table.objective
        if bound is None or not bound.confirmation_lost(
            slot.values, running_s, len(slot.seeds), objective.aggregate
        ):
            return False
        done = len(slot.values)
        at = f"in its run {done + 1}" if running_s > 0 else f"after its run {done}"
        slot.pruned = (
            f"stopped {at} of {len(slot.seeds)}: its {objective.aggregate} can no longer "
            f"beat the best confirmed {bound.confirmed_best:.4g}"
        )
        if slot.run is not None:
            slot.run.stop()
        return True

    def _read_bound(self) -> None:
        self.bound_read_at = time.monotonic()
        if self.bound is not None:
            self.bound.refresh(self.study)

    # --- trials -----------------------------------------------------------------------------

    def _start_trial(self) -> None:
        trials = self.study.get_trials(deepcopy=False)
        waiting = sum(t.state.name == "WAITING" for t in trials)
        if not waiting and _counted(trials) >= self.sweep.table.n_trials:
            self.asking = False
            return
        trial = self.study.ask()
        attrs = trial.user_attrs
        queued = "resume_of" in attrs or "confirm_of" in attrs
        if not queued and self._surplus(trial):
            self.asking = False
            return
        base = attrs.get("run_base") or f"{self.sweep.name}-t{trial.number:04d}"
        seeds = [self.sweep.config.train.seed + i for i in range(self.sweep.table.seeds)]
        if "confirm_of" in attrs:
            seeds = self.sweep.confirm_seeds()
        self._set_attr(trial, "run_base", base)
        self._set_attr(trial, "run_ids", [f"{base}-s{seed}" for seed in seeds])
        self._set_attr(trial, "heartbeat", time.time())
        slot = Slot(trial, base, seeds, self._suggest(trial))
        self.slots.append(slot)
        try:
            slot.budget_steps = self.sweep.trial_budget(slot.overrides)
        except ValueError as error:  # a combination the config refuses (a batch split)
            self._fail(slot, str(error))
            return
        self._next_run(slot)

    def _surplus(self, trial: Any) -> bool:
        """Whether other processes took the study's n_trials before this trial was asked
        for (it is then told failed as `surplus`, and left out of the leaderboard)."""
        earlier = [t for t in self.study.get_trials(deepcopy=False) if t.number < trial.number]
        if _counted(earlier) < self.sweep.table.n_trials:
            return False
        self._set_attr(trial, "surplus", True)
        self.study.tell(trial, state=_state("FAIL"))
        return True

    def _suggest(self, trial: Any) -> list[str]:
        """The trial's --set assignments, its parameters sampled."""
        assignments = []
        for path, param in self.sweep.table.params.items():
            if param.log_uniform is not None:
                value: Any = trial.suggest_float(path, *param.log_uniform, log=True)
            elif param.uniform is not None:
                value = trial.suggest_float(path, *param.uniform)
            elif param.int_range is not None:
                value = trial.suggest_int(path, *param.int_range)
            else:
                assert param.categorical is not None
                # Optuna stores scalars; arrays (policy.hidden_sizes) go as their TOML text.
                choices = [toml_value(c) if isinstance(c, list) else c for c in param.categorical]
                value = trial.suggest_categorical(path, choices)
            assignments.append(assignment(self.sweep, path, value))
        return assignments

    def _next_run(self, slot: Slot) -> None:
        """Start the slot's run for its current seed, or take its value where a resumed
        trial's run already finished."""
        while slot.index < len(slot.seeds):
            if self.stopping:  # came while the trial was asked for
                self._interrupt(slot, f"stopped by {self.stopping}")
                return
            run_dir = self.directory / slot.run_id
            wait_until_free(run_dir)  # a killed sweep's run may still be writing its checkpoint
            records = read_records(run_dir)
            if not obj.finished(records, slot.budget_steps):
                slot.run = RunProcess(
                    self._argv(slot), run_dir, self.directory / LOG_DIR / f"{slot.run_id}.log"
                )
                return
            if not self._take_value(slot, records):
                return
        self._complete(slot)

    def _argv(self, slot: Slot) -> list[str]:
        sets = list(slot.overrides)
        swept = set(self.sweep.table.params)
        train = self.sweep.config_data.get("train", {})
        if "train.torch_threads" not in swept and "torch_threads" not in train:
            sets.append(f"train.torch_threads={self.threads}")
        if self.sweep.table.objective.metric == "time_to_target":
            sets.append(f"train.target_return={self.sweep.target!r}")
        argv = ["--config", str(self.directory / "config.toml")]
        argv += ["--runs-dir", str(self.directory), "--run-id", slot.run_id]
        argv += ["--resume", "auto", "--seed", str(slot.seeds[slot.index]), "--quiet"]
        for assigned in sets:
            argv += ["--set", assigned]
        return argv

    def _run_ended(self, slot: Slot) -> None:
        run = slot.run
        assert run is not None
        slot.run = None
        records = read_records(run.run_dir)
        if run.exitcode != 0 and not _stopped(run):
            words = run.last_words() or f"exit status {run.exitcode}"
            self._fail(slot, f"run {run.run_dir.name}: {words}")
        elif slot.pruned:
            self._end(slot, "PRUNED", reason=slot.pruned)
        elif not obj.finished(records, slot.budget_steps):
            self._interrupt(slot, f"stopped by {self.stopping or 'a signal'}")
        elif self._take_value(slot, records):
            if self.stopping and slot.index < len(slot.seeds):
                self._interrupt(slot, f"stopped by {self.stopping}")
            elif (
                slot.confirm_of is not None
                and slot.index < len(slot.seeds)
                and self._confirmation_lost(slot, 0.0)
            ):
                self._end(slot, "PRUNED", reason=slot.pruned)
            else:
                self._next_run(slot)

    def _take_value(self, slot: Slot, records: list[Any]) -> bool:
        value = obj.run_value(records, self.sweep.table.objective.metric, slot.budget_steps)
        if value is None:
            self._fail(slot, f"run {slot.run_id}: no episode finished within the budget")
            return False
        slot.values.append(value)
        slot.index += 1
        return True

    def _complete(self, slot: Slot) -> None:
        # A run that stopped at its target holds its last value for the rest of a grid of
        # steps, so the pruner compares later trials with it at every point it decides at (a
        # time grid has no end: there, later trials meet only the trials still training).
        if slot.last_report is not None and slot.confirm_of is None:
            self._store_last(slot)  # Hyperband's "auto" budget is the complete trials' last
            if self.sweep.report_unit_s is None:
                for point in range(slot.reported + 1, obj.REPORTS + 1):
                    if self.decides(point):
                        slot.trial.report(slot.last_report, point)
        value = obj.aggregate(slot.values, self.sweep.table.objective.aggregate)
        self._set_attr(slot.trial, "seed_values", slot.values)
        self._end(slot, "COMPLETE", value=value)

    def _fail(self, slot: Slot, reason: str) -> None:
        self._end(slot, "FAIL", reason=reason)

    def _interrupt(self, slot: Slot, reason: str) -> None:
        self._set_attr(slot.trial, "interrupted", True)
        self._end(slot, "FAIL", reason=reason)

    def _end(self, slot: Slot, state: str, value: float | None = None, reason: str = "") -> None:
        if reason:
            self._set_attr(slot.trial, "reason", reason)
        if state == "COMPLETE":
            self.study.tell(slot.trial, value)
        else:
            self.study.tell(slot.trial, state=_state(state))
        self.slots.remove(slot)
        self._say_trial(slot, _word(state, slot.trial), value, reason)
        self.write_summary()
        if state == "COMPLETE":
            self._read_bound()

    def _set_attr(self, trial: Any, key: str, value: Any) -> None:
        trial.set_user_attr(key, value)

    # --- what it says -----------------------------------------------------------------------

    def _say_trial(self, slot: Slot, state: str, value: float | None, reason: str) -> None:
        params = "  ".join(f"{k}={_short(v)}" for k, v in slot.trial.params.items())
        shown = f"{_short(value)}" if value is not None else reason
        if slot.confirm_of is not None:
            runs = ", ".join(
                f"{seed}: {_short(v)}" for seed, v in zip(slot.seeds, slot.values, strict=False)
            )
            shown += f" (confirms trial {slot.confirm_of}; seeds {runs})"
        print(f"trial {slot.trial.number} {state}: {shown}  {params}", file=self.out, flush=True)

    def write_summary(self) -> None:
        summary = summarize(self.study, self.storage_text)
        atomic.write_bytes(self.directory / SUMMARY_FILE, msgspec.json.encode(summary))
        best = summary.best
        if best is None:
            return
        metric = self.sweep.table.objective.metric
        said = f"{metric} {_short(best.value)} in the search"
        if best.confirmed is not None:
            said = (
                f"{metric} {_short(best.confirmed)} on {summary.confirm_seeds} fresh seeds "
                f"({self.sweep.table.objective.aggregate}), {_short(best.value)} in the search"
            )
        header = (
            f"Sweep {self.sweep.name}'s best config: trial {best.number}, {said} (operant "
            f"sweep wrote it).\nTrain it: operant-train --config {self.directory / BEST_FILE}"
        )
        text = self.sweep.best_toml(best.params, header)
        atomic.write_text(self.directory / BEST_FILE, text)

    def _report_end(self) -> int:
        summary = summarize(self.study, self.storage_text)
        interrupted = sum(
            row.state == "interrupted" and not _resumed(row.number, self.study)
            for row in summary.trials
        )
        line = (
            f"sweep {self.sweep.name}: {summary.complete} complete, {summary.pruned} pruned, "
            f"{summary.failed} failed of {summary.n_trials}"
        )
        if summary.confirm:
            line += f", {summary.confirmed} confirmed{stopped_words(summary)}"
        best = summary.best
        if best is not None:
            metric = self.sweep.table.objective.metric
            if best.confirmed is not None:
                line += (
                    f"; best {metric} {_short(best.confirmed)} on {summary.confirm_seeds} fresh "
                    f"seeds (trial {best.number}; {_short(best.value)} in the search)"
                )
            else:
                line += f"; best {metric} {_short(best.value)} (trial {best.number})"
        print(line, file=self.out, flush=True)
        if best is not None:
            print(f"best config: {self.directory / BEST_FILE}", file=self.out, flush=True)
        if self.stopping:
            print(
                f"operant sweep: stopped by {self.stopping}; {interrupted} trial(s) stopped with "
                "a checkpoint: run the same command to continue",
                file=sys.stderr,
            )
        return 0

    # --- after a sweep process that ended early ---------------------------------------------

    def recover(self) -> None:
        """Mark the trials a dead sweep process left running, and queue every interrupted
        trial again, to be continued from its runs' checkpoints."""
        now = time.time()
        for trial in self.study.get_trials(deepcopy=False):
            if trial.state.name != "RUNNING":
                continue
            beat = trial.user_attrs.get("heartbeat", 0.0)
            if self.exclusive or now - float(beat) > STALE_S:
                self.study._storage.set_trial_user_attr(trial._trial_id, "interrupted", True)
                self.study._storage.set_trial_user_attr(
                    trial._trial_id, "reason", "its sweep process ended while it ran"
                )
                self.study.tell(trial.number, state=_state("FAIL"), skip_if_finished=True)
        trials = self.study.get_trials(deepcopy=False)
        taken = {t.user_attrs.get("resume_of") for t in trials}
        for trial in trials:
            if row_state(trial) == "interrupted" and trial.number not in taken:
                attrs = {"resume_of": trial.number, "run_base": self._run_base(trial)}
                if confirm_of(trial) is not None:
                    attrs["confirm_of"] = confirm_of(trial)
                self.study.enqueue_trial(dict(trial.params), user_attrs=attrs)

    def _run_base(self, trial: Any) -> str:
        return str(trial.user_attrs.get("run_base", f"{self.sweep.name}-t{trial.number:04d}"))

    # --- confirmation -----------------------------------------------------------------------

    def _enqueue_confirmations(self) -> bool:
        """Queue a confirmation of each of the best `sweep.confirm` complete trials that has
        none (in any state: a finished one is not redone, an interrupted one was queued again
        by `recover`); True if any was queued. Not while any of the sweep's trials runs or
        waits (in another process, with a shared server): the best are known once they end,
        and the process that ends the last one confirms them."""
        trials = self.study.get_trials(deepcopy=False)
        own = [t for t in trials if confirm_of(t) is None]
        if not self.sweep.table.confirm or any(row_state(t) in ("running", "waiting") for t in own):
            return False
        if _counted(trials) < self.sweep.table.n_trials:
            return False
        sign = 1.0 if self.sweep.direction == "minimize" else -1.0
        done = sorted((t for t in own if t.state.name == "COMPLETE"), key=lambda t: sign * t.value)
        confirmed = {confirm_of(t) for t in trials}
        queued = False
        for trial in done[: self.sweep.table.confirm]:
            if trial.number in confirmed:
                continue
            attrs = {"confirm_of": trial.number, "run_base": self._run_base(trial)}
            self.study.enqueue_trial(dict(trial.params), user_attrs=attrs)
            queued = True
        return queued


def _counted(trials: list[Any]) -> int:
    """Trials that count toward n_trials: all but interrupted (re-queued) and surplus ones,
    those waiting in the queue (resumes of interrupted ones), and confirmations."""
    return sum(
        row_state(t) not in ("interrupted", "surplus", "waiting") and confirm_of(t) is None
        for t in trials
    )


def _stopped(run: RunProcess) -> bool:
    """Whether the sweep's SIGTERM ended the run before operant-train's handler went in (it
    had trained nothing since its last checkpoint, if any): a stop, not a failure."""
    return run.stop_sent and run.exitcode == -signal.SIGTERM


def _resumed(number: int, study: Any) -> bool:
    return any(t.user_attrs.get("resume_of") == number for t in study.get_trials(deepcopy=False))


def _state(name: str) -> Any:
    from optuna.trial import TrialState

    return TrialState[name]


def _word(state: str, trial: Any) -> str:
    if state == "FAIL":
        return "interrupted" if trial.user_attrs.get("interrupted") else "failed"
    return state.lower()


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)

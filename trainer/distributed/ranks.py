"""One rank's life under torchrun: join the group, share one plan, train, stop together.

Rank 0 plans the run as a lone trainer does (operant.trainer.checkpoint.resume: a new run,
`--resume`, or `--resume auto`), then hands every rank the config, the run id and its own part of
the checkpoint (scattered: a rank never reads the run directory to start). Every rank builds its
trainer; only when all have built does rank 0 create (and lock) the run directory, so a
refusal on any rank leaves nothing behind. The session's services then run with the rank's
role (operant.trainer.services.protocol): rank 0 owns the run directory's files, every rank
publishes its own metrics file, and checkpoints and stops are decided together at update
boundaries (GroupCheckpoints).

The run id: train.run_id if set, else one made from the env id and torchrun's rendezvous id
(TORCHELASTIC_RUN_ID, the same on every rank and across the group's restarts). A group that
torchrun restarts (`--max-restarts`, TORCHELASTIC_RESTART_COUNT > 0) resumes its run from the
newest checkpoint by itself: `--resume auto` semantics.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from operant.shared import runs
from operant.trainer.checkpoint.resume import AUTO, RunPlan
from operant.trainer.distributed import latency as rank_latency
from operant.trainer.distributed.group import Group, Launch, backend_problem, choose_backend
from operant.trainer.run.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from operant.trainer.run.signals import StopSignals
from operant.trainer.services.hooks import Checkpoints
from operant.trainer.services.protocol import GroupError, Outcome, Rank, Role


def _say(launch: Launch, text: str, every_rank: bool = False) -> None:
    if every_rank or launch.rank == 0:
        prefix = f"operant-train[rank {launch.rank}]" if every_rank else "operant-train"
        print(f"{prefix}: {text}", file=sys.stderr, flush=True)


def _say_refusals(problems: list[str | None] | None) -> None:
    """Rank 0 says why the ranks could not build their trainers: once where every rank
    refused alike (a bad network or env option fails the same everywhere: one line, as a
    lone trainer's), else each refusing rank's own, named. Nothing on the other ranks."""
    if problems is None:
        return
    said = [(rank, problem) for rank, problem in enumerate(problems) if problem]
    if len(said) == len(problems) and len({problem for _, problem in said}) == 1:
        print(f"operant-train: {said[0][1]}", file=sys.stderr, flush=True)
        return
    for rank, problem in said:
        print(f"operant-train[rank {rank}]: {problem}", file=sys.stderr, flush=True)


def default_run_id(env_id: str, launch: Launch) -> str:
    """A run id every rank (and every restart of the group) derives alike: the env's part as a
    lone run's (runs.env_slug), then the rendezvous id."""
    rendezvous = re.sub(r"[^A-Za-z0-9._-]", "-", launch.run_id or "torchrun")
    return f"{runs.env_slug(env_id)}-{rendezvous}"


def run_rank(args: Any, launch: Launch, signals: StopSignals, flags: dict[str, Any]) -> int:
    """operant-train as rank `launch.rank` of a torchrun group; its exit status."""
    from operant.envs import EnvError
    from operant.trainer.config import ConfigError, load_config
    from operant.trainer.run import preflight

    try:
        given = load_config(args.config, args.overrides, flags)
    except (ConfigError, EnvError) as error:
        _say(launch, str(error))  # the same on every rank: rank 0 says it
        return EXIT_USAGE
    try:
        # what a lone trainer's preflight refuses, before the group uses the device: this
        # node's, this rank's GPU (each rank that finds it says so)
        preflight.check_device(given.train.device)
        backend = choose_backend(given.train.dist_backend, given.train.device)
        problem = backend_problem(backend, launch.local_rank)
        if problem is not None:
            raise ConfigError(problem)
    except ConfigError as error:
        _say(launch, str(error), every_rank=launch.rank != 0)
        return EXIT_USAGE
    # Until the group has formed there is nothing to save: a stop signal (torchrun ending the
    # ranks because one refused) ends this rank at once instead of after its rendezvous.
    signals.restore()
    try:
        group = Group(
            launch,
            backend,
            given.train.dist_timeout_s,
            given.train.device,
            shared_memory=given.train.dist_shared_memory,
        )
    except GroupError as error:
        _say(launch, str(error), every_rank=True)
        return EXIT_FAILED
    signals.install()
    try:
        return _run_in_group(args, launch, group, signals, flags, given)
    except GroupError as error:
        _say(launch, str(error), every_rank=True)
        return EXIT_FAILED
    finally:
        group.close()


def _run_in_group(
    args: Any, launch: Launch, group: Group, signals: StopSignals, flags: Any, given: Any
) -> int:
    plan, problem = None, None
    if launch.rank == 0:
        plan, problem = _plan_on_zero(args, launch, flags, given)
    shared = group.broadcast_from_zero(
        None if plan is None else _shareable(plan), "sharing the run's plan"
    )
    if shared is None:
        if problem:
            _say(launch, problem)
        return EXIT_USAGE
    parts: list[Any] | None = [None] * group.world_size if launch.rank == 0 else None
    if plan is not None and plan.payload is not None:
        parts = [{"trainer": plan.payload["trainer"], "rng": plan.payload["rng"]}]
        parts += list(plan.payload.get("ranks", ()))
    part = group.scatter_from_zero(parts, "handing out the checkpoint's rank states")
    if plan is None:
        plan = _plan_elsewhere(shared, part)
    try:
        return _train(args, launch, group, signals, plan)
    finally:
        plan.release()


def _plan_on_zero(
    args: Any, launch: Launch, flags: Any, given: Any
) -> tuple[RunPlan | None, str | None]:
    """Rank 0's plan of the run (a lone trainer's rules), or (None, the one-line refusal)."""
    from operant.envs import EnvError
    from operant.shared import runs
    from operant.trainer.checkpoint.resume import ResumeError, plan_run
    from operant.trainer.config import ConfigError
    from operant.trainer.run import preflight

    resume = args.resume
    if resume is None and launch.restart_count > 0:
        resume = AUTO  # torchrun restarted the group: continue from the newest checkpoint
    if not given.train.run_id and resume in (None, AUTO):
        flags = {**flags, "train": {**flags.get("train", {})}}
        flags["train"]["run_id"] = default_run_id(given.env.id, launch)
    try:
        plan = plan_run(resume, args.config, args.overrides, flags)
        plan.settle(preflight.check(plan.config, plan.impl).agents_per_env)
        if plan.config.train.tensorboard:
            from operant.trainer.services import tensorboard

            tensorboard.require()
    except (ConfigError, EnvError, ResumeError, runs.RunNotFoundError) as error:
        return None, str(error)
    for note in plan.notes:
        _say(launch, note)
    return plan, None


def _shareable(plan: RunPlan) -> dict[str, Any]:
    from operant.trainer.config import to_dict

    return {
        "config": to_dict(plan.config),
        "root": str(plan.root),
        "run_id": plan.run_id,
        "checkpoint": None if plan.checkpoint is None else str(plan.checkpoint),
        "resumed": plan.payload is not None,
        "restart": plan.restart,
    }


def _plan_elsewhere(shared: dict[str, Any], part: Any) -> RunPlan:
    """A rank other than 0's plan: rank 0's, with this rank's part of the checkpoint."""
    from operant.envs import resolve_impl
    from operant.trainer.config import load_config

    config = load_config(None, (), shared["config"])
    root = Path(shared["root"])
    return RunPlan(
        config=config,
        impl=resolve_impl(config.env.id, config.env.impl),
        root=root,
        run_id=shared["run_id"],
        run_dir=root / shared["run_id"],
        checkpoint=None if shared["checkpoint"] is None else Path(shared["checkpoint"]),
        payload=part if shared["resumed"] else None,
        restart=shared["restart"],
    )


def _train(args: Any, launch: Launch, group: Group, signals: StopSignals, plan: RunPlan) -> int:
    """Build every rank's trainer, then the run directory, then train together."""
    from operant.envs import EnvError
    from operant.trainer.checkpoint.file_format import CheckpointError
    from operant.trainer.config import ConfigError
    from operant.trainer.run import session

    trainer, problem = None, None
    try:
        trainer = session.build_trainer(plan, group)
    except (CheckpointError, ConfigError, EnvError) as error:
        # a checkpoint's refusal names it; a config's reads as a lone trainer's
        problem = f"{plan.checkpoint}: {error}" if plan.checkpoint else str(error)
    if any(group.agree([problem is not None])):
        _say_refusals(group.gather_to_zero(problem, "gathering the ranks' refusals"))
        return EXIT_USAGE
    assert trainer is not None
    group.broadcast_(trainer.flat.param.data, "the initial parameters' broadcast")
    latency_bound = rank_latency.probe(trainer, group)
    if latency_bound:
        _say(launch, latency_bound)
    status = EXIT_OK
    if launch.rank == 0:
        run_dir, status = session.open_run_dir(plan)
    if any(group.agree([status != EXIT_OK])):
        return status if status != EXIT_OK else EXIT_USAGE
    run_dir = plan.run_dir
    assert run_dir is not None
    trainer.run_dir = run_dir
    rank = Rank(group.rank, group.world_size, group.local_rank)
    services = session.compose(args, plan, signals, trainer, run_dir, rank, group)
    runner = session.Session(trainer, services, signals)
    status = runner.run()
    failure = runner.outcome.error
    if launch.rank != 0 and isinstance(failure, (GroupError, FloatingPointError)):
        _say(launch, str(failure), every_rank=True)
    return status


class GroupCheckpoints(Checkpoints):
    """Checkpoints of a run of several ranks: decided together at every update boundary (a
    stop signal, SIGUSR1, or rank 0's periodic schedule on any rank counts for all), written
    by rank 0 with every rank's state gathered into it. Every rank runs it."""

    role = Role.EVERY_RANK

    def __init__(self, *args: Any, group: Group, plan: RunPlan, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.group = group
        if plan.payload is not None and group.rank != 0:
            self.checkpointer.last_update = plan.resumed_update

    def on_start(self) -> None:
        self.trainer.votes = self._votes

    def _votes(self) -> tuple[bool, bool, bool]:
        """This rank's votes, gathered with the update's record (update_record._pool)."""
        rank_zero = self.group.rank == 0
        return (
            self.signals.stop_requested,
            self.signals.take_checkpoint_request(),
            rank_zero and self.checkpointer.due(self.trainer.update),
        )

    def on_boundary(self) -> bool:
        """The ranks' decision, gathered with the last update's record: the same on every
        rank, so every rank checkpoints or stops at the same boundary (a signal that arrives
        after the record counts at the next one)."""
        stop, requested, due = self.trainer.decision or (False, False, False)
        self.trainer.decision = ()
        if requested or due:
            path = self._try_checkpoint()
            if requested and path is not None:
                print(
                    f"operant-train: SIGUSR1: checkpoint {path} (update "
                    f"{self.trainer.update}, step {self.trainer.global_step:,})",
                    file=sys.stderr,
                    flush=True,
                )
        return stop

    def on_stopping(self, outcome: Outcome) -> None:
        outcome.writing = "the final checkpoint"
        outcome.checkpoint = self.checkpoint()
        outcome.writing = ""

    def checkpoint(self) -> Path | None:
        from operant.trainer.checkpoint.state import capture_global_rng

        update, checkpointer = self.trainer.update, self.checkpointer
        if update == 0 or update == checkpointer.last_update:
            return checkpointer.last_path
        state = {"trainer": self.trainer.state_dict(), "rng": capture_global_rng()}
        states = self.group.gather_to_zero(state, "gathering the ranks' states")
        if states is None:  # not rank 0: its state is in rank 0's file
            checkpointer.last_update = update
            return None
        return checkpointer.save(
            self.trainer, self.config_dict, self.progress.synced_length(), ranks=states[1:]
        )

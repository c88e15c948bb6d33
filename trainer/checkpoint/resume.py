"""Which run a trainer process trains, and from where:
`operant-train [--resume RUN_ID|latest|auto]`.

- no `--resume`: a new run directory (an existing run id is refused);
- `--resume RUN_ID` / `--resume latest`: continue that run from its newest checkpoint, in the
  same directory, with the run's own config (from the checkpoint) unless `--config` is given;
  `--set` and the dedicated flags apply on top either way;
- `--resume auto`: what a service restart needs. The config must name the run
  (`train.run_id`): if that run has a checkpoint, continue it; if not (no directory yet, or a
  crash before its first checkpoint), start it, in the same directory. Without `--config`, an
  existing run's own config is used (its checkpoint's, else the one its run.json recorded).
  A damaged newest checkpoint (its bytes: it does not parse, or fails its digest) does not
  keep a service down: auto continues from the newest older one that reads, sets the
  damaged file(s) aside as `ckpt-*.pt.damaged` (kept, never read again) and says so in one
  line. Only damage falls back: a checkpoint refused for its permissions, version or config
  is refused as always, and so is a run with no readable checkpoint left. An explicit
  `--resume RUN_ID` is a person's choice and refuses a damaged checkpoint, naming it.

A resumed config may differ from the checkpoint's only in keys that do not change what the
saved state means (checkpoint.RESUMABLE_CHANGES: the step budget, logging, checkpoint
settings...); anything else is refused, naming the key.

Everything that can refuse a resume (a missing run, an unreadable or corrupt checkpoint, one
from another config or format, a run another trainer holds) does so here, before anything in
the run directory is touched. The run directory is locked (`flock` on the directory itself,
released when the process ends, however it ends) so that two trainers never write one run.
"""

from __future__ import annotations

import copy
import errno
import fcntl
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from operant.shared import runs
from operant.trainer.config import Config, ConfigError, Derived, derive, load_config

if TYPE_CHECKING:  # (checkpoint_format imports torch: a refusal comes before it)
    from operant.trainer.checkpoint.file_format import DamagedCheckpointError

AUTO = "auto"


class ResumeError(Exception):
    """A run cannot be started or continued as asked; the message is one line that says why
    and what to do. (Defined here, free of torch, so that operant-train can refuse bad input
    before importing it.)"""


class RunInUseError(ResumeError):
    """Another process trains this run right now."""


class RunExistsError(ResumeError):
    """A new run was asked for under a run id that is taken."""


@dataclass
class RunPlan:
    config: Config
    impl: str
    root: Path
    run_id: str
    run_dir: Path | None = None
    """The run's directory once it exists and is locked (None until a new run creates it)."""
    checkpoint: Path | None = None
    """The checkpoint to resume from; None for a run that starts from scratch."""
    payload: dict[str, Any] | None = None
    """The checkpoint's verified contents."""
    restart: bool = False
    """The directory exists but holds no checkpoint: start the run again inside it."""
    made_root: bool = False
    """The runs root did not exist before this run created its directory in it."""
    lock_fd: int = -1
    notes: list[str] = field(default_factory=list)
    """What the trainer says about the plan once it is accepted (a rounded step budget):
    not said when the plan is refused, so a refusal is one line."""
    derived: Derived | None = None
    """The run's batch, updates and step budget (train.total_steps rounded up to whole
    updates), once `settle` has checked them; the Trainer takes it as it is."""

    def settle(self, agents_per_env: int) -> None:
        """Check the config's batch with the env's agents per env (known once the preflight has
        built it: an env of k agents adds k rows a step) and round train.total_steps up to
        whole updates of that batch into `derived`, saying so in `notes`; the config keeps
        the budget it was given. Raises ConfigError."""
        derived = derive(self.config, agents_per_env)
        done = self.resumed_update
        if derived.num_updates < done:  # (it was taken: "done" at once, the budget recorded
            # below the steps taken, the monitor past 100%; 2_000_000 typed for 20_000_000)
            trained = done * derived.batch_size
            raise ConfigError(
                f"train.total_steps = {self.config.train.total_steps:,} is below the "
                f"{trained:,} steps run {self.run_id} has trained ({done:,} updates): give a "
                "larger budget, or leave it out to keep the run's own"
            )
        note = derived.rounding_note(self.config)
        if note is not None:
            self.notes.append(note)
        self.derived = derived

    @property
    def resumed_update(self) -> int:
        return int(self.payload["trainer"]["counters"]["update"]) if self.payload else 0

    def release(self) -> None:
        if self.lock_fd >= 0:
            os.close(self.lock_fd)
            self.lock_fd = -1


def lock_run_dir(run_dir: Path) -> int:
    """Hold an exclusive lock on the run directory for this process's lifetime; returns the
    descriptor that holds it. RunInUseError if another process holds it."""
    fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        os.close(fd)
        if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise
        holder = ""
        try:
            pid = json.loads((run_dir / runs.RUN_FILE).read_text()).get("pid")
            holder = f" (pid {pid})" if pid else ""
        except (OSError, ValueError):
            pass
        raise RunInUseError(
            f"run {run_dir.name!r} is being trained by another process{holder}; stop it first"
        ) from None
    return fd


def _finish(config: Config, root: Path, run_id: str) -> RunPlan:
    from operant.envs import resolve_impl

    _check_run_id(run_id)
    config.train.run_id = run_id  # recorded in run.json and every checkpoint
    return RunPlan(
        config=config,
        impl=resolve_impl(config.env.id, config.env.impl),
        root=root,
        run_id=run_id,
    )


def _read_checkpoint(
    run_dir: Path, required: bool
) -> tuple[int, Path | None, dict | None, Fallback | None]:
    """Lock `run_dir`, then find and load its checkpoint: (lock descriptor, path, payload,
    None); (descriptor, None, None, None) when it has none and none is `required`. Without
    `required` (auto), a damaged checkpoint falls back to the newest older one that reads
    (`_fallback`), and the Fallback says which it passed."""
    from operant.trainer.checkpoint import file_format as checkpoint_format
    from operant.trainer.checkpoint import store as checkpoint
    from operant.trainer.checkpoint.file_format import CheckpointError, DamagedCheckpointError

    fd = lock_run_dir(run_dir)
    try:
        path = checkpoint.find_checkpoint(run_dir / runs.CHECKPOINT_DIR)
        if path is None:
            if required:
                again = resume_hint(run_dir.name, run_dir.parent, auto=True)
                raise CheckpointError(
                    f"run {run_dir.name!r} has no checkpoint to resume from (it stopped before "
                    f"writing one); start it again, with the config it started with: {again}"
                )
            return fd, None, None, None
        try:
            return fd, path, checkpoint_format.load(path), None
        except DamagedCheckpointError as error:
            if required:
                raise
            return (fd, *_fallback(path, error))
    except BaseException:
        os.close(fd)
        raise


@dataclass
class Fallback:
    """Auto's fallback past damaged checkpoints: the files it passed (newest first) and why
    the newest was refused."""

    damaged: list[Path]
    reason: str


def _fallback(path: Path, error: DamagedCheckpointError) -> tuple[Path, dict[str, Any], Fallback]:
    """The newest checkpoint older than the damaged `path` that reads, its payload, and the
    damaged files passed; `error` again when none does."""
    from operant.trainer.checkpoint import file_format as checkpoint_format
    from operant.trainer.checkpoint import store as checkpoint
    from operant.trainer.checkpoint.file_format import DamagedCheckpointError

    damaged, newest = [path], checkpoint.update_of(path) or 0
    files = checkpoint.checkpoint_files(path.parent)
    for older in reversed([file for file in files if (checkpoint.update_of(file) or 0) < newest]):
        try:
            payload = checkpoint_format.load(older)
        except DamagedCheckpointError:
            damaged.append(older)
            continue
        return older, payload, Fallback(damaged, f"{path.name} {error.problem}")
    raise error


def _set_aside(plan: RunPlan, fallback: Fallback) -> None:
    """Rename the damaged checkpoints auto passed to `*.damaged` (kept for a look, never read
    again, out of the rotation), drop a `latest` that named one, and say so."""
    from operant.trainer.checkpoint.file_format import CheckpointError
    from operant.trainer.checkpoint.store import POINTER, read_pointer

    directory = fallback.damaged[0].parent
    try:
        named = read_pointer(directory)
        for path in fallback.damaged:
            path.rename(path.with_name(path.name + ".damaged"))
        if named in fallback.damaged:
            (directory / POINTER).unlink(missing_ok=True)
    except OSError as error:
        raise CheckpointError(
            f"{fallback.reason}, and it cannot be set aside ({error.strerror}); "
            "delete it to resume from an older one"
        ) from None
    names = ", ".join(path.name for path in fallback.damaged)
    plan.notes.append(
        f"{fallback.reason}; resuming from {plan.checkpoint.name if plan.checkpoint else '?'}, "
        f"the newest checkpoint that reads ({names} set aside as *.damaged)"
    )


def _attach(
    plan: RunPlan,
    run_dir: Path,
    fd: int,
    path: Path | None,
    payload: dict[str, Any] | None,
    fallback: Fallback | None = None,
) -> RunPlan:
    """Give the plan its locked directory and checkpoint, checked against its config (and,
    once it passes, set a `fallback`'s damaged checkpoints aside)."""
    from operant.trainer.checkpoint import store as checkpoint
    from operant.trainer.checkpoint.file_format import CheckpointError

    plan.run_dir, plan.lock_fd = run_dir, fd
    if path is None:
        plan.restart = True
        return plan
    payload = cast("dict[str, Any]", payload)  # (_read_checkpoint reads one with each path)
    try:
        checkpoint.check_compatible(path, payload["config"], plan.config)
        _check_world(path, payload)
        saved_impl = payload["trainer"]["env"]["impl"]
        if saved_impl != plan.impl:
            raise CheckpointError(
                f"{path.name} was written with the {saved_impl} env "
                f"implementation, this config resolves to {plan.impl}; set "
                f'env.impl = "{saved_impl}" to resume it'
            )
    except BaseException:
        plan.release()
        raise
    plan.checkpoint, plan.payload = path, payload
    if fallback is not None:
        try:
            _set_aside(plan, fallback)
        except BaseException:
            plan.release()
            raise
    return plan


def _check_world(path: Path, payload: dict[str, Any]) -> None:
    """A checkpoint holds the state of each rank that wrote it: a run resumes with as many."""
    from operant.trainer.checkpoint.file_format import CheckpointError
    from operant.trainer.config import launched_world_size

    saved, world = int(payload.get("world_size", 1)), launched_world_size()
    if saved != world:
        run_dir = path.parent.parent  # <run>/checkpoints/ckpt-*.pt
        ranks = ("--nproc-per-node", str(saved)) if saved > 1 else ()
        how = runs.command_hint(
            "operant-train", *ranks, "--resume", run_dir.name, root=run_dir.parent
        )
        raise CheckpointError(
            f"{path.name} was written by {saved} rank(s) and this is {world}: resume it with {how}"
        )


def resume_hint(run_id: str, root: Path, auto: bool = False) -> str:
    """The command that continues this run as it is being trained (shared.runs.resume_command):
    under torchrun with as many ranks a node, and nodes, as now."""
    local, nodes = os.environ.get("LOCAL_WORLD_SIZE"), os.environ.get("GROUP_WORLD_SIZE")
    launched = "WORLD_SIZE" in os.environ and local
    return runs.resume_command(
        run_id,
        root,
        ranks_per_node=int(local) if launched and local else 1,
        nodes=int(nodes) if launched and nodes else 1,
        auto=auto,
    )


def _merge(base: dict[str, Any], flags: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The checkpoint's saved config `base` with the command line's flags over it, as a new
    dict all the way down: `--set env.options.X=...` is applied to it after, and a shared
    [env.options] table would change the checkpoint's own config too, which the resume's
    check then compared with itself (a changed sticky_action_prob passed)."""
    sections = {section: values for section, values in base.items() if isinstance(values, dict)}
    merged = copy.deepcopy(sections)
    for section, values in flags.items():
        merged.setdefault(section, {}).update(values)
    return merged


def plan_run(
    resume: str | None,
    config_path: str | None,
    overrides: list[str],
    flags: dict[str, dict[str, Any]],
) -> RunPlan:
    """Decide what this process trains. Raises ConfigError, EnvError, ResumeError (a
    CheckpointError, RunInUseError or RunExistsError) or runs.RunNotFoundError, each with a
    one-line message, before anything is written (a new run's directory is created later,
    by the caller, with `create`)."""
    given = load_config(config_path, overrides, flags)
    root = runs.runs_root(given.train.runs_dir)
    problem = runs.root_problem(root)
    if problem is not None:
        where, fix = _root_source(given)
        raise ConfigError(
            f"runs root {root}{where}: {problem}; {fix} (a directory that does "
            "not exist yet is created)"
        )
    if resume is None:
        plan = _finish(given, root, given.train.run_id or runs.make_run_id(given.env.id))
        if (root / plan.run_id).exists():
            raise RunExistsError(
                f"run {plan.run_id!r} already exists under {root}; resume it "
                f"with --resume {plan.run_id}, or choose another --run-id"
            )
        return plan
    if resume == AUTO:
        if not given.train.run_id:
            raise ConfigError(
                "--resume auto needs a fixed run id: set train.run_id in the config "
                "or pass --run-id"
            )
        _check_run_id(given.train.run_id)
        run_dir = root / given.train.run_id
        if not run_dir.is_dir():
            return _finish(given, root, given.train.run_id)
        return _continue(run_dir, False, given if config_path else None, overrides, flags)
    run_dir = runs.resolve_run(root, None if resume == runs.LATEST_NAME else resume)
    if given.train.run_id and given.train.run_id != run_dir.name:
        raise ConfigError(
            f"train.run_id = {given.train.run_id!r} names another run than "
            f"--resume {resume} ({run_dir.name!r})"
        )
    return _continue(run_dir, True, given if config_path else None, overrides, flags)


def _continue(
    run_dir: Path,
    required: bool,
    given: Config | None,
    overrides: list[str],
    flags: dict[str, dict[str, Any]],
) -> RunPlan:
    """The plan that continues the run in `run_dir` (locked) from its newest checkpoint (none
    yet, unless `required`: it starts again there), with the config `given` by --config, else
    the run's own (its checkpoint's, else the one its run.json recorded at its start: never
    the default config, which would train another env inside this run's directory), the flags
    and --set on top."""
    fd, path, payload, fallback = _read_checkpoint(run_dir, required=required)
    try:
        config = given or _own_config(run_dir, path, payload, overrides, flags)
        if config is None:  # neither a checkpoint nor a readable run.json: the flags alone
            config = load_config(None, overrides, flags)
        plan = _finish(config, run_dir.parent, run_dir.name)
    except BaseException:
        os.close(fd)
        raise
    return _attach(plan, run_dir, fd, path, payload, fallback)


def _own_config(
    run_dir: Path,
    path: Path | None,
    payload: dict[str, Any] | None,
    overrides: list[str],
    flags: dict[str, dict[str, Any]],
) -> Config | None:
    """The config a run was trained with, with the flags and --set on top: its checkpoint's,
    else (no checkpoint yet) the one run.json recorded at its start; None if it has neither."""
    if payload is not None and path is not None:
        saved, source = payload["config"], path
    else:
        source = run_dir / runs.RUN_FILE
        try:
            saved = json.loads(source.read_text())["config"]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if not isinstance(saved, dict):
            return None
    try:
        return load_config(None, overrides, _merge(saved, flags))
    except ConfigError as error:
        raise ConfigError(f"the config saved in {source}: {error}") from None


def _check_run_id(run_id: str) -> None:
    if run_id == runs.LATEST_NAME:
        raise ConfigError(
            f"run id {run_id!r} is reserved (the runs root's pointer to the newest run); "
            "choose another --run-id"
        )
    if not runs.valid_run_id(run_id):
        raise ConfigError(f"run id {run_id!r} may use only letters, digits, '.', '_' and '-'")


def _root_source(config: Config) -> tuple[str, str]:
    """Where the runs root came from, as the user set it, and how to change it."""
    if config.train.runs_dir:
        return " (--runs-dir)", "give --runs-dir (or train.runs_dir) a directory"
    if os.environ.get(runs.RUNS_DIR_ENV):
        return f" (${runs.RUNS_DIR_ENV})", f"point ${runs.RUNS_DIR_ENV} at a directory"
    return "", "move that file away, or pass --runs-dir a directory"


def create(plan: RunPlan) -> Path:
    """The run directory of a plan that has none yet: created and locked. FileExistsError for
    a run id that is taken."""
    if plan.run_dir is None:
        plan.made_root = not plan.root.exists()
        plan.run_dir = runs.create_run_dir(plan.root, plan.run_id)
        plan.lock_fd = lock_run_dir(plan.run_dir)
    return plan.run_dir


def discard(plan: RunPlan) -> None:
    """Remove what creating a new run made (its directory, the runs root where this run
    made it and it is empty), so that "nothing was created" holds: a full disk at start
    left an empty runs root behind."""
    shutil.rmtree(plan.root / plan.run_id, ignore_errors=True)
    if plan.made_root:
        latest = plan.root / runs.LATEST_NAME
        if os.path.islink(latest) and os.readlink(latest) == plan.run_id:
            latest.unlink()
        try:
            plan.root.rmdir()
        except OSError:  # not empty (another run, a `latest` link): it stays
            pass

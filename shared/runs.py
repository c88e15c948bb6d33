"""Run directories: where the runs root is, how a run is named and created, and `latest`.

Both processes import this module: the trainer creates run directories, readers (monitor,
`operant runs`, exporter) resolve them. Nothing here writes except the trainer-side
functions `create_run_dir` and `update_latest`.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import time
from pathlib import Path
from typing import Any

from operant.shared import atomic

RUNS_DIR_ENV = "OPERANT_RUNS_DIR"
LATEST_NAME = "latest"
RUN_FILE = "run.json"
METRICS_FILE = "metrics.bin"
METRICS_DIR = "metrics"
"""A run trained by several processes (ranks): one metrics file per rank in here."""
PROGRESS_FILE = "progress.jsonl"
CHECKPOINT_DIR = "checkpoints"
LOG_FILE = "train.log"

_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_RANK_FILE = re.compile(r"^rank-([0-9]{5,})\.bin$")


class RunNotFoundError(Exception):
    """A run id, `latest`, or a runs root that does not resolve; the message says what to do."""


def runs_root(explicit: str | os.PathLike[str] | None = None) -> Path:
    """`--runs-dir`, else $OPERANT_RUNS_DIR, else $XDG_STATE_HOME/operant/runs
    (~/.local/state/operant/runs), so every command finds the same runs from any directory."""
    if explicit:
        return Path(explicit).expanduser()
    env = os.environ.get(RUNS_DIR_ENV)
    if env:
        return Path(env).expanduser()
    return default_runs_root()


def default_runs_root() -> Path:
    """The runs root when neither --runs-dir nor $OPERANT_RUNS_DIR names one:
    $XDG_STATE_HOME/operant/runs (~/.local/state/operant/runs)."""
    state_home = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return Path(state_home) / "operant" / "runs"


def command_hint(command: str, *args: str, root: str | os.PathLike[str]) -> str:
    """A command line a user can paste as printed: `command` (e.g. "operant monitor"), then
    `args`, then `--runs-dir ROOT` (absolute) when `root` is not the default runs root, all
    shell-quoted. A root from $OPERANT_RUNS_DIR is named too: the line is pasted where the
    variable may not be set (a service's journal, read in a login shell)."""
    words = [*shlex.split(command), *args]
    root_path = Path(root).expanduser().absolute()
    if root_path.resolve() != default_runs_root().absolute().resolve():
        words += ["--runs-dir", str(root_path)]
    return shlex.join(words)


def resume_command(
    run_id: str,
    root: str | os.PathLike[str],
    ranks_per_node: int = 1,
    nodes: int = 1,
    auto: bool = False,
) -> str:
    """The command that continues run `run_id` (`auto`: or starts it again in its directory,
    with its own config), pasteable as printed: with its ranks a node where it has several (its
    checkpoints hold each rank's state); a multi-node run's also needs the job's rendezvous,
    which the hint says rather than guesses."""
    words = ["--nproc-per-node", str(ranks_per_node)] if ranks_per_node > 1 or nodes > 1 else []
    words += ["--resume", "auto", "--run-id", run_id] if auto else ["--resume", run_id]
    hint = command_hint("operant-train", *words, root=root)
    return hint + (
        " (on every node, with the job's --nnodes and --rdzv-* flags)" if nodes > 1 else ""
    )


_CHECKPOINT = re.compile(r"^ckpt-\d{9,}\.pt$")


def _started(run_dir: Path | None, key: str) -> Any:
    """run.json's `key` (what started the run: kept through its resumes), or None."""
    if run_dir is None:
        return None
    try:
        return json.loads((run_dir / RUN_FILE).read_text()).get(key)
    except (OSError, ValueError, AttributeError):
        return None


def started_in(run_dir: Path | None) -> str | None:
    """The folder the run was started from (run.json's `cwd`), or None where unknown."""
    folder = _started(run_dir, "cwd")
    return folder if isinstance(folder, str) else None


def started_at(run_dir: Path | None) -> float | None:
    """When the run was first started (run.json's `started_at`, Unix seconds; a resume's
    metrics file is new), or None where unknown."""
    when = _started(run_dir, "started_at")
    return float(when) if isinstance(when, (int, float)) and not isinstance(when, bool) else None


def where_started(error: BaseException, run_dir: Path | None) -> str:
    """`error`'s message, and where the run was started when the error is a user's module
    that is not here (the folder operant-train found it in)."""
    text = str(error)
    folder = started_in(run_dir) if getattr(error, "module_not_here", False) else None
    if folder is None or folder == os.getcwd():
        return text
    return f"{text} (the run was started in {folder}: run this there)"


def has_checkpoint(run_dir: Path) -> bool:
    """Whether `run_dir/checkpoints` holds a checkpoint (a name the trainer gives only to
    whole files), read without opening any: `--resume RUN` needs one."""
    try:
        return any(_CHECKPOINT.match(name) for name in os.listdir(run_dir / "checkpoints"))
    except OSError:
        return False


def root_problem(root: Path) -> str | None:
    """Why `root` cannot hold runs (it, or the nearest part of it that exists, is not a
    directory); None when it can, or may once created."""
    for path in (root, *root.parents):
        if os.path.exists(path):
            return (
                None
                if os.path.isdir(path)
                else (
                    "it is a file, not a directory"
                    if path == root
                    else f"{path} is a file, not a directory"
                )
            )
    return None


def env_slug(env_id: str) -> str:
    """The env part of a default run id: `operant/MinAtar-Breakout-v1` -> `minatar-breakout-v1`."""
    return re.sub(r"[^A-Za-z0-9.-]+", "-", env_id.split("/")[-1]).strip("-").lower()


def make_run_id(env_id: str, now: float | None = None) -> str:
    """`<env>-<UTC timestamp>-<4 hex>`: sorts by time within an env, unique across hosts."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(time.time() if now is None else now))
    return f"{env_slug(env_id)}-{stamp}-{secrets.token_hex(2)}"


def valid_run_id(run_id: str) -> bool:
    return bool(_RUN_ID.match(run_id)) and run_id != LATEST_NAME


def create_run_dir(root: Path, run_id: str) -> Path:
    """Create `root/run_id/` and its checkpoints folder; refuses an existing run id."""
    if not valid_run_id(run_id):
        raise ValueError(f"run id {run_id!r} may use only letters, digits, '.', '_' and '-'")
    root.mkdir(parents=True, exist_ok=True)
    path = root / run_id
    path.mkdir()
    (path / CHECKPOINT_DIR).mkdir()
    return path


def update_latest(root: Path, run_id: str) -> str | None:
    """Point `root/latest` at run_id atomically (operant.shared.atomic.replace_symlink), so a
    reader sees the old run or the new one, never neither. A `latest` that is not a symbolic
    link (a runs root copied with `cp -rL` holds a directory there) is left alone: returns why,
    in one line, for a warning (a run trains without its pointer); None when it was updated."""
    link = root / LATEST_NAME
    if os.path.lexists(link) and not os.path.islink(link):
        kind = "a directory" if os.path.isdir(link) else "a file"
        return (
            f"{link} is {kind}, not the runs root's pointer to the newest run, so it was left "
            "as it is and does not name this run; move it away to have it back"
        )
    atomic.replace_symlink(link, run_id)
    return None


def resolve_run(root: Path, run: str | None) -> Path:
    """The directory of run id `run`, or of the latest run when `run` is None or 'latest'."""
    problem = root_problem(root)
    if problem is not None:
        raise RunNotFoundError(f"runs root {root}: {problem}; pass --runs-dir a directory")
    if run is None or run == LATEST_NAME:
        link = root / LATEST_NAME
        try:
            target = os.readlink(link)
        except FileNotFoundError:
            raise RunNotFoundError(
                f"no runs yet under {root}: start one with operant-train, or pass --runs-dir"
            ) from None
        except OSError as error:
            raise RunNotFoundError(
                f"{link} is not a run pointer ({error.strerror}): move it away, and name a run "
                f"instead (see `{command_hint('operant runs', root=root)}`)"
            ) from None
        path = root / target
        if not path.is_dir():
            raise RunNotFoundError(
                f"{link} points to {target!r}, which no longer exists: name a run instead "
                f"(see `{command_hint('operant runs', root=root)}`)"
            )
        return path
    if not valid_run_id(run):
        raise RunNotFoundError(
            f"{run!r} is not a run id (see `{command_hint('operant runs', root=root)}`)"
        )
    path = root / run
    if not path.is_dir():
        trial = sweep_trial_dir(root, run)
        if trial is not None:
            return trial
        raise RunNotFoundError(
            f"no run {run!r} under {root} (see `{command_hint('operant runs', root=root)}`)"
        )
    return path


def sweep_trial_dir(root: Path, run: str) -> Path | None:
    """The directory of run `run` where it is a sweep's trial (`root/sweeps/NAME/run`:
    operant.shared.sweeps), so that a trial is named by its run id alone; None otherwise."""
    from operant.shared.sweeps import list_sweep_dirs

    for directory in list_sweep_dirs(root):
        if (directory / run / RUN_FILE).is_file():
            return directory / run
    return None


def metrics_path(run_dir: Path, rank: int = 0, world_size: int = 1) -> Path:
    """Where rank `rank` of a run trained by `world_size` processes writes its metrics file:
    `run_dir/metrics.bin` for a single process (as always), else
    `run_dir/metrics/rank-00001.bin` (one file per rank, each with one writer)."""
    if world_size == 1:
        return run_dir / METRICS_FILE
    return run_dir / METRICS_DIR / f"rank-{rank:05d}.bin"


def rank_of(path: Path) -> int | None:
    """The rank a rank file's name says (`rank-00003.bin` -> 3); None for any other name."""
    match = _RANK_FILE.match(path.name)
    return int(match.group(1)) if match else None


def metrics_files(run_dir: Path) -> list[Path]:
    """A run's metrics files, for readers: its rank files in rank order when it has any (a
    run trained by several processes), else `[run_dir/metrics.bin]`, which may not exist yet.
    A rank file the writer is still building (a dot-named temporary) is not listed."""
    try:
        names = os.listdir(run_dir / METRICS_DIR)
    except OSError:  # no metrics/ folder (a single-process run), or it is not readable
        names = []
    ranked = sorted(
        (rank, run_dir / METRICS_DIR / name)
        for name in names
        if (rank := rank_of(Path(name))) is not None
    )
    if ranked:
        return [path for _, path in ranked]
    return [run_dir / METRICS_FILE]


def list_run_dirs(root: Path) -> list[Path]:
    """Run directories under root, oldest first by name within creation time."""
    if not root.is_dir():
        return []
    from operant.shared.sweeps import SWEEPS_DIR  # sweeps' trials are listed by their sweep

    runs = [
        p
        for p in root.iterdir()
        if p.is_dir() and not p.is_symlink() and valid_run_id(p.name) and p.name != SWEEPS_DIR
    ]
    return sorted(runs, key=lambda p: (p.stat().st_mtime, p.name))

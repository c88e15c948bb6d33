"""`operant train ... --detach | --monitor`: start the trainer in the background, then (with
--monitor) watch it in the foreground.

Output: with --detach, stdout carries the run id alone, so `RUN=$(operant train --detach)`
captures it; where the log is and how to watch and stop the run go to stderr, with commands
that can be pasted as printed (`--runs-dir` included when the run is not under the default
runs root).

The trainer is `operant-train` with the same arguments, started in its own session
(`start_new_session`) with stdin from /dev/null and stdout/stderr to the run directory's
`train.log`: Ctrl-C in this terminal, closing it, or killing the monitor never reaches the
trainer. The log is opened before the trainer creates its run directory (it must exist when
the process starts), so it begins as a hidden file in the runs root and is renamed into the
run directory as soon as that exists; the trainer keeps writing to the same open file.

trainer/run/main.py calls `launch` once it has resolved the runs root and run id from its config,
so both processes agree on where the run lives without this module reading any config.

Why it lives in the root package, beside the `operant` dispatcher: it composes the two
processes, so it belongs to neither. The arrows run trainer -> shared <- monitor; in monitor/
it made the trainer import the monitor, and in trainer/ it would do the same (it runs the
monitor in the foreground), while the monitor importing anything of trainer/ would drag torch
into its start-up. Here it imports only shared/ (and the monitor's CLI when asked to watch),
and starts the trainer by module name in a new process, never importing it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from operant.shared.runs import LOG_FILE, command_hint, metrics_files

MONITOR_FLAG = "--monitor"
DETACH_FLAG = "--detach"
# How long to wait for the trainer's metrics file: imports, env compilation and the first
# allocation happen before it exists.
STARTUP_TIMEOUT_S = 120.0
_POLL_S = 0.05
LOG_TAIL_LINES = 10


def trainer_command(argv: list[str], run_id: str) -> list[str]:
    """operant-train's command line: the user's arguments without --monitor/--detach, and the
    run id this launcher waits for."""
    args = [arg for arg in argv if arg not in (MONITOR_FLAG, DETACH_FLAG)]
    if not any(arg == "--run-id" or arg.startswith("--run-id=") for arg in args):
        args += ["--run-id", run_id]
    return [sys.executable, "-m", "operant.trainer.run.main", *args]


def launch(
    argv: list[str], root: Path, run_id: str, *, monitor: bool, timeout_s: float = STARTUP_TIMEOUT_S
) -> int:
    """Start the trainer for run `run_id` under `root` in the background and say on stderr
    how to watch and stop it; with `monitor`, run the monitor on it until the user detaches,
    else print the run id alone on stdout (for `RUN=$(operant train --detach)`). Returns the
    exit status."""
    if MONITOR_FLAG in argv and DETACH_FLAG in argv:
        print(f"operant train: give {MONITOR_FLAG} or {DETACH_FLAG}, not both", file=sys.stderr)
        return 2
    run_dir = root / run_id
    # A resumed run already has its directory (and its old log and metrics file): append to
    # the log, and wait for the metrics file the new trainer makes, not the old one.
    resuming = run_dir.is_dir()
    early_log = run_dir / LOG_FILE if resuming else root / f".{run_id}.{LOG_FILE}"
    try:
        root.mkdir(parents=True, exist_ok=True)
        log = open(early_log, "ab")  # noqa: SIM115 (handed to the child, closed after Popen)
    except OSError as error:
        print(f"operant train: cannot write a log under {root}: {error.strerror}", file=sys.stderr)
        return 2
    old_metrics = _identity(metrics_files(run_dir)[0])
    with log:
        trainer = subprocess.Popen(
            trainer_command(argv, run_id),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    log_path = _wait_for_metrics(trainer, run_dir, early_log, old_metrics, timeout_s)
    if log_path is None:
        return _report_early_exit(trainer, run_dir, early_log, timeout_s)
    print(
        f"run {run_id} is training in the background (pid {trainer.pid})\n"
        f"  log:    {log_path}\n"
        f"  watch:  {command_hint('operant monitor', run_id, root=root)}\n"
        f"  stop:   kill -TERM {trainer.pid}",
        file=sys.stderr,
        flush=True,
    )
    if not monitor:
        print(run_id, flush=True)  # alone on stdout: RUN=$(operant train --detach)
        return 0
    from operant.monitor import cli

    return cli.main([run_id, "--runs-dir", str(root)])


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_mtime_ns


def _wait_for_metrics(
    trainer: subprocess.Popen,
    run_dir: Path,
    early_log: Path,
    old_metrics: tuple[int, int] | None,
    timeout_s: float,
) -> Path | None:
    """The log's final path once the trainer has made the run's metrics file; None if it
    exited before that or the timeout passed."""
    log_path = early_log
    deadline = time.monotonic() + timeout_s
    while True:
        if log_path.parent != run_dir and run_dir.is_dir():
            log_path = run_dir / LOG_FILE
            os.replace(early_log, log_path)
        # metrics.bin, or rank 0's file of a run of several ranks (--nproc-per-node).
        metrics = _identity(metrics_files(run_dir)[0])
        if metrics is not None and metrics != old_metrics:
            return log_path
        if trainer.poll() is not None or time.monotonic() > deadline:
            return None
        time.sleep(_POLL_S)


def _report_early_exit(
    trainer: subprocess.Popen, run_dir: Path, early_log: Path, timeout_s: float
) -> int:
    log_path = run_dir / LOG_FILE if (run_dir / LOG_FILE).exists() else early_log
    if trainer.returncode is None:
        print(
            f"operant train: the trainer (pid {trainer.pid}) made no metrics file in "
            f"{timeout_s:g} s; it keeps running, see {log_path}",
            file=sys.stderr,
        )
        return 1
    lines = log_path.read_text(errors="replace").strip().splitlines()
    if log_path.parent == run_dir:
        # The run exists (resumed, or the trainer failed after making it): its log stays,
        # and may hold earlier sessions too, so only its end is shown.
        lines = lines[-LOG_TAIL_LINES:] + [
            f"operant train: the trainer exited with status {trainer.returncode}; its log "
            f"is {log_path}"
        ]
    else:
        early_log.unlink()  # nothing else of this run exists: leave no trace
    output = "\n".join(lines)
    sys.stderr.write(
        (output + "\n")
        if output
        else f"operant train: the trainer exited with status {trainer.returncode}\n"
    )
    return trainer.returncode or 1

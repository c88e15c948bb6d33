"""`operant sweep SWEEP.toml` and `operant sweep show NAME`: the command lines.

Exit codes: 0 the sweep ran its trials (or stopped on a signal, its trials checkpointed:
the same command continues it); 2 bad input (the sweep file, a flag, a storage that cannot be
reached, Optuna not installed, a sweep directory another process runs), nothing created.
"""

from __future__ import annotations

import argparse
import errno
import fcntl
import os
import sys
from pathlib import Path

from operant.shared.cli_parser import EXIT_USAGE, OneLineParser
from operant.shared.sweeps import CONFIG_FILE, STUDY_FILE, sweep_dir
from operant.trainer.sweep.spec import Sweep, SweepError, config_toml, load_sweep

PROG = "operant sweep"


def _run_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=PROG,
        description="Tune a config with Optuna: each trial is an ordinary run under "
        "RUNS_ROOT/sweeps/NAME/ (docs/sweeps.md). `operant sweep show NAME` prints the "
        "leaderboard.",
        epilog="Exit codes: 0 done (or stopped by a signal, trials checkpointed: run the same "
        "command to continue), 2 bad input (nothing created).",
    )
    parser.add_argument("sweep_file", metavar="SWEEP.toml", help="a config file with [sweep]")
    parser.add_argument(
        "--workers",
        type=_positive,
        default=1,
        metavar="W",
        help="trials at once on this machine (torch threads divided)",
    )
    parser.add_argument(
        "--storage",
        metavar="URL",
        help="Optuna RDB storage, e.g. postgresql://user:pw@host/db "
        "(default: an SQLite file in the sweep directory)",
    )
    parser.add_argument("--runs-dir", metavar="DIR", help="runs root (as operant-train's)")
    return parser


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return value


def main(argv: list[str] | None = None) -> int:
    args_list = sys.argv[1:] if argv is None else argv
    if args_list[:1] == ["show"]:
        from operant.trainer.sweep.show import main as show

        return show(args_list[1:])
    args = _run_parser().parse_args(args_list)
    from operant.trainer.sweep.study import missing_optuna

    problem = missing_optuna()
    if problem is not None:
        print(f"{PROG}: {problem}", file=sys.stderr)
        return EXIT_USAGE
    try:
        return _sweep(args)
    except SweepError as error:
        print(f"{PROG}: {error}", file=sys.stderr)
        return EXIT_USAGE


def _sweep(args: argparse.Namespace) -> int:
    from operant.shared import runs
    from operant.trainer.sweep import trials
    from operant.trainer.sweep.driver import Driver
    from operant.trainer.sweep.study import open_storage, open_study, redacted

    sweep = load_sweep(args.sweep_file)
    root = runs.runs_root(args.runs_dir or sweep.config.train.runs_dir)
    problem = runs.root_problem(root)
    if problem is not None:
        raise SweepError(f"runs root {root}: {problem}; pass --runs-dir a directory")
    directory = sweep_dir(root, sweep.name).absolute()
    url = args.storage or f"sqlite:///{directory / STUDY_FILE}"
    study = None
    if args.storage:  # checked before anything is created here
        study = open_study(sweep, open_storage(url), args.workers)
    trials.warm_up()  # the fork server imports torch while the study opens
    created = not directory.exists()
    directory.mkdir(parents=True, exist_ok=True)
    lock = _lock(directory, exclusive=not args.storage)
    try:
        if study is None:
            study = open_study(sweep, open_storage(url), args.workers)
        _write_config(directory, sweep)
        driver = Driver(sweep, study, directory, args.workers, not args.storage, sys.stdout)
        driver.storage_text = redacted(url)
        return driver.run()
    except SweepError:
        if created:
            _remove_new(directory)
        raise
    finally:
        os.close(lock)


def _lock(directory: Path, exclusive: bool) -> int:
    """Hold the sweep directory: with the SQLite storage one sweep process at a time (its
    trials' state is then this process's alone to judge); with a server's, any number."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
    except OSError as error:
        os.close(fd)
        if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise
        raise SweepError(
            f"sweep directory {directory} is in use by another operant sweep: wait for it, "
            "or share one study between processes with --storage postgresql://..."
        ) from None
    return fd


def _write_config(directory: Path, sweep: Sweep) -> None:
    from operant.shared import atomic

    atomic.write_text(directory / CONFIG_FILE, config_toml(sweep.config_data))


def _remove_new(directory: Path) -> None:
    """A sweep directory this command made, removed after a refusal (nothing is left)."""
    import shutil

    shutil.rmtree(directory, ignore_errors=True)

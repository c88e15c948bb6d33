"""What a user types, as real processes: the installed `operant` and `operant-train` commands,
trainers started and stopped the way a user starts and stops them, and the commands the
programs print as hints, run exactly as printed."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

BIN = Path(sys.executable).parent
# Small updates (8 envs x 32 steps): a run has its first checkpoints within a second.
SMALL = ["--set", "env.num_envs=8", "--set", "ppo.num_steps=32", "--set", "ppo.num_minibatches=2"]
# A budget no test trains to the end: those runs are stopped by a signal.
ENDLESS = ["--total-steps", str(256 * 1_000_000)]


def command(words: list[str]) -> list[str]:
    """`words` with its program resolved the way the user's shell would find it: the console
    scripts installed beside this Python."""
    program = BIN / words[0]
    return [str(program), *words[1:]] if program.exists() else words


def run(
    *words: str, env: dict[str, str] | None = None, timeout: float = 240
) -> subprocess.CompletedProcess:
    return subprocess.run(
        command(list(words)), capture_output=True, text=True, timeout=timeout, env=env
    )


def run_hint(hint: str, *extra: str, timeout: float = 240) -> subprocess.CompletedProcess:
    """A printed command, split the way a shell splits what is pasted into it."""
    return run(*shlex.split(hint), *extra, timeout=timeout)


def _as_in_a_terminal() -> None:
    """In the child before exec: SIGINT as a terminal's foreground job has it. A test runner
    started in the background by a shell without job control (`pytest &` in a script)
    ignores SIGINT, its children inherit that, and operant-train rightly keeps a SIGINT that
    it was started with ignored ignored (operant.trainer.run.signals): Ctrl-C tests would hang."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_trainer(*args: str, log: Path) -> subprocess.Popen:
    """operant-train in the foreground of a (pretend) terminal: its output goes to `log`."""
    with open(log, "w") as out:
        return subprocess.Popen(
            command(["operant-train", *args]),
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            preexec_fn=_as_in_a_terminal,
        )


def wait_for_updates(run_dir: Path, count: int, timeout: float = 120) -> None:
    progress = run_dir / "progress.jsonl"
    deadline = time.monotonic() + timeout
    while True:
        try:
            if len(progress.read_text().splitlines()) >= count:
                return
        except FileNotFoundError:
            pass
        assert time.monotonic() < deadline, f"{run_dir} made no {count} updates"
        time.sleep(0.05)


def stop(trainer: subprocess.Popen, sig: int = signal.SIGTERM) -> int:
    trainer.send_signal(sig)
    return trainer.wait(timeout=120)


def wait_until_gone(pid: int, timeout: float = 120) -> None:
    """Wait for a process that is not our child (a detached trainer) to exit."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            os.kill(pid, 0)
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return
        except (ProcessLookupError, FileNotFoundError):
            return
        assert time.monotonic() < deadline, f"pid {pid} is still running"
        time.sleep(0.05)


def last_record(run_dir: Path) -> dict:
    return json.loads((run_dir / "progress.jsonl").read_text().splitlines()[-1])


def kill_quietly(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass

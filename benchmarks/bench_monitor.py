"""What the monitor costs: start-up to its first frame, its CPU use while watching a live run at
the default refresh, and the trainer's steps/s with and without a monitor attached.

    python benchmarks/bench_monitor.py [--parts startup,cpu,sps] [--rounds 7] [--watch-s 20]
                                       [--sps-steps 300000] [--sps-rounds 3] [--json]

- startup: `operant monitor --latest` (a new process, as a user starts it) in an 80x24
  pseudo-terminal, from the spawn until the run's id has been drawn: Python, Textual and the
  first frame with data, with the watched trainer stopped meanwhile and Python's bytecode
  cache on (as for an installed package; the first start, which fills it, is not timed).
  Target: 0.5 s.
- cpu: the same command watching a training run for --watch-s seconds after a 3 s warm-up,
  the monitor's user+system CPU time over wall time, in % of one core. Target: 5 %.
- sps: `operant-train` for --sps-steps steps alone and with a monitor attached the whole
  time, alternating, same seed; the median of the trainer's per-update steps/s over the
  second half of the run.

Each figure is the median over rounds. Run on an otherwise idle machine: the CPU figure is the
monitor's alone, but the start-up and SPS figures move with any other load.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import pty
import select
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time
from pathlib import Path

import psutil

from operant.shared.record import decode_progress_line
from operant.shared.runs import METRICS_FILE, PROGRESS_FILE

SEED = 1


def operant(*args: str) -> list[str]:
    return [sys.executable, "-m", "operant", *args]


def user_environment() -> dict[str, str]:
    """The environment a user's monitor starts in: a terminal, and Python's bytecode cache
    on (a development shell may turn it off, which recompiles operant's modules at every
    start; an installed package has them compiled)."""
    env = dict(os.environ, TERM="xterm-256color")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


class Terminal:
    """A process in an 80x24 pseudo-terminal, its output read as it comes."""

    def __init__(self, command: list[str]):
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
        self.started = time.perf_counter()
        self.process = subprocess.Popen(
            command,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=user_environment(),
            start_new_session=True,
        )
        os.close(slave)
        self.master = master
        self.output = b""

    def read(self, seconds: float) -> None:
        deadline = time.perf_counter() + seconds
        while (left := deadline - time.perf_counter()) > 0:
            ready, _, _ = select.select([self.master], [], [], left)
            if ready:
                try:
                    self.output += os.read(self.master, 1 << 16)
                except OSError:
                    return

    def seconds_until(self, text: str, timeout_s: float = 30.0) -> float:
        needle = text.encode()
        while needle not in self.output:
            if time.perf_counter() - self.started > timeout_s:
                raise RuntimeError(f"{text!r} never appeared")
            ready, _, _ = select.select([self.master], [], [], 0.5)
            if ready:
                self.output += os.read(self.master, 1 << 16)
        return time.perf_counter() - self.started

    def close(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()
        os.close(self.master)


def start_trainer(root: Path, steps: int, run_id: str) -> subprocess.Popen:
    trainer = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "operant.trainer.run.main",
            "--total-steps",
            str(steps),
            "--seed",
            str(SEED),
            "--runs-dir",
            str(root),
            "--run-id",
            run_id,
            "--quiet",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    while not (root / run_id / METRICS_FILE).exists():
        if trainer.poll() is not None:
            raise RuntimeError("the trainer exited before creating its metrics file")
        time.sleep(0.05)
    return trainer


def bench_startup(root: Path, run_id: str, rounds: int) -> list[float]:
    times = []
    for round_ in range(rounds + 1):  # the first start fills the bytecode cache: not timed
        terminal = Terminal(operant("monitor", "--latest", "--runs-dir", str(root)))
        try:
            seconds = terminal.seconds_until(run_id)
        finally:
            terminal.close()
        if round_:
            times.append(seconds)
    return times


def bench_cpu(root: Path, run_id: str, watch_s: float) -> float:
    terminal = Terminal(operant("monitor", "--latest", "--runs-dir", str(root)))
    try:
        terminal.seconds_until(run_id)
        terminal.read(3.0)
        process = psutil.Process(terminal.process.pid)
        before, started = process.cpu_times(), time.perf_counter()
        terminal.read(watch_s)
        after, elapsed = process.cpu_times(), time.perf_counter() - started
        used = (after.user - before.user) + (after.system - before.system)
        return 100.0 * used / elapsed
    finally:
        terminal.close()


def trainer_sps(root: Path, steps: int, run_id: str, monitored: bool) -> float:
    """The median of the trainer's per-update steps/s over the second half of its updates:
    by then the monitor has started (its start-up is a burst of CPU), and a median is not
    moved by a few updates another process happened to slow."""
    trainer = start_trainer(root, steps, run_id)
    terminal = Terminal(operant("monitor", run_id, "--runs-dir", str(root))) if monitored else None
    try:
        trainer.communicate(timeout=900)
    finally:
        if terminal is not None:
            terminal.close()
    records = [decode_progress_line(line) for line in (root / run_id / PROGRESS_FILE).open()]
    return statistics.median(record.sps for record in records[len(records) // 2 :])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--watch-s", type=float, default=20.0)
    parser.add_argument("--sps-steps", type=int, default=300_000)
    parser.add_argument("--sps-rounds", type=int, default=3)
    parser.add_argument(
        "--parts",
        default="startup,cpu,sps",
        help="comma-separated: startup, cpu, sps (default: all)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    startup: list[float] = []
    cpu: list[float] = []
    sps: dict[str, list[float]] = {"alone": [], "monitored": []}
    with tempfile.TemporaryDirectory(prefix="bench-monitor-") as tmp:
        root = Path(tmp)
        # A run long enough to watch: it is killed once the start-up and CPU figures are in.
        watched = start_trainer(root, 50_000_000, "watched")
        try:
            time.sleep(3.0)  # some history to draw
            # The trainer is stopped while the monitor starts, so start-up is not timed
            # against a trainer busy on every core (the monitor then shows it stalled).
            watched.send_signal(signal.SIGSTOP)
            try:
                if "startup" in parts:
                    startup = bench_startup(root, "watched", args.rounds)
            finally:
                watched.send_signal(signal.SIGCONT)
            if "cpu" in parts:
                cpu = [bench_cpu(root, "watched", args.watch_s) for _ in range(3)]
        finally:
            watched.kill()
            watched.wait()
        for index in range(args.sps_rounds if "sps" in parts else 0):
            for mode in ("alone", "monitored"):
                sps[mode].append(
                    trainer_sps(root, args.sps_steps, f"sps-{mode}-{index}", mode == "monitored")
                )
    result: dict[str, object] = {"cpus": os.cpu_count()}
    if startup:
        result["startup_s"] = {"median": statistics.median(startup), "all": startup, "target": 0.5}
    if cpu:
        result["cpu_percent_of_one_core"] = {
            "median": statistics.median(cpu),
            "all": cpu,
            "target": 5.0,
            "refresh_s": 1.0,
        }
    if sps["alone"]:
        result["trainer_sps"] = {
            mode: {"median": statistics.median(values), "all": values}
            for mode, values in sps.items()
        }
    if args.json:
        print(json.dumps(result))
        return 0
    if startup:
        print(
            f"start-up to first frame with data: median {statistics.median(startup):.3f} s "
            f"(target 0.5 s) over {len(startup)} starts: " + ", ".join(f"{t:.3f}" for t in startup)
        )
    if cpu:
        print(
            f"CPU at the default 1 s refresh: median {statistics.median(cpu):.2f} % of one "
            f"core (target 5 %), {args.watch_s:g} s windows: " + ", ".join(f"{c:.2f}" for c in cpu)
        )
    if sps["alone"]:
        alone = statistics.median(sps["alone"])
        monitored = statistics.median(sps["monitored"])
        print(
            f"trainer steps/s: alone {alone:,.0f}, with a monitor {monitored:,.0f} "
            f"({100 * (monitored / alone - 1):+.1f} %)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

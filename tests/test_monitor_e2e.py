"""The monitor against a real training run, in real terminals.

One run is started the way users start one in the background (`operant train --detach`),
and an unmonitored twin with the same seed trains beside it. Then:
- the real `operant monitor --latest` runs in tmux, driven with send-keys and read with
  capture-pane;
- monitors are started, SIGKILLed and restarted 20 times during the run (one is SIGSTOPped
  for seconds), and the run must end exactly as its unmonitored twin did: training is
  deterministic on CPU for a seed, so every progress record but its timings must match.
SPS with and without monitors is a benchmark (benchmarks/bench_monitor.py), not a test.
"""

import fcntl
import json
import os
import pty
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import psutil
import pytest
from tmux_fixtures import Tmux, update_number

from operant.shared.reader import MetricsReader
from operant.shared.runs import LOG_FILE, METRICS_FILE, PROGRESS_FILE

SEED = 11
# Long enough to outlast the tmux test and 20 monitor restarts (about 25 s of training on
# half a core of the 2-core machine at the default config's ~190K steps/s on a whole one).
# Far more than the restarts take on any machine: the test stops both runs by SIGTERM once
# the restarts are over (a fixed budget ran out mid-test once the native update doubled the
# default config's speed).
TOTAL_STEPS = 200_000_000
# Both trainers share the first CPU and the monitors get the others, so the run outlasts the
# restarts whatever the machine's speed (the twin pays the same, and the results do not
# depend on speed).
_CPUS = sorted(os.sched_getaffinity(0))
TRAINER_CPUS = set(_CPUS[:1]) if len(_CPUS) > 1 else set(_CPUS)
MONITOR_CPUS = set(_CPUS[1:]) if len(_CPUS) > 1 else set(_CPUS)


def on_trainer_cpus() -> None:
    os.sched_setaffinity(0, TRAINER_CPUS)


TIMING_KEYS = {"elapsed_s", "sps", "sps_mean", "phase_s"}
RESTARTS = 20


def operant(*args: str) -> list[str]:
    return [sys.executable, "-m", "operant", *args]


class Training:
    """The detached run, its unmonitored twin, and where they live."""

    def __init__(self, root: Path):
        self.root = root / "monitored"
        self.reference_root = root / "reference"
        started = subprocess.run(
            operant(
                "train",
                "--detach",
                "--total-steps",
                str(TOTAL_STEPS),
                "--seed",
                str(SEED),
                "--runs-dir",
                str(self.root),
            ),
            capture_output=True,
            text=True,
            timeout=180,
            preexec_fn=on_trainer_cpus,
        )
        assert started.returncode == 0, started.stderr
        self.launch_output = started.stderr
        match = re.search(
            r"^run (\S+) is training in the background \(pid (\d+)\)$", started.stderr, re.M
        )
        assert match, started.stderr
        assert started.stdout == match.group(1) + "\n"  # the run id alone
        self.run_id, self.pid = match.group(1), int(match.group(2))
        self.dir = self.root / self.run_id
        self.reference = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "operant.trainer.run.main",
                "--total-steps",
                str(TOTAL_STEPS),
                "--seed",
                str(SEED),
                "--runs-dir",
                str(self.reference_root),
                "--run-id",
                "twin",
                "--quiet",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            preexec_fn=on_trainer_cpus,
        )

    def step(self) -> int:
        with MetricsReader(self.dir / METRICS_FILE) as reader:
            return reader.counter("global_step")

    def trainer_alive(self) -> bool:
        try:
            return psutil.Process(self.pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    def unpin(self) -> None:
        for pid in (self.pid, self.reference.pid):
            try:
                os.sched_setaffinity(pid, set(_CPUS))
            except ProcessLookupError:
                pass

    def stop_both(self, timeout_s: float = 120.0) -> tuple[list[dict], list[dict]]:
        """SIGTERM the monitored run (it checkpoints and stops at an update boundary), then
        its twin once the twin has gone at least as far; both must exit 0. Their records."""
        os.kill(self.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while self.trainer_alive():
            assert time.monotonic() < deadline, "the monitored run did not stop on SIGTERM"
            time.sleep(0.1)
        monitored = progress(self.dir)
        twin = self.reference_root / "twin"
        while len(progress(twin)) < len(monitored):
            assert self.reference.poll() is None, self.reference.stderr.read()
            assert time.monotonic() < deadline, "the twin did not catch up"
            time.sleep(0.1)
        self.reference.send_signal(signal.SIGTERM)
        assert self.reference.wait(timeout=max(1.0, deadline - time.monotonic())) == 0, (
            self.reference.stderr.read()
        )
        return monitored, progress(twin)

    def stop(self) -> None:
        for pid in (self.pid, self.reference.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.reference.wait(timeout=30)


@pytest.fixture(scope="module")
def training(tmp_path_factory):
    run = Training(tmp_path_factory.mktemp("e2e"))
    yield run
    run.stop()


def test_detach_prints_the_run_and_logs_into_its_directory(training):
    out = training.launch_output
    assert f"watch:  operant monitor {training.run_id}" in out
    assert f"log:    {training.dir / LOG_FILE}" in out
    assert (training.dir / LOG_FILE).is_file()
    assert not list(training.root.glob(".*" + LOG_FILE))  # the early log was moved in
    # Its own session: the terminal's Ctrl-C and hangup never reach it.
    assert os.getsid(training.pid) == training.pid != os.getsid(0)
    assert os.readlink(training.root / "latest") == training.run_id


# --- tmux ------------------------------------------------------------------------------------


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_operant_monitor_latest_in_tmux(training):
    tmux = Tmux(operant("monitor", "--latest", "--runs-dir", str(training.root)))
    try:
        # A capture may catch a frame half drawn: wait for every part of one.
        screen = tmux.until(training.run_id, "running", "global_step", "ago  update ", "q Detach")
        for words in ("CartPole-v1", "episode return", "steps/s", f"pid {training.pid}"):
            assert words in screen, words
        first = update_number(screen)
        later = tmux.until_true(lambda screen: update_number(screen) > first)
        assert "env " in later and "forward " in later  # the phase legend
        tmux.keys("?")
        tmux.until("Keys", "detach: the run keeps training")
        tmux.keys("Escape", "r")
        tmux.until("Attach to a run", training.run_id)
        tmux.keys("Escape", "p")
        paused = tmux.until("PAUSED (p resumes)")
        time.sleep(1.5)
        assert tmux.screen().splitlines()[2:] == paused.splitlines()[2:]  # frozen
        tmux.keys("p")
        resumed = update_number(paused)
        tmux.until_true(lambda screen: "PAUSED" not in screen and update_number(screen) > resumed)
        tmux.keys("q")
        done = tmux.until("MONITOR-EXIT=0")
        assert f"detached from {training.run_id}; training goes on" in done
        assert training.trainer_alive()
    finally:
        tmux.close()


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
@pytest.mark.parametrize("how", ["SIGTERM", "ctrl+q"])
def test_a_killed_or_quit_monitor_gives_the_terminal_back(training, how):
    """Killed (SIGTERM: a kill, a timeout, systemd) it left the alternate screen, mouse
    reporting and a hidden cursor behind, the shell unusable until `reset`; ctrl+q, Textual's
    quit, left without the detach line. Both now leave as q does."""
    tmux = Tmux(operant("monitor", "--latest", "--runs-dir", str(training.root)))
    try:
        tmux.until(training.run_id, "global_step", "q Detach")
        if how == "SIGTERM":
            shell = psutil.Process(int(tmux.tmux("display", "-p", "-t", "monitor", "#{pane_pid}")))
            (monitor,) = shell.children()
            monitor.send_signal(signal.SIGTERM)
        else:
            tmux.keys("C-q")
        done = tmux.until("MONITOR-EXIT=0")
        assert f"detached from {training.run_id}; training goes on" in done
        modes = tmux.tmux("display", "-p", "-t", "monitor", "#{alternate_on} #{mouse_any_flag}")
        assert modes.split() == ["0", "0"]
        assert training.trainer_alive()
    finally:
        tmux.close()


# --- crash isolation -------------------------------------------------------------------------


class PtyMonitor:
    """`operant monitor --latest` in a pseudo-terminal of 80x24, its screen output drained."""

    def __init__(self, root: Path):
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
        self.process = subprocess.Popen(
            operant("monitor", "--latest", "--runs-dir", str(root)),
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=dict(os.environ, TERM="xterm-256color"),
            start_new_session=True,
            preexec_fn=lambda: os.sched_setaffinity(0, MONITOR_CPUS),
        )
        os.close(slave)
        self.master = master
        self.output = b""

    def drain(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([self.master], [], [], left)
            if ready:
                try:
                    self.output += os.read(self.master, 65536)
                except OSError:  # the monitor is gone
                    return

    def drawn(self, word: str, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while word.encode() not in self.output and time.monotonic() < deadline:
            self.drain(0.05)
        return word.encode() in self.output

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)
        os.close(self.master)


def progress(run_dir: Path) -> list[dict]:
    """Every update's record, timings left out."""
    records = []
    path = run_dir / PROGRESS_FILE
    text = path.read_text() if path.exists() else ""
    for line in text.split("\n")[:-1]:  # complete lines: a running trainer may be mid-line
        record = json.loads(line)
        records.append({key: value for key, value in record.items() if key not in TIMING_KEYS})
    return records


def test_killing_monitors_never_touches_training(training):
    steps_seen = []
    for restart in range(RESTARTS):
        assert training.trainer_alive(), f"the run ended after {restart} restarts"
        monitor = PtyMonitor(training.root)
        # Every other monitor is killed once it has drawn the run, the others wherever
        # they are in starting up.
        if restart % 2 == 0:
            assert monitor.drawn(training.run_id, timeout_s=20), monitor.output[-500:]
        else:
            monitor.drain(0.01 * restart)
        try:
            if restart == RESTARTS // 2:
                monitor.process.send_signal(signal.SIGSTOP)
                before = training.step()
                # the trainer goes on while the monitor is stopped
                deadline = time.monotonic() + 30
                while training.step() <= before:
                    assert time.monotonic() < deadline, "no update while the monitor was stopped"
                    time.sleep(0.05)
                monitor.process.send_signal(signal.SIGCONT)
        finally:
            monitor.kill()  # even when an assertion failed: never leave a stopped monitor behind
        steps_seen.append(training.step())
    assert training.trainer_alive(), "the run ended before the last restart"
    assert steps_seen == sorted(steps_seen) and steps_seen[-1] > steps_seen[0]

    training.unpin()  # the restarts are over
    monitored, reference = training.stop_both()
    assert len(monitored) >= RESTARTS // 2  # it trained throughout, update after update
    assert monitored[-1]["global_step"] == reference[len(monitored) - 1]["global_step"]
    assert monitored == reference[: len(monitored)]  # the twin's updates, bit for bit
    with MetricsReader(training.dir / METRICS_FILE) as reader:
        snapshot = reader.snapshot()
    assert (snapshot.status, snapshot.interrupted) == ("finished", True)  # by SIGTERM
    assert snapshot.counters["global_step"] == monitored[-1]["global_step"]

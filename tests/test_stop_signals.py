"""The trainer as a service: a real operant-train process under a stand-in for systemd's
notify socket (READY, STATUS, WATCHDOG while advancing, STOPPING), stopped by SIGTERM within
the unit's stop timeout with a checkpoint; SIGINT twice; a SIGINT ignored on entry stays
ignored; nothing installed at import.

Every child starts with the dispositions an interactive shell gives (signal_defaults), and
the in-process tests set the ones they test, so these pass however pytest was started
(`pytest ... &` from a script inherits SIGINT ignored).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from signal_defaults import default_signals

UNIT = Path(__file__).resolve().parent.parent / "deploy" / "operant-train@.service"
SMALL = [
    "--set",
    "env.num_envs=8",
    "--set",
    "ppo.num_steps=32",
    "--set",
    "ppo.num_minibatches=2",
    "--set",
    "ppo.update_epochs=2",
]


def unit_seconds(key: str) -> float:
    """A time setting of the trainer unit (`5min`, `30s`) in seconds."""
    (text,) = re.findall(rf"^{key}=(\S+)$", UNIT.read_text(), re.MULTILINE)
    number, unit = re.fullmatch(r"(\d+)(min|s)", text).groups()
    return int(number) * (60 if unit == "min" else 1)


def test_importing_installs_no_handler_and_starts_no_thread():
    code = (
        "import signal, threading\n"
        "import operant.trainer.run.main, operant.trainer.run.session\n"
        "import operant.trainer.run.signals, operant.trainer.checkpoint.store\n"
        "import operant.trainer.checkpoint.resume, operant.monitor.exporter\n"
        "assert all(signal.getsignal(s) is signal.SIG_DFL for s in "
        "(signal.SIGTERM, signal.SIGUSR1))\n"
        "assert signal.getsignal(signal.SIGINT) is signal.default_int_handler\n"
        "assert threading.active_count() == 1\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=default_signals,
    )
    assert result.returncode == 0, result.stderr


@pytest.fixture
def sigint_as(request):
    """SIGINT's disposition in this process set to the test's parameter, then put back."""
    previous = signal.signal(signal.SIGINT, request.param)
    yield request.param
    signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("sigint_as", [signal.default_int_handler], indirect=True)
def test_stop_signals_set_flags_and_a_second_sigint_interrupts(sigint_as):
    from operant.trainer.run.signals import StopSignals

    stop = StopSignals()
    assert stop.install()
    try:
        os.kill(os.getpid(), signal.SIGUSR1)
        assert stop.take_checkpoint_request() and not stop.take_checkpoint_request()
        assert not stop.stop_requested
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.stop_requested and stop.name == "SIGTERM"
        os.kill(os.getpid(), signal.SIGTERM)  # a repeated SIGTERM changes nothing
        assert stop.name == "SIGTERM"
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)  # the handler runs at the next bytecode boundary
    finally:
        stop.restore()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_sigint_forwarded_with_the_keypress_is_the_same_ctrl_c():
    # `timeout --foreground` (and task runners) forward the terminal's SIGINT: two arrive
    # microseconds apart, and the second turned the clean stop into exit 130
    from operant.trainer.run.signals import SAME_KEYPRESS_S, StopSignals

    stop = StopSignals()
    stop.announce = False
    assert stop.install()
    # to this thread: a process-directed signal may wait for another thread (pytest-xdist's)
    # to be scheduled before anything handles it, longer than a loaded machine's 10 ms
    main = threading.get_ident()
    try:
        signal.pthread_kill(main, signal.SIGINT)
        signal.pthread_kill(main, signal.SIGINT)
        deadline = time.monotonic() + 5.0  # both handled (later on a loaded machine)
        while stop.name != "SIGINT" and time.monotonic() < deadline:
            time.sleep(0.001)
        assert stop.name == "SIGINT"
        time.sleep(SAME_KEYPRESS_S)
        with pytest.raises(KeyboardInterrupt):  # a person's second Ctrl-C, later
            signal.pthread_kill(main, signal.SIGINT)
            time.sleep(1)
    finally:
        stop.restore()


@pytest.mark.parametrize("sigint_as", [signal.SIG_IGN], indirect=True)
def test_a_sigint_ignored_on_entry_stays_ignored(sigint_as):
    from operant.trainer.run.signals import StopSignals

    stop = StopSignals()
    assert stop.install()
    try:
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.1)
        assert not stop.stop_requested
        os.kill(os.getpid(), signal.SIGTERM)  # the service manager's stop still works
        assert stop.stop_requested and stop.name == "SIGTERM"
    finally:
        stop.restore()
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_second_sigint_exits_at_once_without_a_new_checkpoint(tmp_path, trainer_server):
    # Updates of about two seconds, so both signals land inside one update (the torch update:
    # the native one made these updates a tenth of that, and the second signal then often
    # landed in the stop's own checkpoint and teardown instead; with 8 epochs, a second on a
    # machine loaded by other work, it did once in a while).
    slow = [
        "--set",
        "env.num_envs=64",
        "--set",
        "ppo.num_steps=1024",
        "--set",
        "ppo.update_epochs=16",
        "--set",
        "ppo.update_impl=torch",
        "--set",
        "checkpoint.every_updates=1",
    ]
    server = trainer_server
    pid = server.start(
        [
            "--runs-dir",
            tmp_path,
            "--run-id",
            "impatient",
            *slow,
            "--total-steps",
            64 * 1024 * 100,
            "--quiet",
        ],
        tmp_path / "log",
    )
    checkpoint = tmp_path / "impatient" / "checkpoints" / "latest"
    deadline = time.monotonic() + 60
    while not checkpoint.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    kept = checkpoint.read_text()
    os.kill(pid, signal.SIGINT)
    # The second Ctrl-C only after the first was taken (two signals that arrive before Python
    # runs its handler count as one): the trainer says it at once.
    while "SIGINT: stopping at the next update boundary" not in server.stderr.read_text():
        assert time.monotonic() < deadline, server.stderr.read_text()
        time.sleep(0.005)
    time.sleep(0.35)  # past SAME_KEYPRESS_S: a second keypress, not the first forwarded
    os.kill(pid, signal.SIGINT)
    assert server.wait() == 130
    assert checkpoint.read_text() == kept
    assert "operant-train: interrupted; the last checkpoint is " in server.stderr.read_text()
    from operant.shared.reader import MetricsReader

    with MetricsReader(tmp_path / "impatient" / "metrics.bin") as reader:
        snapshot = reader.snapshot()
    assert (snapshot.state, snapshot.interrupted) == ("finished", True)
    assert "second SIGINT" in snapshot.reason


class Receiver:
    """A datagram socket standing in for systemd's notify socket, with arrival times."""

    def __init__(self) -> None:
        self.name = f"operant-test-{os.getpid()}-{time.monotonic_ns()}"
        self.socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.socket.bind("\0" + self.name)
        self.socket.settimeout(0.05)
        self.messages: list[tuple[float, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._receive, daemon=True)
        self._thread.start()

    def _receive(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.socket.recv(4096)
            except TimeoutError:
                continue
            self.messages.append((time.monotonic(), data.decode()))

    def count(self, prefix: str) -> int:
        return sum(1 for _, text in list(self.messages) if text.startswith(prefix))

    def close(self) -> None:
        """Stop receiving, after taking every datagram already queued (the trainer's last
        messages may still be in the socket's buffer when it exits)."""
        self._stop.set()
        self._thread.join()
        self.socket.setblocking(False)
        while True:
            try:
                data = self.socket.recv(4096)
            except BlockingIOError:
                break
            self.messages.append((time.monotonic(), data.decode()))
        self.socket.close()


def test_real_trainer_notifies_systemd_and_stops_on_sigterm_with_a_checkpoint(tmp_path):
    timeout_stop_s = unit_seconds("TimeoutStopSec")
    receiver = Receiver()
    env = dict(os.environ, NOTIFY_SOCKET="@" + receiver.name, WATCHDOG_USEC="400000")
    env.pop("WATCHDOG_PID", None)
    # stdout to a file, not a pipe: nobody reads a pipe until the end, and a full one (64 KiB
    # of JSON lines, well under a second of updates) would block the trainer mid-run.
    stdout_path = tmp_path / "stdout.jsonl"
    stdout_file = stdout_path.open("w")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "operant.trainer.run.main",
            "--runs-dir",
            str(tmp_path),
            "--run-id",
            "service",
            *SMALL,
            "--total-steps",
            str(256 * 100_000),
            "--log-format",
            "json",
            "--set",
            "checkpoint.every_seconds=0.5",
        ],
        stdout=stdout_file,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=default_signals,
    )
    try:
        deadline = time.monotonic() + 120
        # STATUS= goes out at most once a second (SystemdNotifier.status_interval_s).
        while (
            receiver.count("WATCHDOG=1") < 4 or receiver.count("STATUS=") < 1
        ) and time.monotonic() < deadline:
            assert process.poll() is None, process.stderr.read()
            time.sleep(0.01)
        signalled = time.monotonic()
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=timeout_stop_s)
        stop_seconds = time.monotonic() - signalled
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        receiver.close()
        stdout_file.close()
    out = stdout_path.read_text()
    assert process.returncode == 0, err
    assert stop_seconds < min(timeout_stop_s, 30.0)
    print(
        f"SIGTERM to exit of a real trainer process: {stop_seconds:.2f} s "
        f"(TimeoutStopSec={timeout_stop_s:.0f} s)"
    )

    texts = [text for _, text in receiver.messages]
    times = [t for t, _ in receiver.messages]
    assert re.fullmatch(
        r"READY=1\nSTATUS=training: update 1/100000, step 256, [\d,]+ steps/s, "
        r"return \S+",
        texts[0],
    ), texts[0]
    stopping = [i for i, text in enumerate(texts) if text.startswith("STOPPING=1")]
    assert len(stopping) == 1
    records = [json.loads(line) for line in out.splitlines() if line.startswith('{"update"')]
    summary = json.loads(out.splitlines()[-1])["summary"]
    last = records[-1]
    assert texts[stopping[0]] == (
        f"STOPPING=1\nSTATUS=SIGTERM: checkpointing at step {last['global_step']:,}"
    )
    assert texts[stopping[0] + 1].startswith("EXTEND_TIMEOUT_USEC=")
    between = texts[1 : stopping[0]]
    statuses = [text for text in between if text.startswith("STATUS=")]
    assert statuses and all(
        re.fullmatch(
            r"STATUS=training: update \d+/100000, step [\d,]+, "
            r"[\d,]+ steps/s, return \S+",
            text,
        )
        for text in statuses
    )
    pings = [t for t, text in zip(times, texts) if text == "WATCHDOG=1"]
    assert len(pings) >= 4 and all(times[0] < t < times[stopping[0]] for t in pings)
    # Half of WATCHDOG_USEC apart (0.2 s), never faster; none after STOPPING=1.
    assert min(b - a for a, b in zip(pings, pings[1:])) > 0.15
    assert not any(text == "WATCHDOG=1" for text in texts[stopping[0] :])

    assert summary["stopped_by"] == "SIGTERM" and summary["global_step"] == last["global_step"]
    checkpoints = tmp_path / "service" / "checkpoints"
    assert (checkpoints / "latest").read_text() == f"ckpt-{last['update']:09d}.pt\n"
    # Periodic checkpoints by wall clock (every 0.5 s) came before the one at the stop.
    assert len([p for p in checkpoints.iterdir() if p.suffix == ".pt"]) >= 2


def ignore_sigint() -> None:
    """In the child: SIGINT ignored, as a script's `command &` starts it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_a_trainer_started_with_sigint_ignored_trains_through_sigint(tmp_path):
    """`operant-train ... &` in a script: the terminal's Ctrl-C is not for the trainer, which
    keeps training; SIGTERM still stops it with a checkpoint."""
    progress = tmp_path / "background" / "progress.jsonl"

    def updates() -> int:
        return len(progress.read_text().splitlines()) if progress.exists() else 0

    stdout_path = tmp_path / "stdout.jsonl"
    with stdout_path.open("w") as stdout_file:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "operant.trainer.run.main",
                "--runs-dir",
                str(tmp_path),
                "--run-id",
                "background",
                *SMALL,
                "--total-steps",
                str(256 * 100_000),
                "--log-format",
                "json",
            ],
            stdout=stdout_file,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=ignore_sigint,
        )
        try:
            deadline = time.monotonic() + 120
            while updates() < 3 and time.monotonic() < deadline:
                assert process.poll() is None, process.stderr.read()
                time.sleep(0.05)
            process.send_signal(signal.SIGINT)
            process.send_signal(signal.SIGINT)  # twice: not even the impatient exit
            before = updates()
            while updates() < before + 3 and time.monotonic() < deadline:
                assert process.poll() is None, process.stderr.read()
                time.sleep(0.05)
            assert process.poll() is None and updates() >= before + 3
            process.send_signal(signal.SIGTERM)
            _, err = process.communicate(timeout=unit_seconds("TimeoutStopSec"))
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert process.returncode == 0, err
    summary = json.loads(stdout_path.read_text().splitlines()[-1])["summary"]
    assert summary["stopped_by"] == "SIGTERM"
    assert (tmp_path / "background" / "checkpoints" / "latest").exists()


def test_a_second_ctrl_c_outside_the_session_still_names_the_checkpoint_and_run(tmp_path):
    """A second SIGINT that lands while the stop writes its checkpoint or tears down reaches
    operant-train's last-resort handler, not the session's: its line names the run's last
    checkpoint and directory all the same (it was a bare "interrupted" before)."""
    from types import SimpleNamespace

    import torch  # noqa: F401  (loaded, as in any run that got as far as a checkpoint)

    from operant.trainer.run.main import _interrupted_line

    run_dir = tmp_path / "runs" / "r1"
    checkpoints = run_dir / "checkpoints"
    checkpoints.mkdir(parents=True)
    for update in (3, 7):
        (checkpoints / f"ckpt-{update:09d}.pt").write_bytes(b"")
    (checkpoints / "latest").write_text("ckpt-000000007.pt")
    fresh = SimpleNamespace(run_dir=None, root=tmp_path / "runs", run_id="r1")
    line = _interrupted_line(fresh)
    assert line == (
        f"operant-train: interrupted; the last checkpoint is {checkpoints / 'ckpt-000000007.pt'}; "
        f"run directory {run_dir}"
    )
    assert _interrupted_line(None) == "operant-train: interrupted"
    gone = SimpleNamespace(run_dir=None, root=tmp_path / "runs", run_id="never-created")
    assert _interrupted_line(gone) == "operant-train: interrupted"
    (checkpoints / "latest").unlink()
    (checkpoints / "ckpt-000000003.pt").unlink()
    (checkpoints / "ckpt-000000007.pt").unlink()
    # No checkpoint: said so (it read "the last checkpoint is none"), with the command that
    # starts the run again (--resume r1 is refused for a run with no checkpoint).
    assert _interrupted_line(fresh) == (
        f"operant-train: interrupted; there is no checkpoint; run directory {run_dir}; start it "
        "again (with the config it started with): operant-train --resume auto --run-id r1 "
        f"--runs-dir {tmp_path / 'runs'}"
    )


def test_a_stop_before_any_checkpoint_says_there_is_none_and_how_to_start_again(tmp_path, capsys):
    """A stop (or a second Ctrl-C) before the first update has no checkpoint: it read
    "checkpoint none; continue with operant-train --resume r1", a command that is refused for
    a run with no checkpoint, and "the last checkpoint is none"."""
    from types import SimpleNamespace

    from operant.trainer.run.console import Console
    from operant.trainer.services.protocol import Outcome

    root = tmp_path / "runs"
    again = (
        "start it again (with the config it started with): operant-train --resume auto "
        f"--run-id r1 --runs-dir {root}"
    )
    console = Console(
        SimpleNamespace(log_format="plain", quiet=True),
        SimpleNamespace(run_id="r1", payload=None, restart=False),
        SimpleNamespace(global_step=0, update=0, solved_at=None),
        root / "r1",
        SimpleNamespace(last_path=None),
    )
    console.on_stop(Outcome(stopped_by="SIGINT"))
    console.close()
    assert capsys.readouterr().out == (
        f"stopped by SIGINT at step 0 (update 0); no checkpoint was written; {again}\n"
    )
    console.on_stop(Outcome(stopped_by="SIGINT", error=KeyboardInterrupt()))
    assert capsys.readouterr().err == (
        f"operant-train: interrupted; there is no checkpoint; run directory {root / 'r1'}; "
        f"{again}\n"
    )


def _trainer_on(tmp_path: Path, run_id: str, stdout: int, preexec=None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "operant.trainer.run.main", "--runs-dir", str(tmp_path),
         "--run-id", run_id, *SMALL, "--total-steps", str(256 * 100_000),
         "--set", "train.log_every=1"],
        stdout=stdout, stderr=stdout, preexec_fn=preexec,
    )  # fmt: skip


@contextlib.contextmanager
def _reaped(process: subprocess.Popen):
    """`process`, killed on the way out if a failed assertion left it running."""
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def _updates(run_dir: Path) -> int:
    progress = run_dir / "progress.jsonl"
    return len(progress.read_text().splitlines()) if progress.exists() else 0


def _wait_for(run_dir: Path, count: int, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + 120
    while _updates(run_dir) < count:
        assert process.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)


def test_a_closed_terminal_stops_the_trainer_with_a_checkpoint(tmp_path):
    # An ssh session dropped or a tmux pane killed: SIGHUP, and the terminal gone under the
    # trainer. SIGHUP's default ended it at once without a checkpoint; then, handled, the
    # next progress line's EIO ended the run as if progress.jsonl could not be written.
    import pty

    master, slave = pty.openpty()
    with _reaped(_trainer_on(tmp_path, "hup", slave)) as process:
        os.close(slave)
        _wait_for(tmp_path / "hup", 3, process)
        os.close(master)  # the terminal is gone: writes to it fail with EIO
        process.send_signal(signal.SIGHUP)
        assert process.wait(timeout=unit_seconds("TimeoutStopSec")) == 0
    from operant.shared.reader import MetricsReader

    with MetricsReader(tmp_path / "hup" / "metrics.bin") as reader:
        snapshot = reader.snapshot()
    assert (snapshot.state, snapshot.interrupted) == ("finished", True)
    assert (tmp_path / "hup" / "checkpoints" / "latest").exists()
    assert _updates(tmp_path / "hup") >= 3


def test_a_trainer_under_nohup_trains_through_sighup(tmp_path):
    def ignore_sighup() -> None:
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    with open(tmp_path / "out", "w") as out:
        process = _trainer_on(tmp_path, "nohup", out.fileno(), ignore_sighup)
    with _reaped(process):
        _wait_for(tmp_path / "nohup", 3, process)
        process.send_signal(signal.SIGHUP)
        before = _updates(tmp_path / "nohup")
        _wait_for(tmp_path / "nohup", before + 3, process)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=unit_seconds("TimeoutStopSec")) == 0
    assert "SIGHUP" not in (tmp_path / "out").read_text()


def test_a_checkpoint_request_before_the_first_update_waits_for_it(capsys):
    # (SIGUSR1 in the first second was taken at update 0, which has no checkpoint, and
    # dropped without a word)
    from types import SimpleNamespace

    from operant.trainer.config import load_config
    from operant.trainer.run.signals import StopSignals
    from operant.trainer.services.hooks import Checkpoints

    signals = StopSignals()
    signals.checkpoint_requested = True
    trainer = SimpleNamespace(update=0, global_step=0, config=load_config(None, []))
    never_due = SimpleNamespace(due=lambda update: False)
    checkpoints = Checkpoints(trainer, never_due, signals, progress=None)
    written: list[int] = []
    checkpoints.checkpoint = lambda: written.append(trainer.update) or Path(f"c{trainer.update}")
    checkpoints.on_boundary()
    assert written == [] and signals.checkpoint_requested
    trainer.update, trainer.global_step = 1, 2048
    checkpoints.on_boundary()
    assert written == [1] and not signals.checkpoint_requested
    assert (
        capsys.readouterr().err == "operant-train: SIGUSR1: checkpoint c1 (update 1, step 2,048)\n"
    )

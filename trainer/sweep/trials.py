"""A trial's run as a process of its own: started from a fork server, followed through its
progress.jsonl, stopped with SIGTERM.

Each run is operant-train's own `main(argv)` in a fresh process (its own pid, signal
handlers, run lock, metrics file and exit status), forked from a multiprocessing fork server
that imported torch and the trainer once (`PRELOAD`): a plain `operant-train` process spends
about 2 s importing before it trains, longer than a tuned CartPole run trains (docs/sweeps.md).
Nothing here imports torch: the sweep's own process stays light, and the fork server is the
only one that imports it before a trial starts.

A trial's process gets SIGTERM when the fork server ends (Linux's parent-death signal): a
sweep killed outright (SIGKILL) still leaves its runs stopped with a checkpoint, which the
next `operant sweep` of the same file resumes.

Stop signals are the sweep's own to take: the fork server and the trials ignore SIGTERM,
SIGHUP and SIGINT sent to them with the sweep (a signal to its process group: Ctrl-C, a
terminal's hangup, `kill -TERM -PGID`; or to its cgroup: systemd's KillMode=control-group),
and the sweep stops each trial with SIGTERM (`RunProcess.stop`). The fork server once died
of such a SIGTERM, and every running trial's exit status then read 255 (the server reports
its children's): they were recorded failed, not interrupted, and no resume re-ran them. A
process group of their own would not have done: systemd signals every process of the
service's cgroup, whatever its group. So the fork server starts with the three blocked (no
moment where their default kills it, as multiprocessing's resource tracker starts) and ignores
them (`ignore_stops`, from `preload`); a trial inherits the ignoring, and takes back SIGTERM's
default first thing (`_run_trainer`), until operant-train's handler replaces it.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

from operant.shared.record import UpdateRecord, decode_progress_line

PRELOAD = "operant.trainer.sweep.preload"
_PR_SET_PDEATHSIG = 1
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
RESEND_S = 0.5
"""A stopping run gets SIGTERM again this often until it ends (the trainer takes repeats as
one): a SIGTERM that reaches a trial between its fork and its first line is ignored, as the
fork server's disposition still is there."""
_context: Any = None


def _forkserver() -> Any:
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload([PRELOAD])
    return _context


def warm_up() -> None:
    """Start the fork server now (it imports torch: seconds), while the sweep gets ready."""
    _forkserver()
    _ensure_server()


def _ensure_server() -> None:
    """Start the fork server if it is not running (multiprocessing starts it again, should
    it have died), with the stop signals blocked, so that it inherits them blocked until
    `ignore_stops` runs there; here they are delivered when unblocked."""
    from multiprocessing import forkserver

    with _stops_held():
        forkserver.ensure_running()


@contextlib.contextmanager
def _stops_held() -> Iterator[None]:
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def ignore_stops() -> None:
    """In the fork server (`preload`): SIGTERM, SIGHUP and SIGINT ignored, then unblocked.
    It ends when the sweep's process does (its "alive" pipe closes), never on a stop signal
    meant for the sweep; its trials inherit the ignoring."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def _run_trainer(argv: list[str], log_path: str) -> None:
    """The trial's process: operant-train's main with `argv`, its output to `log_path`."""
    code = 1
    # SIGTERM as any operant-train process starts with it (its handler goes in first thing
    # in main(): before, SIGTERM ends the process, nothing trained yet, and the sweep that
    # sent it records the trial interrupted). SIGINT and SIGHUP stay ignored: they reach a
    # trial only with its sweep, which stops it with SIGTERM (module docstring).
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        # Forked children hold the fork server's "alive" pipe (for forking grandchildren),
        # which would keep the server, and so this process, alive after the sweep dies.
        from multiprocessing import forkserver

        alive = forkserver._forkserver._forkserver_alive_fd  # type: ignore[attr-defined]
        if alive is not None:
            os.close(alive)
            forkserver._forkserver._forkserver_alive_fd = None  # type: ignore[attr-defined]
        if os.getppid() == 1:  # the fork server ended before the signal was asked for
            os._exit(1)
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        for stream in (1, 2):
            os.dup2(fd, stream)
        os.close(fd)
        from operant.trainer.run.main import main

        sys.argv = ["operant-train", *argv]  # what run.json records as the run's command
        code = main(argv)
    except SystemExit as error:  # argparse's usage errors
        code = error.code if isinstance(error.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        # The run's outcome is written: a SIGTERM now (the sweep's repeat) must not turn its
        # exit status into a signal's.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


class RunProcess:
    """One run of a trial: its process and what it has written to progress.jsonl so far."""

    def __init__(self, argv: list[str], run_dir: Path, log_path: Path):
        self.run_dir, self.log_path = run_dir, log_path
        self.process = _forkserver().Process(
            target=_run_trainer, args=(argv, str(log_path)), daemon=False
        )
        self.records: list[UpdateRecord] = []
        self._offset, self._partial = 0, b""
        self.stop_sent = False
        self._sent_at = 0.0
        _ensure_server()
        self.process.start()

    def poll(self) -> list[UpdateRecord]:
        """The records written since the last poll (whole lines only)."""
        try:
            with open(self.run_dir / "progress.jsonl", "rb") as handle:
                handle.seek(self._offset)
                data = handle.read()
        except FileNotFoundError:
            return []
        self._offset += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        new = []
        for line in lines:
            with contextlib.suppress(msgspec.DecodeError):
                new.append(decode_progress_line(line))
        self.records += new
        return new

    def stop(self) -> None:
        """Ask the run to stop at its next update boundary, with a checkpoint (SIGTERM);
        called again, send it again once RESEND_S have passed, until the run ends."""
        now = time.monotonic()
        if self.process.exitcode is None and (
            not self.stop_sent or now - self._sent_at >= RESEND_S
        ):
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, signal.SIGTERM)
            self.stop_sent, self._sent_at = True, now

    @property
    def exitcode(self) -> int | None:
        return self.process.exitcode

    def last_words(self) -> str:
        """Why the run failed: its last line that says so ('operant-train: ... failed'),
        else its last line, or ''."""
        try:
            lines = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        said = [line for line in lines if "failed" in line or line.startswith("operant-train:")]
        return (said or lines or [""])[-1].strip()


def wait_until_free(run_dir: Path, timeout_s: float = 60.0) -> bool:
    """Wait while another process trains `run_dir` (holds its lock:
    operant.trainer.checkpoint.resume):
    a run of a sweep killed a moment ago is still writing its checkpoint. True once free."""
    import errno
    import fcntl
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return True  # no directory yet: nobody trains it
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except OSError as error:
            if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
        finally:
            os.close(fd)
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def read_records(run_dir: Path) -> list[UpdateRecord]:
    """A run's whole progress.jsonl (a resumed run's as the resume cut and continued it)."""
    try:
        data = (run_dir / "progress.jsonl").read_bytes()
    except FileNotFoundError:
        return []
    records = []
    for line in data.split(b"\n"):
        with contextlib.suppress(msgspec.DecodeError):
            if line.strip():
                records.append(decode_progress_line(line))
    return records

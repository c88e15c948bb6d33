"""How the trainer answers signals: a clean stop at the next update boundary, never mid-update.

- SIGTERM (systemd's stop, `kill`) and SIGINT (Ctrl-C) set a flag and say so in one line on
  stderr (the process may take an update to stop: the line tells the person or the journal
  the signal was taken). The training loop looks at it between updates; the trainer then writes a
  checkpoint, marks its metrics file finished and interrupted, tells systemd STOPPING=1, and exits
  0.
- A second SIGINT (Ctrl-C again, impatiently) raises KeyboardInterrupt where the main thread
  is: the trainer exits at once with status 130, without a new checkpoint (the previous
  ones stay whole: they are written whole or not at all). One that arrives within
  SAME_KEYPRESS_S of the first is the same Ctrl-C: a wrapper that forwards SIGINT (GNU
  `timeout --foreground`, task runners) delivers the terminal's keypress twice, microseconds
  apart, and that turned every clean stop under it into exit 130 without a checkpoint.
- SIGHUP (the terminal closed: an ssh session dropped, a tmux pane killed) stops the same way:
  its default ended the process at once, without a checkpoint (up to checkpoint.every_seconds
  of training lost). Under `nohup` (SIGHUP ignored) it stays ignored.
- SIGUSR1 asks for a checkpoint at the next update boundary, and training goes on
  (`systemctl kill -s USR1 operant-train@NAME`).
- A SIGINT that the trainer was started with ignored stays ignored. A shell without job
  control (a script's `operant-train ... &`) ignores SIGINT in the commands it starts in the
  background so that the terminal's Ctrl-C, which reaches the script's whole process group,
  stops the script and not them; Python itself keeps such a SIGINT ignored, and so does the
  trainer. SIGTERM and SIGUSR1 are always handled: they are the service manager's and the
  operator's own requests, never a keystroke meant for someone else.

Nothing is installed at import: `install()` is called by operant-train's main() and
`restore()` puts the previous handlers back.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
SAME_KEYPRESS_S = 0.25
"""A SIGINT this soon after the first is the same keypress, forwarded (a person's second
Ctrl-C comes later)."""
CHECKPOINT_SIGNAL = signal.SIGUSR1
KEPT_IGNORED = (signal.SIGINT, signal.SIGHUP)
"""Stop signals the trainer leaves ignored when it was started with them ignored: SIGINT by
a shell without job control for a background command, SIGHUP by `nohup`."""


class StopSignals:
    """The flags the handlers set; read by the training loop at update boundaries."""

    def __init__(self) -> None:
        self.received: int | None = None
        """The first stop signal received, or None."""
        self.received_at = 0.0
        """When it arrived (time.monotonic)."""
        self.checkpoint_requested = False
        self.settled = False
        """The run's outcome is written (checkpoint, summary): later signals change nothing,
        and a second Ctrl-C no longer turns a clean stop into exit 130."""
        self.announce = True
        """Say on stderr that a stop signal was taken (under torchrun only rank 0 does: a
        signal to the group reaches every rank, and one line says it)."""
        self.on_stop: list[Callable[[], None]] = []
        """Called in the handler of the first stop signal, after the flags are set (a step
        that hangs gets its deadline then: operant.envs.reference.step_deadline)."""
        self.line_start = b""
        """Written before the announcement: erases a status line shown on stderr's terminal
        (operant.trainer.services.status_line), which the line would otherwise follow."""
        self._previous: dict[int, Any] = {}

    def install(self) -> bool:
        """Install the handlers (main thread only, where Python delivers signals). True if
        they were installed."""
        if threading.current_thread() is not threading.main_thread():
            return False
        for signum in (*STOP_SIGNALS, CHECKPOINT_SIGNAL):
            if signum in KEPT_IGNORED and signal.getsignal(signum) is signal.SIG_IGN:
                continue
            self._previous[signum] = signal.signal(signum, self._handle)
        return True

    def restore(self, keep: tuple[int, ...] = ()) -> None:
        """The handlers from before `install`, but for the signals in `keep`, which stay
        this object's until their caller replaces them."""
        for signum, previous in self._previous.items():
            if signum not in keep:
                signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if signum == CHECKPOINT_SIGNAL:
            self.checkpoint_requested = True
            return
        if self.settled:
            return
        if self.received is not None:
            forwarded = (
                self.received == signal.SIGINT
                and time.monotonic() - self.received_at < SAME_KEYPRESS_S
            )
            if signum == signal.SIGINT and not forwarded:
                raise KeyboardInterrupt
            return
        self.received, self.received_at = signum, time.monotonic()
        for hook in self.on_stop:
            hook()
        # Said at once, so whoever pressed Ctrl-C (or an operator reading the journal) knows
        # the signal was taken; os.write, since print() may be mid-write on this thread.
        if not self.announce:
            return
        again = " (Ctrl-C again: quit at once, without it)" if signum == signal.SIGINT else ""
        try:
            os.write(
                2,
                self.line_start
                + f"operant-train: {signal.Signals(signum).name}: stopping at the next update "
                f"boundary, with a checkpoint{again}\n".encode(),
            )
        except OSError as error:  # SIGHUP: the terminal may be gone already
            from operant.trainer.run.terminal import detach_if_gone

            detach_if_gone(error)

    @property
    def stop_requested(self) -> bool:
        return self.received is not None

    @property
    def name(self) -> str:
        """The stop signal's name (SIGTERM, SIGINT), or '' if none arrived."""
        return signal.Signals(self.received).name if self.received is not None else ""

    def take_checkpoint_request(self) -> bool:
        """True once per SIGUSR1 (or burst of them)."""
        requested, self.checkpoint_requested = self.checkpoint_requested, False
        return requested

"""operant-train's live status line: on a terminal, one line redrawn in place (steps done of
the budget, steps/s, the mean return of the last 100 episodes, the time left), as tqdm, rich
and pip draw theirs, instead of a line per update: CartPole's default run made 244 lines in
0.8 s, which scrolled the run's first line and its warnings off the screen.

The line is drawn with a carriage return and erase-to-end-of-line (`ESC [ K`), at most
`MAX_REDRAWS_PER_S` times a second, cut to the terminal's width as it is at each redraw (a
line longer than the terminal wraps, and `\\r` then redraws only its last row). Anything else
printed while it shows (a warning, a checkpoint's line, a traceback) goes through
`GuardedStream`, which erases the line first and draws it again below once the text has
ended its line, as `tqdm.write` does. `finish` leaves the last state on screen and ends the
line, so the verdict and the shell's prompt start on lines of their own.

Which output a run gets (this line, a line a second, a line per update, JSON) is decided in
operant.trainer.services.progress."""

from __future__ import annotations

import math
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO

from operant.shared.record import UpdateRecord

MAX_REDRAWS_PER_S = 10
ERASE_LINE = "\r\x1b[K"
"""Back to the line's start, then erase to its end (VT100; every terminal but a dumb one)."""


def duration(seconds: float) -> str:
    """'0:07', '12:34', '1:02:03': a time left, as tqdm writes it; '-' when unknown."""
    if not math.isfinite(seconds) or seconds < 0:
        return "-"
    minutes, secs = divmod(int(seconds + 0.5), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def status_fields(record: UpdateRecord, total_steps: int) -> list[str]:
    """The status line's fields, most wanted first: a narrow terminal drops the last ones."""
    step = record.global_step
    percent = f" ({100 * step // total_steps}%)" if total_steps > 0 else ""
    rate = record.sps_mean
    left = (total_steps - step) / rate if rate > 0 and total_steps >= step else math.nan
    mean = record.episode_return_mean
    fields = [
        f"step {step:,}/{total_steps:,}{percent}",
        f"return {'-' if mean is None or not math.isfinite(mean) else format(mean, '.1f')}",
        f"ETA {duration(left)}",
        f"{rate:,.0f} steps/s",
    ]
    return fields


def fit(fields: list[str], width: int) -> str:
    """The fields, two spaces apart, that fit in `width` columns: the last fields are dropped
    before the first is cut."""
    kept = list(fields)
    while len(kept) > 1 and len("  ".join(kept)) > width:
        kept.pop()
    return "  ".join(kept)[: max(width, 0)]


def columns(stream: TextIO) -> int:
    """The width of the terminal `stream` writes to, read now (it may have been resized):
    the descriptor's own size, else $COLUMNS or 80 (shutil's fallback)."""
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError, AttributeError):
        return shutil.get_terminal_size().columns


class StatusLine:
    """One line on a terminal, redrawn in place with each update's record (see the module
    docstring). `lock` is held by every write that touches the terminal: GuardedStream's
    writes may come from other threads (an env worker's watch) and from a signal handler on
    this one (hence reentrant)."""

    def __init__(
        self,
        stream: TextIO,
        total_steps: int,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.stream, self.total_steps, self.clock = stream, total_steps, clock
        self.lock = threading.RLock()
        self.text_fields: list[str] = []
        self.shown = False
        self._drawn_at = -math.inf

    def update(self, record: UpdateRecord) -> None:
        """The line for `record`; drawn now unless the last redraw is too recent."""
        self.text_fields = status_fields(record, self.total_steps)
        now = self.clock()
        if now - self._drawn_at >= 1 / MAX_REDRAWS_PER_S:
            self._drawn_at = now
            self.draw()

    def draw(self) -> None:
        """Draw the current line over the cursor's line (nothing before the first record).
        One column is left free: a line that fills the last column wraps on some terminals."""
        if not self.text_fields:
            return
        with self.lock:
            text = fit(self.text_fields, columns(self.stream) - 1)
            self.stream.write(ERASE_LINE + text)
            self.stream.flush()
            self.shown = True

    def hide(self) -> None:
        """Erase the line, leaving the cursor at the start of its row (for other text)."""
        with self.lock:
            if self.shown:
                self.stream.write(ERASE_LINE)
                self.stream.flush()
                self.shown = False

    def finish(self) -> None:
        """Draw the last state and end the line: what comes next starts below it."""
        with self.lock:
            if self.text_fields:
                self.draw()
                self.stream.write("\n")
                self.stream.flush()
            self.text_fields, self.shown = [], False


class GuardedStream:
    """sys.stdout or sys.stderr while a StatusLine shows on the same terminal: a write erases
    the line first, and once the text ends its line, draws the line again below it."""

    def __init__(self, inner: Any, line: StatusLine):
        self.inner, self.line = inner, line
        self.at_line_start = True

    def write(self, text: str) -> int:
        if not text:
            return 0
        with self.line.lock:
            if self.at_line_start:
                self.line.hide()
            written = self.inner.write(text)
            self.inner.flush()  # before the line is drawn on the other stream
            self.at_line_start = text.endswith("\n")
            if self.at_line_start:
                self.line.draw()
        return written

    def __getattr__(self, name: str) -> Any:  # flush, fileno, encoding, isatty, ...
        return getattr(self.inner, name)


class LiveDisplay:
    """A StatusLine on `out`'s terminal, with sys.stdout (where it is `out`) and sys.stderr
    (where it is a terminal too) guarded while it shows; `close` ends the line and gives
    both back."""

    def __init__(self, out: TextIO, total_steps: int, clock: Callable[[], float] = time.monotonic):
        self.stdout, self.stderr = sys.stdout, sys.stderr
        self.line = StatusLine(out, total_steps, clock)
        if self.stdout is out:
            sys.stdout = GuardedStream(self.stdout, self.line)
        if is_terminal(self.stderr):
            sys.stderr = GuardedStream(self.stderr, self.line)

    def erase_prefix(self) -> bytes:
        """What a raw write to stderr (a signal handler's os.write) starts with so that it
        does not land after the line's text: the erase, where stderr is the terminal."""
        return ERASE_LINE.encode() if isinstance(sys.stderr, GuardedStream) else b""

    def update(self, record: UpdateRecord) -> None:
        self.line.update(record)

    def close(self) -> None:
        """End the line and give sys.stdout and sys.stderr back (idempotent)."""
        if isinstance(sys.stdout, GuardedStream) and sys.stdout.line is self.line:
            sys.stdout = self.stdout
        if isinstance(sys.stderr, GuardedStream) and sys.stderr.line is self.line:
            sys.stderr = self.stderr
        self.line.finish()


def is_terminal(stream: Any) -> bool:
    """Whether `stream` writes to a terminal (False for one without a descriptor)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False

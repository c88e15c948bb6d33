"""The trainer's terminal going away under it: an ssh session that drops, a tmux pane or
window killed, `operant-train | head` whose reader exits. Writes to stdout and stderr then
fail (EIO from a hung-up terminal, EPIPE from a closed pipe), and the first one ended the run:
a SIGHUP's clean stop died on its next progress line, taken for progress.jsonl's write, with
no checkpoint. Once the terminal is gone both descriptors point at /dev/null (every later
write, the trainer's and its env workers', succeeds and goes nowhere) and training goes on to
its stop or end; progress.jsonl, the metrics file and the checkpoints keep the record.

Under systemd, stderr is the journal's stream: its warning and failure lines carry their syslog
priority (JournalStream), so that `journalctl -p warning` shows them."""

from __future__ import annotations

import errno
import os
import sys
from typing import Any

GONE = (errno.EIO, errno.EPIPE)


def detach_if_gone(error: OSError) -> bool:
    """True, with stdout and stderr moved to /dev/null, where `error` says the terminal or
    pipe they wrote to is gone; False (nothing changed) for any other error."""
    if error.errno not in GONE:
        return False
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        os.dup2(null, 2)
    finally:
        os.close(null)
    return True


# -- the journal ---------------------------------------------------------------------------------
JOURNAL_WARNING, JOURNAL_ERROR = "<4>", "<3>"
"""syslog priority prefixes, which journald reads off the start of a line of a service's
stream (SyslogLevelPrefix=, on by default) and strips."""


def line_priority(line: str) -> str:
    """The journal priority prefix of a stderr line: a warning's `<4>`, a failure's (the run
    failed, a traceback) `<3>`, none for the rest (journald's default, info)."""
    head = line.partition(": ")[2] if line.startswith("operant-train") else ""
    if head.startswith("warning:"):
        return JOURNAL_WARNING
    if head.startswith("training failed") or line.startswith("Traceback (most recent call"):
        return JOURNAL_ERROR
    return ""


class JournalStream:
    """sys.stderr where it is a service's journal stream: each line that starts a warning or a
    failure goes out with its priority, so `journalctl -p warning` finds it (journald filed
    every line of the stream at info)."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.at_line_start = True

    def write(self, text: str) -> int:
        pieces = []
        for piece in text.splitlines(keepends=True):
            if self.at_line_start:
                pieces.append(line_priority(piece))
            pieces.append(piece)
            self.at_line_start = piece.endswith("\n")
        self.inner.write("".join(pieces))
        return len(text)

    def __getattr__(self, name: str) -> Any:  # flush, fileno, encoding, isatty, ...
        return getattr(self.inner, name)


def to_journal(environ: dict[str, str] | None = None) -> bool:
    """Whether stderr (descriptor 2) is the journal stream systemd connected: JOURNAL_STREAM
    names its device and inode."""
    stream = (os.environ if environ is None else environ).get("JOURNAL_STREAM", "")
    try:
        status = os.fstat(2)
    except OSError:
        return False
    return stream == f"{status.st_dev}:{status.st_ino}"


def prioritize_journal() -> None:
    """Under systemd with stderr in the journal, sys.stderr becomes a JournalStream."""
    if to_journal() and not isinstance(sys.stderr, JournalStream):
        sys.stderr = JournalStream(sys.stderr)

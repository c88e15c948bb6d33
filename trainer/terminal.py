"""The trainer's terminal going away under it: an ssh session that drops, a tmux pane or
window killed, `operant-train | head` whose reader exits. Writes to stdout and stderr then
fail (EIO from a hung-up terminal, EPIPE from a closed pipe), and the first one ended the run:
a SIGHUP's clean stop died on its next progress line, taken for progress.jsonl's write, with
no checkpoint. Once the terminal is gone both descriptors point at /dev/null (every later
write, the trainer's and its env workers', succeeds and goes nowhere) and training goes on to
its stop or end; progress.jsonl, the metrics file and the checkpoints keep the record."""

from __future__ import annotations

import errno
import os

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

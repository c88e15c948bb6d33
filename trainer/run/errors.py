"""How operant-train's errors are said and what they end with: an exception's first line and a
count with its noun (the wording of one-line messages), the exit statuses a shell, a supervisor
or systemd's Restart=on-failure sees (operant.trainer.run.main's docstring lists them), and
what a full (or failing) disk means to a trainer.

The full-disk policy (docs/deploy.md, "A full disk"):
- a periodic checkpoint, or best.pt, that cannot be written for lack of space (ENOSPC, EDQUOT)
  or an I/O error (EIO) is one warning line on stderr (the free space and the size needed)
  and the metrics file's `warning` text; training goes on and the next interval tries again;
  the earlier checkpoints are untouched (a checkpoint is written whole or not at all);
- what the run cannot end without (the run directory and metrics file at start, the final
  checkpoint, model.pt) ends the run with EXIT_NO_SPACE (below), which the systemd unit does
  not restart: restarting into the same full disk cannot succeed.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeGuard

# -- The wording of one-line messages -------------------------------------------------------------


def first_line(error: BaseException, limit: int | None = None) -> str:
    """`error`'s message, first line only (else its type's name), cut to `limit` characters."""
    text = str(error).strip()
    line = text.splitlines()[0] if text else type(error).__name__
    if limit is not None and len(line) > limit:
        return line[: limit - 3] + "..."
    return line


def load_error_line(error: BaseException) -> str:
    """One line for torch's `load_state_dict` refusal: its first detail ('size mismatch for
    critic.0.weight: copying a param with shape torch.Size([64, 4]) from checkpoint, ...',
    'Missing key(s) in state_dict: ...'), where its first line only says that there are
    errors; else `first_line`."""
    lines = [line.strip() for line in str(error).strip().splitlines()]
    if len(lines) > 1 and lines[0].startswith("Error(s) in loading state_dict"):
        return f"{lines[0].rstrip(':')}: {lines[1]}"
    return first_line(error)


def counted(count: int, noun: str) -> str:
    """`count` and its noun, singular for one: "1 update", "4,096 updates"."""
    return f"{count:,} {noun}" + ("" if count == 1 else "s")


# -- Exit statuses --------------------------------------------------------------------------------

EXIT_OK = 0
"""Finished (budget spent, or train.target_return reached), or stopped by SIGTERM/SIGINT at an
update boundary after writing a checkpoint."""
EXIT_FAILED = 1
"""Training failed: an error, or a non-finite loss or parameter."""
EXIT_USAGE = 2
"""Bad input: flags, config, env id, a run that cannot be resumed; nothing was started."""
EXIT_NO_SPACE = 75
"""The disk cannot take what the run cannot end (or start) without: the run directory or the
metrics file at start, the final checkpoint, model.pt (ENOSPC, EDQUOT, EIO). sysexits.h's
EX_TEMPFAIL: the condition is temporary and the same command works once space is freed
(`--resume` continues from the last checkpoint written), but restarting at once cannot, so the
systemd unit lists it in RestartPreventExitStatus= (the policy: this module's docstring)."""
EXIT_INTERRUPTED = 130
"""A second SIGINT: stopped at once, without a final checkpoint."""


# -- A full disk ----------------------------------------------------------------------------------

STORAGE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EIO)


def is_storage_error(error: BaseException | None) -> TypeGuard[OSError]:
    """Whether `error` says the disk cannot take what is written (full, over quota, failing)."""
    return isinstance(error, OSError) and error.errno in STORAGE_ERRNOS


def storage_error_in(error: BaseException) -> OSError | None:
    """The full disk's OSError behind `error`, or None. torch.save's zip writer turns a failed
    write into a RuntimeError of its own while the OSError unwinds: look down the chain."""
    seen: set[int] = set()
    link: BaseException | None = error
    while link is not None and id(link) not in seen:
        if is_storage_error(link):
            return link
        seen.add(id(link))
        link = link.__cause__ or link.__context__
    return None


@contextmanager
def storage_errors() -> Iterator[None]:
    """Raise a full disk as its OSError (see storage_error_in), whatever wrapped it."""
    try:
        yield
    except RuntimeError as error:
        cause = storage_error_in(error)
        if cause is None:
            raise
        raise cause from None


def free_bytes(directory: Path) -> int | None:
    """Bytes free for this user under `directory` (its nearest existing ancestor); None if
    the file system cannot say."""
    path = Path(directory)
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def size_text(size: int | None) -> str:
    if size is None:
        return "unknown"
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} bytes"


def describe_storage_error(
    error: OSError, directory: Path, needed: int | None = None, what: str = ""
) -> str:
    """`error` in one line: what the system said, the space free under `directory`, and the
    size needed when it is known (of `what`, when that is not the write that failed)."""
    reason = os.strerror(error.errno) if error.errno else str(error)
    if not needed:
        need = ""
    elif what:
        need = f"; {what} takes about {size_text(needed)}"
    else:
        need = f", about {size_text(needed)} needed"
    return f"{reason} ({size_text(free_bytes(directory))} free in {directory}{need})"

"""What a full (or failing) disk means to a trainer, and how it is said.

The policy (docs/deploy.md, "A full disk"):
- a periodic checkpoint, or best.pt, that cannot be written for lack of space (ENOSPC, EDQUOT)
  or an I/O error (EIO) is one warning line on stderr (the free space and the size needed)
  and the metrics file's `warning` text; training goes on and the next interval tries again;
  the earlier checkpoints are untouched (a checkpoint is written whole or not at all);
- what the run cannot end without (the run directory and metrics file at start, the final
  checkpoint, model.pt) ends the run with EXIT_NO_SPACE (operant.trainer.run.exit_codes), which
  the systemd unit does not restart: restarting into the same full disk cannot succeed.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

STORAGE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EIO)


def is_storage_error(error: BaseException) -> bool:
    """Whether `error` says the disk cannot take what is written (full, over quota, failing)."""
    return isinstance(error, OSError) and error.errno in STORAGE_ERRNOS


def storage_error_in(error: BaseException) -> OSError | None:
    """The full disk's OSError behind `error`, or None. torch.save's zip writer turns a failed
    write into a RuntimeError of its own while the OSError unwinds: look down the chain."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if is_storage_error(error):
            return error  # type: ignore[return-value]
        seen.add(id(error))
        error = error.__cause__ or error.__context__
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

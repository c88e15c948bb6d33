"""Files that appear whole or not at all: the one way Operant replaces a file.

Every writer of a file that a reader or a later process trusts (checkpoints and their
`latest` pointer, run.json, the metrics file, the runs root's `latest` link) goes through
`replacing`: the content is written to a temporary name in the same directory (same
filesystem, so the rename is atomic), flushed and fsynced, renamed onto the final name with
`os.replace`, and then the directory is fsynced so that the rename itself survives a power
loss. A failure at any point before the rename removes the temporary file and leaves the old
file, if any, as it was.

Temporary names are `.<name>.<pid>.tmp`: hidden, and distinct per process, so two writers
never share one; `final_name` tells a leftover of a writer that died from any other file.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

_TEMPORARY = re.compile(r"^\.(?P<name>.+)\.\d+\.tmp$")


def temporary_path(path: str | os.PathLike[str]) -> Path:
    """Where a writer of `path` builds its content before the rename (this process's name)."""
    path = Path(path)
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def final_name(name: str) -> str | None:
    """The file a temporary name was going to replace (`.x.123.tmp` -> `x`), or None when
    `name` is not a temporary name."""
    match = _TEMPORARY.match(name)
    return match.group("name") if match else None


def fsync_directory(directory: str | os.PathLike[str]) -> None:
    """Make the directory's entries (a rename, a new or deleted file) durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def replacing(
    path: str | os.PathLike[str], beat: Callable[[], None] = lambda: None, mode: int = 0o644
) -> Iterator[BinaryIO]:
    """A new file opened for reading and writing (binary) whose content replaces `path`
    when the block ends without an exception: flush, fsync, `os.replace`, fsync the
    directory. An exception removes the temporary file, leaves `path` untouched and
    propagates. `beat` is called between the slow steps (a watchdog's proof of progress);
    `mode` is the new file's permission bits (less the umask)."""
    path = Path(path)
    tmp = temporary_path(path)
    tmp.unlink(missing_ok=True)  # left by an earlier process that had our pid
    try:
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
        with os.fdopen(fd, "r+b") as handle:
            yield handle
            handle.flush()
            beat()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    beat()
    fsync_directory(path.parent)


class _BeatingWriter:
    """A file wrapper that reports progress on every write, for the watchdog."""

    def __init__(self, handle: BinaryIO, beat: Callable[[], None]):
        self.handle, self.beat = handle, beat

    def write(self, data: bytes) -> int:
        self.beat()
        return self.handle.write(data)

    def flush(self) -> None:
        self.handle.flush()


def write_with(
    path: str | os.PathLike[str],
    write: Callable[[Any], None],
    beat: Callable[[], None] = lambda: None,
) -> None:
    """Replace `path` with what `write(handle)` writes into a binary file-like handle (for
    serialisers that stream, such as `torch.save`); `beat` is called on every write."""
    with replacing(path, beat) as handle:
        write(_BeatingWriter(handle, beat))


def write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Replace `path` with `data`."""
    with replacing(path) as handle:
        handle.write(data)


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """Replace `path` with `text`, UTF-8."""
    write_bytes(path, text.encode("utf-8"))


def write_json(path: str | os.PathLike[str], data: Any) -> None:
    """Replace `path` with `data` as indented JSON and a final newline."""
    write_text(path, json.dumps(data, indent=2) + "\n")


def replace_symlink(path: str | os.PathLike[str], target: str) -> None:
    """Point the symbolic link `path` at `target`: a link made under the temporary name and
    renamed over the old one, so a reader sees the old target or the new one, never neither."""
    path = Path(path)
    tmp = temporary_path(path)
    tmp.unlink(missing_ok=True)
    os.symlink(target, tmp)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_directory(path.parent)

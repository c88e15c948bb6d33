"""The progress log: every update's record to progress.jsonl, and to stdout as the user asked.

`ProgressLog` writes each UpdateRecord as one progress.jsonl line
(operant.shared.record.encode_progress_line) and every `log_every`-th (and the one that solved
the env) to stdout, either as that same JSON line (`--log-format json`) or as `plain_line`.
On a resume, `progress_tail` reads back the newest records the resume keeps (`kept_length`),
for the metrics file's history, and, once the start can no longer fail, `cut_progress` drops
what the resumed run trains again (and a line a crash cut short).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, TextIO

import msgspec

from operant.shared.record import UpdateRecord, decode_progress_line, encode_progress_line
from operant.trainer.terminal import detach_if_gone


def number_or_dash(value: Any, spec: str) -> str:
    """`value` formatted with `spec`; '-' for None and non-finite numbers."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return format(value, spec)


def plain_line(record: UpdateRecord, total_updates: int) -> str:
    """One update in one line, for people watching a terminal."""
    return (
        f"update {record.updates}/{total_updates}  step {record.global_step:,}  "
        f"sps {record.sps:,.0f}  return {number_or_dash(record.episode_return_mean, '.1f')}  "
        f"episodes {record.episodes:,}  "
        f"pg {number_or_dash(record.policy_loss, '.4f')}  "
        f"vf {number_or_dash(record.value_loss, '.3f')}  "
        f"ent {number_or_dash(record.entropy, '.3f')}  "
        f"kl {number_or_dash(record.approx_kl, '.4f')}  "
        f"clip {number_or_dash(record.clip_fraction, '.3f')}  t {record.elapsed_s:.1f}s"
    )


class ProgressLog:
    """Every update to progress.jsonl; every `every`-th to `out`, plain or JSON (`fmt`).

    A line goes whole or not at all: one the disk refuses part of (full, or a file size
    limit) is cut off again before the error goes on, so readers of progress.jsonl (the
    monitor's backfill, jq, scripts) never meet a torn last line while the run is down."""

    def __init__(
        self, path: Path, out: TextIO, fmt: str, every: int, total_updates: int, quiet: bool
    ):
        self.file = open(path, "ab", buffering=0)  # noqa: SIM115 (open for the run; close())
        self._end = self.file.tell()  # the end of its last whole line
        self.out, self.fmt, self.every = out, fmt, every
        self.total, self.quiet = total_updates, quiet

    def __call__(self, record: UpdateRecord) -> None:
        line = encode_progress_line(record)
        self._append((line + "\n").encode())
        if self.quiet or (record.updates % self.every and not record.solved):
            return
        text = line if self.fmt == "json" else plain_line(record, self.total)
        try:
            print(text, file=self.out, flush=True)
        except OSError as error:  # the terminal is gone: train on, recorded in the file
            if not detach_if_gone(error):
                raise
            self.quiet = True

    def _append(self, data: bytes) -> None:
        try:
            written = 0
            while written < len(data):  # a raw write may take part of it
                written += self.file.write(data[written:]) or 0
        except OSError:
            try:
                os.ftruncate(self.file.fileno(), self._end)  # shrinking needs no space
            except OSError:
                pass  # a read-only filesystem: a resume cuts the line (cut_progress)
            raise
        self._end += len(data)

    def close(self) -> None:
        self.file.close()


# --- progress.jsonl on resume --------------------------------------------------------------


def kept_length(path: Path, length: int) -> int:
    """How much of `path` a resume that cuts it back to `length` bytes keeps (cut_progress):
    `length`, or less where the file is shorter (lost records): then its whole lines, a last
    line cut short (the file's end lost with the power) dropped."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return 0
    keep = min(size, length)
    if 0 < keep < length:
        with open(path, "rb") as handle:
            keep = _whole_lines(handle, keep)
    return keep


def cut_progress(path: Path, length: int) -> int:
    """Drop what `path` holds past `length` bytes (records of updates the resumed run redoes,
    or a line cut short by a crash), keeping kept_length(path, length); returns the bytes
    dropped."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return 0
    keep = kept_length(path, length)
    if keep == size:
        return 0
    with open(path, "r+b") as handle:
        handle.truncate(keep)
        handle.flush()
        os.fsync(handle.fileno())
    return size - keep


def _whole_lines(handle: Any, size: int) -> int:
    """The length of the file's first `size` bytes without a last line that has no newline."""
    end = size
    while end > 0:
        start = max(0, end - 4096)
        handle.seek(start)
        newline = handle.read(end - start).rfind(b"\n")
        if newline >= 0:
            return start + newline + 1
        end = start
    return 0


def progress_tail(path: Path, count: int, end: int | None = None) -> list[UpdateRecord]:
    """The last `count` records of a progress log, oldest first: the newest contiguous run of
    updates (a damaged line, or one that is not a record, ends it), read back from the file's
    end, or from byte `end` (what a resume keeps of it, before it is cut)."""
    try:
        handle = open(path, "rb")  # noqa: SIM115 (only open's FileNotFoundError is caught)
    except FileNotFoundError:
        return []
    with handle:
        handle.seek(0, os.SEEK_END)
        position = handle.tell() if end is None else min(end, handle.tell())
        chunks: list[bytes] = []
        newlines = 0
        while position > 0 and newlines <= count:
            size = min(1 << 16, position)
            position -= size
            handle.seek(position)
            chunk = handle.read(size)
            chunks.append(chunk)
            newlines += chunk.count(b"\n")
    lines = b"".join(reversed(chunks)).split(b"\n")
    if position > 0:
        lines = lines[1:]  # the first may be the end of an older line
    records: list[UpdateRecord] = []
    for line in reversed([line for line in lines if line.strip()][-count:]):
        try:
            record = decode_progress_line(line)
        except msgspec.DecodeError:
            break
        if records and record.updates != records[-1].updates - 1:
            break
        records.append(record)
    records.reverse()
    return records

"""The progress log: every update's record to progress.jsonl, and to stdout as the user asked.

`ProgressLog` writes each UpdateRecord as one progress.jsonl line
(operant.shared.record.encode_progress_line), and to stdout in one of four ways
(`console_mode`): `--log-format json`, every `log_every`-th record (and the one that solved the
env) as that same JSON line; `--log-format plain`, those records as `plain_line`; without
`--log-format`, on a terminal, one status line redrawn in place
(operant.trainer.services.status_line),
and anywhere else (a pipe, a file, the journal, a dumb terminal) a `plain_line` at most once a
second. A line per update was the default, and CartPole's first run printed 244 of them in
0.8 s: a person reads a line a second at most, and a script that parses lines asks for them.
On a resume, `progress_tail` reads back the newest records the resume keeps (`kept_length`),
for the metrics file's history, and, once the start can no longer fail, `cut_progress` drops
what the resumed run trains again (and a line a crash cut short).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TextIO

import msgspec

from operant.shared.record import UpdateRecord, decode_progress_line, encode_progress_line
from operant.trainer.run.terminal import detach_if_gone
from operant.trainer.services.status_line import LiveDisplay, is_terminal

SAMPLED_INTERVAL_S = 1.0
"""Without --log-format and without a terminal, a progress line at most this often."""
DUMB_TERMINALS = ("dumb", "unknown")
"""$TERM values of terminals that cannot erase a line (Emacs' shell buffer): a line a second."""


def console_mode(log_format: str | None, out: Any, environ: Mapping[str, str] | None = None) -> str:
    """How progress goes to `out`: 'plain' or 'json' where --log-format asks; without it,
    'live' (the status line) on a terminal that can redraw a line, else 'sampled'."""
    if log_format is not None:
        return log_format
    term = (os.environ if environ is None else environ).get("TERM", "")
    return "live" if is_terminal(out) and term not in DUMB_TERMINALS else "sampled"


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
    """Every update to progress.jsonl; to `out` as `fmt` (a console_mode) says: every
    `every`-th as a plain or JSON line, those a second apart at least as plain lines
    ('sampled'), or each in the status line ('live', on the terminal; `end_line` ends it).

    A line goes whole or not at all: one the disk refuses part of (full, or a file size
    limit) is cut off again before the error goes on, so readers of progress.jsonl (the
    monitor's backfill, jq, scripts) never meet a torn last line while the run is down."""

    def __init__(
        self,
        path: Path,
        out: TextIO,
        fmt: str,
        every: int,
        total_updates: int,
        quiet: bool,
        total_steps: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.file = open(path, "ab", buffering=0)  # noqa: SIM115 (open for the run; close())
        self._end = self.file.tell()  # the end of its last whole line
        self.out, self.fmt, self.every = out, fmt, every
        self.total, self.quiet, self.clock = total_updates, quiet, clock
        self._said_at = clock()  # no sampled line in the first second
        self.live = LiveDisplay(out, total_steps, clock) if fmt == "live" and not quiet else None

    def __call__(self, record: UpdateRecord) -> None:
        line = encode_progress_line(record)
        self._append((line + "\n").encode())
        if self.quiet:
            return
        try:
            if self.fmt == "live":
                if self.live is not None:  # until end_line
                    self.live.update(record)
            elif self._says(record):
                text = line if self.fmt == "json" else plain_line(record, self.total)
                print(text, file=self.out, flush=True)
        except OSError as error:  # the terminal is gone: train on, recorded in the file
            if not detach_if_gone(error):
                raise
            self.quiet = True

    def _says(self, record: UpdateRecord) -> bool:
        """Whether `record` gets a line on `out` ('plain', 'json', 'sampled')."""
        if record.updates % self.every and not (record.solved and self.fmt != "sampled"):
            return False
        if self.fmt != "sampled":
            return True
        now = self.clock()
        if now - self._said_at < SAMPLED_INTERVAL_S:
            return False
        self._said_at = now
        return True

    def end_line(self) -> None:
        """End the status line, if one shows: what is printed next starts below it."""
        if self.live is not None:
            live, self.live = self.live, None
            try:
                live.close()
            except OSError as error:
                if not detach_if_gone(error):
                    raise

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
        self.end_line()
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

"""The start of a long run's curves, for a monitor that attached late: the records its
metrics file's history ring has lapped (it holds the newest 8,192), read from the run's
`progress.jsonl`, read-only, from its end backwards (only the lines needed are read)."""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

from operant.shared.runs import PROGRESS_FILE

_BLOCK = 1 << 20
_UPDATE = re.compile(rb'\{\s*"update"\s*:\s*(\d+)')
_PHASE = ("phase_", "_s")


def older_points(run_dir: Path, names: list[str], first_update: int, count: int) -> list[tuple]:
    """The curve values (in `names` order, NaN where a record lacks one) of the `count`
    updates just before `first_update` (updates first_update - count .. first_update - 1,
    those of them progress.jsonl holds), oldest first; [] where it cannot be read."""
    if count <= 0 or first_update <= 1:
        return []
    wanted = range(max(1, first_update - count), first_update)
    try:
        lines = _lines_before(run_dir / PROGRESS_FILE, first_update, len(wanted))
    except OSError:
        return []
    points = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line cut by a crash
        if isinstance(record, dict) and record.get("update") in wanted:
            points.append(tuple(_value(record, name) for name in names))
    return points


def _lines_before(path: Path, first_update: int, count: int) -> list[bytes]:
    """Up to `count` whole lines of `path` for updates before `first_update`, oldest first:
    blocks read from the end until the line of update `first_update - count` is passed (a
    line is one update, in order, so the lines before it need no reading)."""
    with open(path, "rb") as handle:
        end = handle.seek(0, os.SEEK_END)
        tail = b""
        kept: list[bytes] = []
        while end > 0:
            start = max(0, end - _BLOCK)
            handle.seek(start)
            tail = handle.read(end - start) + tail
            end = start
            lines = tail.split(b"\n")
            tail = lines.pop(0) if start > 0 else b""  # maybe a part line: read more first
            kept = [line for line in lines if line] + kept
            older = [line for line in kept if _update_of(line) < first_update]
            if len(older) >= count or (older and _update_of(older[0]) <= first_update - count):
                return older[-count:]
        return [line for line in kept if _update_of(line) < first_update][-count:]


def _update_of(line: bytes) -> int:
    """The update a progress line records (it begins with it), without parsing the rest."""
    match = _UPDATE.match(line)
    return int(match.group(1)) if match else -1


def _value(record: dict, name: str) -> float:
    prefix, suffix = _PHASE
    if name.startswith(prefix) and name.endswith(suffix):
        phases = record.get("phase_s")
        phase = name[len(prefix) : -len(suffix)]
        value = phases.get(phase) if isinstance(phases, dict) else None
    else:
        value = record.get(name)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return math.nan

"""The monitor's words and arithmetic: numbers, units, durations, curve and bar scaling, and
the tables `operant monitor --once`, `operant runs` and the app print.

Pure functions over plain values, so each is unit-tested without an app and the widgets stay
thin. Nothing here imports Textual or a command module (the commands, the app and the widgets
import this); `-` stands for a value the run has not published (NaN, None, infinities).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from typing import TypeGuard

from operant.monitor.listing import RunRow, listed_sps, row_progress
from operant.shared.progress import Progress
from operant.shared.ranks import RankRow, status_text
from operant.shared.reader import STATUS_RUNNING, shown_status
from operant.shared.record import UNIX_TIME
from operant.shared.sweeps import SweepSummary, describe

MISSING = "-"
# Eighth blocks from empty to full: one cell of a curve holds 0..8 eighths of its height.
BLOCKS = " ▁▂▃▄▅▆▇█"
_SI = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))
_BINARY = ((1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB"))


def is_number(value: object) -> TypeGuard[int | float]:
    """A finite int or float (bools and NaN are not numbers here). A TypeGuard: the formatters
    below take any value a run publishes (or None) and, past this check, do arithmetic on it."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return math.isfinite(value)


def compact(value: object, digits: int = 3) -> str:
    """A number in at most about six characters: 999, 12.3k, 4.56M, -1.2, 0.0123, 1.2e-05."""
    if not is_number(value):
        return MISSING
    number = float(value)
    magnitude = abs(number)
    for scale, suffix in _SI:
        if magnitude >= scale * 0.9995:
            return f"{_sig(number / scale, digits)}{suffix}"
    if isinstance(value, int):
        return str(value)
    if magnitude == 0:
        return "0"
    if magnitude < 1e-3:
        return f"{number:.{max(digits - 2, 0)}e}"
    return _sig(number, digits)


def _sig(number: float, digits: int) -> str:
    """`digits` significant digits, trailing zeros kept off: 12.3, 4.5, 100."""
    if number == 0:
        return "0"
    exponent = math.floor(math.log10(abs(number)))
    decimals = max(digits - 1 - exponent, 0)
    text = f"{number:.{decimals}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def count(value: object) -> str:
    """A counter with thousands separators: 1,234,567."""
    if not is_number(value):
        return MISSING
    return f"{int(value):,}"


def real(value: object, digits: int = 4) -> str:
    """A gauge to `digits` significant digits, in plain or scientific notation."""
    if not is_number(value):
        return MISSING
    number = float(value)
    if number == 0:
        return "0"
    if 1e-3 <= abs(number) < 1e6:
        return _sig(number, digits)
    return f"{number:.{digits - 1}e}"


def size(value: object) -> str:
    """A size in binary units: 512 B, 3.4 KiB, 1.25 GiB."""
    if not is_number(value) or value < 0:
        return MISSING
    for scale, unit in _BINARY:
        if value >= scale:
            return f"{_sig(value / scale, 3)} {unit}"
    return f"{int(value)} B"


def duration(seconds: object) -> str:
    """How long, the way htop says it: 45s, 12m03s, 3h04m, 2d05h; '-' when unknown."""
    if not is_number(seconds) or seconds < 0:
        return MISSING
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def short_time(seconds: object) -> str:
    """A short duration with its unit: 850 µs, 12.3 ms, 1.20 s, then `duration`."""
    if not is_number(seconds) or seconds < 0:
        return MISSING
    if seconds == 0:
        return "0 s"
    if seconds < 1e-3:
        return f"{_sig(seconds * 1e6, 3)} µs"
    if seconds < 1:
        return f"{_sig(seconds * 1e3, 3)} ms"
    if seconds < 60:
        return f"{seconds:.2f} s"
    return duration(seconds)


def clock_time(value: object) -> str:
    """A moment (seconds since the Unix epoch) as this host's time of day, 14:03:27, with the
    date in front when it is not today: 2026-01-31 14:03:27."""
    if not is_number(value) or value <= 0:
        return MISSING
    moment = time.localtime(value)
    if time.strftime("%Y-%m-%d", moment) == time.strftime("%Y-%m-%d"):
        return time.strftime("%H:%M:%S", moment)
    return time.strftime("%Y-%m-%d %H:%M:%S", moment)


def no_update_text(progress: Progress, detail: bool = True) -> str:
    """What a stuck run's status adds (operant.shared.progress): `no update for 3m12s`, and
    with `detail` what that compares with: `(updates took up to 2.10 s)`, or before the
    trainer's first update `(none since it started)`. Empty for a run that is not stuck."""
    if not progress.stuck:
        return ""
    text = f"no update for {duration(progress.update_age_s)}"
    if not detail:
        return text
    if progress.first_update:
        return text + " (none since it started)"
    if progress.update_s is not None:
        return text + f" (updates took up to {short_time(progress.update_s)})"
    return text


def percent(value: object) -> str:
    """A percentage: 7%, 12.5% below 100 keeps one decimal only when it says something."""
    if not is_number(value):
        return MISSING
    return f"{value:.0f}%" if abs(value) >= 10 or value == int(value) else f"{value:.1f}%"


# Units the value's own text already says (312 MiB, 20 ms, 97%), with the function that writes
# it: `metric` prints no unit beside these.
_SELF_UNITS = {"bytes": size, "B": size, "s": short_time, "%": percent, UNIX_TIME: clock_time}


def metric(value: object, unit: str = "", kind: str = "gauge") -> tuple[str, str]:
    """(value, unit) for a table cell of any metric, formatted by kind and unit so metrics this
    monitor was not written for still read well. The unit is '' when the value's text already
    carries it (`312 MiB`, `20 ms`, `97%`): the one place that decides, so no caller prints a
    unit twice."""
    if isinstance(value, str):
        return value, unit
    if kind == "counter" and is_number(value):
        return count(value), unit
    own = _SELF_UNITS.get(unit)
    if own is not None:
        return own(value), ""
    return real(value), unit


def finite(values: Iterable[float]) -> list[float]:
    """The finite numbers among `values` (history curves hold floats; NaN marks a gap)."""
    isfinite = math.isfinite
    return [value for value in values if isfinite(value)]


def resample(values: Sequence[float], width: int) -> list[float]:
    """`values` fitted to `width` columns: each column is the mean of the finite values that
    fall into it (NaN when none do); a short series is left as it is, not stretched."""
    if width <= 0:
        return []
    length = len(values)
    if length <= width:
        return [float(value) for value in values]
    columns = []
    for column in range(width):
        start = column * length // width
        stop = (column + 1) * length // width
        bucket = values[start:stop]
        total = sum(bucket)  # in C; only a bucket with a gap needs the slow path
        if not math.isfinite(total):
            bucket = finite(bucket)
            total = sum(bucket)
        columns.append(total / len(bucket) if bucket else math.nan)
    return columns


def value_range(values: Iterable[float]) -> tuple[float, float] | None:
    """(low, high) of the finite values, widened when flat so a constant curve sits mid-way;
    None when there are none."""
    numbers = finite(values)
    if not numbers:
        return None
    low, high = min(numbers), max(numbers)
    if high == low:
        pad = abs(high) * 0.5 or 1.0
        return low - pad, high + pad
    return low, high


def sparkline(values: Sequence[float], width: int, height: int = 1) -> list[str]:
    """A curve drawn with eighth blocks: `height` strings of `width` cells, top row first.

    Every value is scaled between the series' low and high; the lowest still gets one eighth,
    so a column with data is never blank, and a NaN column is blank. The curve fills the width
    from the right when there are fewer values than columns, as htop's graphs do.
    """
    if width <= 0 or height <= 0:
        return []
    columns = resample(values, width)
    bounds = value_range(columns)
    rows = [[" "] * width for _ in range(height)]
    if bounds is None:
        return ["".join(row) for row in rows]
    low, high = bounds
    levels = height * 8
    offset = width - len(columns)
    for index, value in enumerate(columns):
        if not is_number(value):
            continue
        eighths = max(1, round((value - low) / (high - low) * levels))
        for row in range(height):
            # Row 0 is the top: it holds what is left above the rows below it.
            filled = eighths - (height - 1 - row) * 8
            rows[row][offset + index] = BLOCKS[max(0, min(8, filled))]
    return ["".join(row) for row in rows]


def shares(parts: Sequence[tuple[str, float]]) -> list[tuple[str, float, float]]:
    """(name, seconds, fraction of the total) for each part with a finite, non-negative time;
    fractions add up to 1 (all 0 when nothing was timed yet)."""
    timed = [
        (name, float(seconds)) for name, seconds in parts if is_number(seconds) and seconds >= 0
    ]
    total = sum(seconds for _, seconds in timed)
    return [(name, seconds, seconds / total if total > 0 else 0.0) for name, seconds in timed]


def allocate(fractions: Sequence[float], width: int) -> list[int]:
    """Whole cells for each fraction of a bar `width` cells wide (largest remainder), so the
    segments always add up to the width when the fractions add up to 1."""
    if width <= 0 or not fractions:
        return [0] * len(fractions)
    exact = [max(0.0, fraction) * width for fraction in fractions]
    cells = [math.floor(value) for value in exact]
    left = min(width, round(sum(exact))) - sum(cells)
    order = sorted(range(len(exact)), key=lambda i: (cells[i] - exact[i], i))
    for index in order[: max(0, left)]:
        cells[index] += 1
    return cells


# --- the command lines' words: every digit, as `--once` and `operant runs` print them --------


def format_value(value: object) -> str:
    """Counters, and gauges holding whole numbers (a step budget, bytes), with thousands
    separators and every digit; other floats to 6 significant digits; unset gauges '-'."""
    if isinstance(value, bool) or value is None:
        return MISSING if value is None else str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if math.isnan(value):
            return MISSING
        if value.is_integer() and abs(value) < 2**53:
            return f"{int(value):,}"  # 20,000,768 steps, not 2.00008e+07
        return f"{value:,.6g}" if abs(value) < 1e15 else f"{value:.6g}"
    return str(value)


def format_age(seconds: float) -> str:
    """A duration the way people say it: 4s, 12m, 3h, 2d; '-' when unknown."""
    if not math.isfinite(seconds) or seconds < 0:
        return MISSING
    for unit_seconds, limit, unit in ((1, 60, "s"), (60, 3600, "m"), (3600, 86400, "h")):
        if seconds < limit:
            return f"{int(seconds // unit_seconds)}{unit}"
    return f"{int(seconds // 86400)}d"


def rate(sps: float | None) -> str:
    """Steps per second, whole, with thousands separators: 12,345; '-' when unknown."""
    return MISSING if sps is None or not math.isfinite(sps) else f"{sps:,.0f}"


def aligned(rows: Sequence[Sequence[str]], right: set[int]) -> list[str]:
    """`rows` of cells as text lines, each column as wide as its widest cell, the columns in
    `right` right-aligned (numbers), the others left-aligned; no trailing spaces."""
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return [
        "  ".join(
            cell.rjust(width) if column in right else cell.ljust(width)
            for column, (cell, width) in enumerate(zip(row, widths))
        ).rstrip()
        for row in rows
    ]


RANK_COLUMNS = ("RANK", "NODE", "PID", "STATUS", "STEPS", "STEPS/S", "HEARTBEAT")


def rank_cells(row: RankRow) -> tuple[str, ...]:
    """One rank's cells under RANK_COLUMNS; an unreadable rank's error goes in a note."""
    status = shown_status(row.status, row.interrupted)
    age = row.heartbeat_age_s
    return (
        str(row.rank),
        row.node or MISSING,
        str(row.pid) if row.pid else MISSING,
        status,
        format_value(row.global_step),
        rate(row.sps),
        MISSING if age is None or not math.isfinite(age) else f"{age:.1f} s ago",
    )


def rank_table(rows: Sequence[RankRow]) -> list[str]:
    """The per-rank table of `--once` and of the app, aligned; notes for ranks that cannot be
    read."""
    lines = aligned([RANK_COLUMNS, *(rank_cells(row) for row in rows)], right={0, 2, 4, 5})
    return lines + [f"rank {row.rank}: {row.error}" for row in rows if row.error]


RUNS_COLUMNS = ("RUN ID", "ENV", "STATUS", "STEPS", "SPS", "AGE", "RANKS")


def listed_status(row: RunRow) -> str:
    """The status a listing shows people: `interrupted`, the ranks that make it, and for a
    stuck run how long no update came (`running, no update for 3m12s`)."""
    status = status_text(
        shown_status(row.status, row.interrupted), row.status_ranks, row.unread_ranks
    )
    stuck = no_update_text(row_progress(row), detail=False)
    return f"{status}, {stuck}" if stuck else status


def runs_table(rows: Sequence[RunRow]) -> str:
    """`operant runs`' table of `rows`, aligned, with a note for each run that cannot be
    read."""
    cells = [RUNS_COLUMNS] + [
        (
            row.run_id,
            row.env_id or MISSING,
            listed_status(row),
            format_value(row.global_step),
            rate(listed_sps(row)),
            format_age(row.age_s if row.age_s is not None else -1.0),
            str(row.world_size),
        )
        for row in rows
    ]
    lines = aligned(cells, right={3, 4, 5, 6})
    notes = [f"{row.run_id}: {row.error}" for row in rows if row.error]
    return "\n".join(lines + ([""] + notes if notes else []))


def sweep_heading(name: str, summary: SweepSummary | None, rows: Sequence[RunRow]) -> str:
    """The line of sweep `name` (operant.shared.sweeps.describe) from its `summary` (None when
    it has none yet), and how many of its trials among `rows` are running now."""
    running = sum(row.sweep == name and row.status == STATUS_RUNNING for row in rows)
    line = describe(summary, running) if summary is not None else f"sweep {name}"
    return f"{line} (operant sweep show {name})"

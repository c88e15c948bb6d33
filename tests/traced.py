"""Allocation checks under tracemalloc that a thread of the test runner cannot fail.

tracemalloc traces every thread of the process, and pytest-xdist's channel thread allocates
when its controller sends the next test (2,146 bytes held once in CI inside a MinAtar kernel's
window, 1 run in 3 locally). Code that allocates per call does so in every window, a passing
thread in one: each check here takes three windows, and a test passes when one of them is clean.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable, Sequence

WINDOWS = 3


def repeat(call: Callable[[], object], count: int) -> Callable[[], None]:
    """A run of `count` calls of `call`, in a plain loop (nothing kept between calls)."""

    def run() -> None:
        for _ in range(count):
            call()

    return run


def held_and_peak(run: Callable[[], object], warm: Callable[[], object] | None = None):
    """Bytes traced as held after `run()` and at its peak, over where it started. `warm` runs
    traced first, outside the window: the interpreter grows a few tables (up to ~2 KiB, once)
    the first time code runs under tracing."""
    tracemalloc.start()
    try:
        if warm is not None:
            warm()
        tracemalloc.reset_peak()
        before, _ = tracemalloc.get_traced_memory()
        run()
        after, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return after - before, peak - before


def windows(
    run: Callable[[], object], until: tuple[int, int] | None = None, **kwargs
) -> list[tuple[int, int]]:
    """(held, peak) of up to WINDOWS windows of `run()`: all of them, or, with `until`
    (held_below, peak_below), up to the first that is clean (the rest would say nothing)."""
    found: list[tuple[int, int]] = []
    for _ in range(WINDOWS):
        found.append(held_and_peak(run, **kwargs))
        if until is not None and clean(found[-1:], *until):
            break
    return found


def clean(found: Sequence[tuple[int, int]], held_below: int, peak_below: int) -> bool:
    """Whether one window held less than `held_below` bytes and peaked under `peak_below`."""
    return any(held < held_below and peak < peak_below for held, peak in found)


def grown(run: Callable[[], object], ignore: Sequence[str] = ()) -> list:
    """The files (tracemalloc's statistics by file) holding more after `run()` than before,
    leaving out those named in `ignore`; the fewest of up to WINDOWS windows (the first in
    which nothing grew ends the search)."""
    leave_out = [tracemalloc.Filter(False, name) for name in (tracemalloc.__file__, *ignore)]
    found = []
    for _ in range(WINDOWS):
        tracemalloc.start()
        try:
            before = tracemalloc.take_snapshot().filter_traces(leave_out)
            run()
            after = tracemalloc.take_snapshot().filter_traces(leave_out)
        finally:
            tracemalloc.stop()
        found.append([stat for stat in after.compare_to(before, "filename") if stat.size_diff > 0])
        if not found[-1]:  # nothing grew: the other windows would say nothing
            break
    return min(found, key=lambda stats: sum(stat.size_diff for stat in stats))

"""The allocation checks of tests/traced.py see what they must: an allocation per call in
every window, a passing one in one window only."""

from __future__ import annotations

import traced

kept: list[bytes] = []


def _keeps() -> None:
    kept.append(bytes(100))


def test_a_call_that_keeps_bytes_fails_every_window():
    found = traced.windows(traced.repeat(_keeps, 1000))
    assert all(held >= 100_000 for held, _ in found), found
    assert not traced.clean(found, held_below=256, peak_below=1024)
    assert traced.grown(traced.repeat(_keeps, 100)) != []
    kept.clear()


def test_a_passing_allocation_is_seen_at_the_peak_and_not_held():
    found = traced.windows(lambda: bytes(50_000))
    assert all(held < 256 and peak >= 50_000 for held, peak in found), found
    assert not traced.clean(found, held_below=256, peak_below=1024)


def test_one_window_with_a_stray_allocation_of_three_passes():
    calls = iter(range(3))

    def once_then_quiet() -> None:
        if next(calls) == 0:
            kept.append(bytes(4096))

    found = traced.windows(once_then_quiet)
    assert found[0][0] >= 4096 and traced.clean(found, held_below=256, peak_below=1024), found
    kept.clear()


def test_windows_stop_at_the_first_clean_one_when_told_what_clean_is():
    calls = iter(range(3))

    def once_then_quiet() -> None:
        if next(calls) == 0:
            kept.append(bytes(4096))

    found = traced.windows(once_then_quiet, until=(256, 1024))
    assert len(found) == 2 and found[0][0] >= 4096 and found[1][0] < 256, found
    kept.clear()

"""The monitor's pure arithmetic: numbers, units, durations, rates, curves and bars."""

import math

import pytest

from operant.monitor import format as fmt


@pytest.mark.parametrize(
    "value, text",
    [
        (0, "0"),
        (999, "999"),
        (1000, "1k"),
        (12_345, "12.3k"),
        (999_999, "1M"),
        (4_560_000, "4.56M"),
        (-12_345.0, "-12.3k"),
        (3.14159, "3.14"),
        (0.012345, "0.0123"),
        (0.00001234, "1.2e-05"),
        (2.5e12, "2.5T"),
        (math.nan, "-"),
        (None, "-"),
        (True, "-"),
        (math.inf, "-"),
    ],
)
def test_compact(value, text):
    assert fmt.compact(value) == text


@pytest.mark.parametrize(
    "value, text",
    [
        (1_234_567, "1,234,567"),
        (0, "0"),
        (12.9, "12"),
        (math.nan, "-"),
        ("x", "-"),
    ],
)
def test_count(value, text):
    assert fmt.count(value) == text


@pytest.mark.parametrize(
    "value, text",
    [
        (431.4321, "431.4"),
        (-0.001429, "-0.001429"),
        (2.5e-4, "2.500e-04"),
        (40100.0, "40100"),
        (1.5e7, "1.500e+07"),
        (0.0, "0"),
        (math.nan, "-"),
    ],
)
def test_real(value, text):
    assert fmt.real(value) == text


@pytest.mark.parametrize(
    "value, text",
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1 KiB"),
        (312 * 2**20, "312 MiB"),
        (1.25 * 2**30, "1.25 GiB"),
        (-1, "-"),
        (math.nan, "-"),
    ],
)
def test_size(value, text):
    assert fmt.size(value) == text


@pytest.mark.parametrize(
    "seconds, text",
    [
        (0, "0s"),
        (59.9, "59s"),
        (60, "1m00s"),
        (754, "12m34s"),
        (3600, "1h00m"),
        (86399, "23h59m"),
        (2 * 86400 + 5 * 3600, "2d05h"),
        (-1, "-"),
        (math.inf, "-"),
    ],
)
def test_duration(seconds, text):
    assert fmt.duration(seconds) == text


@pytest.mark.parametrize(
    "seconds, text",
    [
        (0, "0 s"),
        (0.0001, "100 µs"),
        (0.0123, "12.3 ms"),
        (0.4, "400 ms"),
        (1.2, "1.20 s"),
        (75, "1m15s"),
        (math.nan, "-"),
    ],
)
def test_short_time(seconds, text):
    assert fmt.short_time(seconds) == text


@pytest.mark.parametrize("value, text", [(97.0, "97%"), (3.14, "3.1%"), (0, "0%"), (math.nan, "-")])
def test_percent(value, text):
    assert fmt.percent(value) == text


@pytest.mark.parametrize(
    "value, unit, kind, cell",
    [
        # What a user saw as `elapsed_s 11.91 s s`, `cpu_percent 100% %`, `rss_bytes 251 MiB bytes`:
        # the value's text says its unit, so the unit column stays empty.
        (11.91, "s", "gauge", ("11.91 s", "")),
        (100.0, "%", "gauge", ("100%", "")),
        (251.0 * 2**20, "bytes", "gauge", ("251 MiB", "")),
        (0.02, "s", "snapshot", ("20 ms", "")),
        (754.0, "s", "gauge", ("12m34s", "")),
        (math.nan, "%", "gauge", ("-", "")),
        # Otherwise the unit is said once, beside the number.
        (122_880, "steps", "counter", ("122,880", "steps")),
        (3, "s", "counter", ("3", "s")),
        (40_100.0, "1/s", "gauge", ("40100", "1/s")),
        (0.4329, "", "gauge", ("0.4329", "")),
        ("adam", "", "text", ("adam", "")),
        (math.nan, "", "gauge", ("-", "")),
    ],
)
def test_metric_says_each_unit_once(value, unit, kind, cell):
    assert fmt.metric(value, unit, kind) == cell


def test_resample_averages_buckets_and_keeps_short_series():
    assert fmt.resample([1, 2, 3], 10) == [1.0, 2.0, 3.0]
    assert fmt.resample([1, 3, 5, 7], 2) == [2.0, 6.0]
    columns = fmt.resample([1, math.nan, math.nan, math.nan], 2)
    assert columns[0] == 1.0 and math.isnan(columns[1])
    assert fmt.resample([1, 2], 0) == []


def test_value_range_widens_a_flat_series():
    assert fmt.value_range([3, 1, 2]) == (1, 3)
    assert fmt.value_range([2, 2]) == (1.0, 3.0)
    assert fmt.value_range([0, 0]) == (-1.0, 1.0)
    assert fmt.value_range([math.nan]) is None


def test_sparkline_one_row():
    assert fmt.sparkline([0, 1, 2, 3, 4, 5, 6, 7, 8], 9) == ["▁▁▂▃▄▅▆▇█"]
    # Fewer values than columns: drawn at the right, like htop's graphs.
    assert fmt.sparkline([0, 8], 4) == ["  ▁█"]
    assert fmt.sparkline([], 3) == ["   "]
    assert fmt.sparkline([1, math.nan, 2], 3) == ["▁ █"]


def test_sparkline_rows_stack_from_the_bottom():
    rows = fmt.sparkline([0, 4, 8, 16], 4, height=2)
    assert rows == ["   █", "▁▄██"]
    assert all(len(row) == 4 for row in rows)
    assert fmt.sparkline([1, 2], 3, height=0) == []


def test_shares_and_allocate():
    parts = fmt.shares([("env", 0.02), ("update", 0.06), ("bad", math.nan), ("neg", -1)])
    assert parts == [("env", 0.02, pytest.approx(0.25)), ("update", 0.06, pytest.approx(0.75))]
    assert fmt.shares([("env", 0.0)]) == [("env", 0.0, 0.0)]
    assert fmt.allocate([0.25, 0.75], 10) == [3, 7]  # a tie goes to the first
    cells = fmt.allocate([1 / 3, 1 / 3, 1 / 3], 10)
    assert sum(cells) == 10 and max(cells) - min(cells) <= 1
    cells = fmt.allocate([0.31, 0.18, 0.031, 0.015, 0.46, 0.004], 78)
    assert sum(cells) == 78 and cells[4] == max(cells)
    assert fmt.allocate([0.5, 0.5], 0) == [0, 0]
    assert fmt.allocate([0.0, 0.0], 10) == [0, 0]


def test_an_ended_run_shows_its_mean_steps_per_second():
    """A finished run's last update's rate is noise (556K read where the run made 394K):
    listings show the run's mean once it has ended, the last update's while it runs."""
    from operant.shared.reader import shown_sps

    metrics = {"sps": 556_403.0, "sps_mean": 393_706.0}
    assert shown_sps(metrics, "running") == 556_403.0
    assert shown_sps(metrics, "stalled") == 556_403.0
    for status in ("finished", "failed", "crashed"):
        assert shown_sps(metrics, status) == 393_706.0
    assert shown_sps({"sps": 5.0}, "finished") == 5.0  # a file without the mean

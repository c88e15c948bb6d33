"""Torn-read stress: a writer process publishes as fast as it can while this process reads.

The writer puts the same number in every word of a snapshot (and of a history record), so a
torn read shows as two different numbers. The seqlock must reject every torn copy.
"""

import math
import subprocess
import sys
import time
from pathlib import Path

import pytest

from operant.shared.reader import MetricsReader

WRITER = Path(__file__).with_name("metrics_writer_proc.py")
READS = 1_000_000
# Generous: the reads take a few seconds on an idle 2-core machine.
TIME_LIMIT_S = 60.0


def start_writer(*args: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, str(WRITER), *args], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


@pytest.fixture
def stop_on_exit():
    procs = []
    yield procs.append
    for proc in procs:
        proc.kill()
        proc.wait()


def test_snapshot_block_is_never_torn(tmp_path, stop_on_exit):
    path = tmp_path / "metrics.bin"
    words = 16
    writer = start_writer("snapshot", str(path), str(words))
    stop_on_exit(writer)
    reader = MetricsReader(path)
    reads = torn = went_back = counter_behind = unavailable = distinct = unpublished = 0
    last = 0.0
    deadline = time.monotonic() + TIME_LIMIT_S
    # Until the writer has really moved underneath the reads too: on a busy machine it may
    # get little CPU while the reader races through its million.
    while reads < READS or distinct <= 1000:
        block = reader.snapshot_block()
        if block is None:
            unavailable += 1
            continue
        counter = reader.counter("hammer_count")
        first = block[0]
        if math.isnan(first):
            # Nothing published yet: the block still holds the file's initial NaNs (which
            # tuple.count cannot match: NaN != NaN).
            if not all(math.isnan(value) for value in block):
                torn += 1
            unpublished += 1
        elif block.count(first) != words:
            torn += 1
        if first < last:
            went_back += 1
        if counter < first:
            counter_behind += 1
        if first != last:
            distinct += 1
        last = first
        reads += 1
        if not reads & 0xFFFF:
            assert time.monotonic() < deadline, f"only {reads} reads in {TIME_LIMIT_S} s"
    assert writer.poll() is None, "the writer stopped before the reads were done"
    print(
        f"\nsnapshot: {reads} reads, {distinct} distinct values, {reader.retries} retries, "
        f"{unavailable} unavailable, {unpublished} before the first publish"
    )
    assert (torn, went_back, counter_behind) == (0, 0, 0)
    # The writer really moved underneath the reads.
    assert distinct > 1000
    reader.close()


def test_history_records_are_never_torn_across_wraparound(tmp_path, stop_on_exit):
    path = tmp_path / "metrics.bin"
    # Small next to a million records (the ring laps thousands of times), yet big enough that
    # a reader sharing one core with the writer still gets a ring's worth per time slice.
    capacity, fields = 1024, 8
    writer = start_writer("history", str(path), str(capacity), str(fields))
    stop_on_exit(writer)
    reader = MetricsReader(path)
    records = torn = out_of_order = skipped = 0
    since, previous = 0, -1
    deadline = time.monotonic() + TIME_LIMIT_S
    while records < READS:
        batch = reader.history(since)
        for record in batch.records:
            if record.values.count(float(record.index)) != fields:
                torn += 1
            if record.index <= previous:
                out_of_order += 1
            previous = record.index
        records += len(batch.records)
        skipped += batch.skipped
        since = batch.head
        assert time.monotonic() < deadline, f"only {records} records in {TIME_LIMIT_S} s"
    assert writer.poll() is None, "the writer stopped before the reads were done"
    print(f"\nhistory: {records} records, head {since}, {skipped} skipped")
    assert (torn, out_of_order) == (0, 0)
    # The ring wrapped many times and the reader fell behind it: overwritten records were
    # skipped, not shown.
    assert since > 100 * capacity
    assert skipped > 0
    reader.close()

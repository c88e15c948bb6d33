"""The ranks' all-reduce through shared memory (operant.trainer.distributed.local_reduce), between
real
processes: each gets the same bits, the sum in rank order; a rank that never arrives makes
the others give up at the deadline instead of waiting forever; the segment's name is gone
once every rank has mapped it."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from operant.trainer.distributed import local_reduce
from operant.trainer.distributed.local_reduce import LocalReduce, open_local_reduce

WORLD = 3
SIZE = 10_007  # not a multiple of any vector width


def _vector(rank: int, call: int) -> np.ndarray:
    generator = np.random.default_rng(100 * call + rank)
    return (generator.standard_normal(SIZE) * 10.0 ** generator.integers(-3, 4)).astype(np.float32)


def _run_ranks(world: int, target, *args) -> dict:
    """target(*args, rank, queue) in `world` forked processes: what each put, by rank."""
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    ranks = [context.Process(target=target, args=(*args, r, out)) for r in range(world)]
    for process in ranks:
        process.start()
    results = dict(out.get(timeout=60) for _ in ranks)
    for process in ranks:
        process.join(timeout=30)
        assert process.exitcode == 0
    return results


def _rank(path: str, calls: int, world: int, mean: bool, rank: int, out) -> None:
    fd = os.open(path, os.O_RDWR)
    segment = local_reduce._map(fd, os.path.getsize(path))
    assert segment is not None
    reduce = LocalReduce(segment, world, rank, SIZE * 8)
    sums = []
    for call in range(calls):
        tensor = torch.from_numpy(_vector(rank, call)[: SIZE - call])  # shorter each call
        if call % 2:
            tensor = tensor.double()  # float64 too (the advantage moments' sums)
        assert reduce.sum_(tensor, timeout_s=30.0, mean=mean)
        sums.append(tensor.numpy().tobytes())
    out.put((rank, sums))


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("mean", [False, True])
def test_every_rank_gets_the_sum_in_rank_order(tmp_path, world, mean):
    """The sum in rank order, bit for bit; the mean is that sum then torch's division (what
    Group.average_ did through gloo: all_reduce, then div_), from one pass over the slots."""
    path = str(tmp_path / "segment")
    with open(path, "wb") as segment:
        segment.truncate(local_reduce.native.segment_bytes(world, SIZE * 8))
    calls = 7  # both sets of slots, several times over
    results = _run_ranks(world, _rank, path, calls, world, mean)
    for call in range(calls):
        parts = [torch.from_numpy(_vector(r, call)[: SIZE - call]) for r in range(world)]
        if call % 2:
            parts = [part.double() for part in parts]
        expected = parts[0].clone()
        for part in parts[1:]:  # in their dtype, rank order
            expected += part
        if mean:
            expected.div_(world)
        for rank in range(world):
            got = np.frombuffer(results[rank][call], dtype=expected.numpy().dtype)
            assert got.tobytes() == expected.numpy().tobytes(), (rank, call)


def test_a_rank_that_never_arrives_ends_the_wait_at_the_deadline(tmp_path):
    path = str(tmp_path / "segment")
    with open(path, "wb") as segment:
        segment.truncate(local_reduce.native.segment_bytes(2, 64))
    mapped = local_reduce._map(os.open(path, os.O_RDWR), os.path.getsize(path))
    assert mapped is not None
    reduce = LocalReduce(mapped, 2, 0, 64)
    started, cpu = time.monotonic(), time.process_time()
    assert not reduce.sum_(torch.ones(16), timeout_s=0.5)
    waited = time.monotonic() - started
    assert 0.5 <= waited < 5.0
    # past its first 10 ms the wait sleeps between looks instead of holding the core
    assert time.process_time() - cpu < 0.5 * waited


def test_a_rank_whose_process_ends_is_seen_at_once_not_at_the_deadline(monkeypatch, tmp_path):
    """Rank 1, a real process holding its lock as open_local_reduce takes it, is SIGKILLed
    before it arrives: rank 0's wait ends within moments with its name, not at the deadline
    (gloo sees a closed socket; without the lock this wait would last train.dist_timeout_s)."""
    path = str(tmp_path / "segment")
    with open(path, "wb") as segment:
        segment.truncate(local_reduce.native.segment_bytes(2, 64))
    fd = os.open(path, os.O_RDWR)
    assert local_reduce._hold(fd, 0)
    mapped = local_reduce._map(fd, os.path.getsize(path))
    assert mapped is not None
    rank_one = subprocess.Popen(
        [sys.executable, "-c", HOLD_BYTE_ONE, path], stdout=subprocess.PIPE, text=True
    )
    try:
        assert rank_one.stdout.readline().strip() == "holding"
        reduce = LocalReduce(mapped, 2, 0, 64, fd)
        # alive and absent: the deadline, as before
        assert not reduce.sum_(torch.ones(16), timeout_s=0.3)
        assert reduce.failure == "the wait of a collective through shared memory"
        rank_one.kill()
        rank_one.wait(timeout=10)
        started = time.monotonic()
        assert reduce.all_gather(torch.ones(4), timeout_s=60.0) is None
        assert time.monotonic() - started < 10.0
        assert reduce.failure == (
            "rank 1's process ended during a collective through shared memory"
        )
        reduce.close()
    finally:
        rank_one.kill()


HOLD_BYTE_ONE = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 1, os.SEEK_SET)
print("holding", flush=True)
time.sleep(600)
"""


def test_setting_up_leaves_no_name_in_dev_shm(monkeypatch, tmp_path):
    """One process as a world of one: rank 0 makes the segment, maps it and unlinks it."""
    monkeypatch.setattr(local_reduce, "SHM_DIR", str(tmp_path))
    reduce = open_local_reduce(0, 1, 256, lambda value: value, lambda flags: flags)
    assert reduce is not None and list(tmp_path.iterdir()) == []
    tensor = torch.arange(64, dtype=torch.float32)
    assert reduce.sum_(tensor, timeout_s=1.0)
    assert torch.equal(tensor, torch.arange(64, dtype=torch.float32))
    reduce.close()


def test_a_tmpfs_too_small_for_the_segment_keeps_gloo(monkeypatch, tmp_path):
    """A container's small /dev/shm: the segment's pages are reserved when it is made, so a
    full tmpfs refuses then (every rank stays on gloo) instead of a SIGBUS mid-run."""
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(small)], check=True)
    try:
        monkeypatch.setattr(local_reduce, "SHM_DIR", str(small))
        assert open_local_reduce(0, 1, 1 << 20, lambda value: value, lambda flags: flags) is None
        assert list(small.iterdir()) == []
        fits = open_local_reduce(0, 1, 1 << 18, lambda value: value, lambda flags: flags)
        assert fits is not None
        fits.close()
    finally:
        subprocess.run(["umount", str(small)], check=True)


def test_a_rank_that_cannot_map_it_keeps_every_rank_on_gloo(monkeypatch, tmp_path):
    monkeypatch.setattr(local_reduce, "SHM_DIR", str(tmp_path / "missing"))
    agreed = []

    def agree(flags):
        agreed.append(flags)
        return flags

    assert open_local_reduce(0, 1, 256, lambda value: value, agree) is None
    assert agreed == [[True]]


def test_a_gather_hands_every_rank_every_ranks_bytes(tmp_path):
    """Two ranks gather int32 votes and float64 rows (the update record's) alternately."""
    path = str(tmp_path / "segment")
    with open(path, "wb") as segment:
        segment.truncate(local_reduce.native.segment_bytes(2, 4096))
    results = _run_ranks(2, _gatherer, path)
    for rank in range(2):
        votes, is_float64, firsts = results[rank]
        assert votes == [[1, 0, 7], [0, 1, 8]]
        assert is_float64 and firsts == [0.5, 1.5]


def _gatherer(path: str, rank: int, out) -> None:
    segment = local_reduce._map(os.open(path, os.O_RDWR), os.path.getsize(path))
    assert segment is not None
    reduce = LocalReduce(segment, 2, rank, 4096)
    votes = reduce.all_gather(torch.tensor([1 - rank, rank, 7 + rank], dtype=torch.int32), 30.0)
    rows = reduce.all_gather(torch.full((9,), rank + 0.5, dtype=torch.float64), 30.0)
    assert votes is not None and rows is not None
    out.put((rank, (votes.tolist(), rows.dtype == torch.float64, rows[:, 0].tolist())))

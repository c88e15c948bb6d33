"""Collectives between ranks on one machine, through shared memory.

Every minibatch step of a K-rank run averages the flat gradient over the ranks; each epoch
sums the advantages' statistics, and each update gathers every rank's record and votes.
Gloo does that over loopback TCP: for the CNN's 132K floats about 0.7 ms alone, and 3-4 ms
inside the step, where each wait lets the waiting core sleep and the wake-up comes late
(measured in docs/journal/2026-11-29-pixels-best-peer-pace.md, "Ranks"). When every rank
runs on this machine, the ranks instead map one segment in /dev/shm: each copies its vector
into its slot, counts itself in, and sums the slots in rank order, or copies them all out to
gather (operant.cext.local_reduce: the same bits on every rank; for two ranks the bits
gloo's sum gives, since a + b == b + a). Setting up is itself collective (rank 0 makes the
segment, the others map it, then rank 0 unlinks its name, so nothing is left in /dev/shm
however the run ends); if any rank cannot map it, every rank keeps gloo. Each rank also
locks one byte of the segment's file for as long as its process lives: a rank waiting in a
collective sees another's process end (SIGKILL, the OOM killer) at once, as gloo sees a
closed socket, instead of waiting out train.dist_timeout_s.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import tempfile
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

import operant.cext.local_reduce as native

SHM_DIR = "/dev/shm"


_SUMMABLE = (torch.float32, torch.float64)


def reducible(tensor: torch.Tensor) -> bool:
    """Whether a sum of `tensor` can go through a segment (float32 or float64, CPU, dense)."""
    return tensor.dtype in _SUMMABLE and gatherable(tensor)


def gatherable(tensor: torch.Tensor) -> bool:
    """Whether `tensor` can be gathered through a segment (CPU, dense)."""
    return tensor.device.type == "cpu" and tensor.is_contiguous()


class LocalReduce:
    """One mapped segment for `world` ranks and vectors of up to `slot_bytes` bytes; `fd`, the
    segment's file with this rank's lock on byte `rank` (open_local_reduce), lets a waiting
    rank see another's process end (-1: it waits for the deadline)."""

    def __init__(self, segment: mmap.mmap, world: int, rank: int, slot_bytes: int, fd: int = -1):
        self.segment = segment
        self.view = np.frombuffer(segment, dtype=np.uint8)
        self.world, self.rank, self.slot_bytes = world, rank, slot_bytes
        self.fd = fd
        self.calls = 0
        self.failure = ""
        """Why the last call that returned False or None failed, in a few words."""

    def sum_(self, tensor: torch.Tensor, timeout_s: float, mean: bool = False) -> bool:
        """`tensor` (`reducible`, at most `slot_bytes`) becomes its sum over the ranks (with
        `mean`, that sum divided by the world size: the bits of the sum then torch's div_);
        False (`failure` says why) when the other ranks did not all arrive within timeout_s
        or one's process ended."""
        data = tensor.view(-1).numpy()
        status = native.all_reduce_sum(
            self.view,
            self.world,
            self.rank,
            self.slot_bytes,
            data,
            self.calls,
            timeout_s,
            mean,
            self.fd,
        )
        self.calls += 1
        return self._done(status)

    def all_gather(self, tensor: torch.Tensor, timeout_s: float) -> torch.Tensor | None:
        """(world, *tensor.shape): every rank's `tensor` (CPU, dense, at most `slot_bytes`),
        in rank order; None as sum_'s False."""
        out = torch.empty((self.world, *tensor.shape), dtype=tensor.dtype)
        status = native.all_gather(
            self.view,
            self.world,
            self.rank,
            self.slot_bytes,
            tensor.view(-1).view(torch.uint8).numpy(),
            out.view(-1).view(torch.uint8).numpy(),
            self.calls,
            timeout_s,
            self.fd,
        )
        self.calls += 1
        return out if self._done(status) else None

    def _done(self, status: int) -> bool:
        if status == 0:
            return True
        self.failure = (
            "the wait of a collective through shared memory"
            if status == -1
            else f"rank {-2 - status}'s process ended during a collective through shared memory"
        )
        return False

    def close(self) -> None:
        del self.view
        self.segment.close()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def open_local_reduce(
    rank: int,
    world: int,
    slot_bytes: int,
    share: Callable[[Any], Any],
    agree: Callable[[list[bool]], list[bool]],
) -> LocalReduce | None:
    """A segment every rank maps (a collective: every rank calls it, in the same order), or
    None on every rank when one of them could not map it. `share` hands rank 0's value to
    every rank, `agree` ORs a flag over the ranks (the group's own collectives)."""
    size = native.segment_bytes(world, slot_bytes)
    path, fd = None, -1
    if rank == 0:
        path, fd = _create(size)
    path = share(path)
    if rank != 0 and path is not None:
        fd = _open(path)
    segment = _map(fd, size) if _hold(fd, rank) else None
    failed = agree([segment is None])[0]
    if rank == 0 and path is not None:
        os.unlink(path)  # every rank has mapped it (or given up): the name can go
    if failed:
        if segment is not None:
            segment.close()
        if fd >= 0:
            os.close(fd)
        return None
    assert segment is not None
    return LocalReduce(segment, world, rank, slot_bytes, fd)


def _hold(fd: int, rank: int) -> bool:
    """This rank's lock on byte `rank` of the segment's file, held until its process ends: the
    others' waits see it gone (cext/trainer/local_reduce.h, lr_gone)."""
    if fd < 0:
        return False
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, rank, os.SEEK_SET)
    except OSError:
        return False
    return True


def _create(size: int) -> tuple[str | None, int]:
    """A new file of `size` bytes in SHM_DIR, its pages reserved: a tmpfs too small for it
    (a container's 64 MB /dev/shm) refuses here, where a sparse file would kill a rank with
    SIGBUS at its first write past the space."""
    try:
        fd, path = tempfile.mkstemp(prefix="operant-reduce-", dir=SHM_DIR)
    except OSError:
        return None, -1
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError:
        os.close(fd)
        os.unlink(path)
        return None, -1
    return path, fd


def _open(path: str) -> int:
    try:
        return os.open(path, os.O_RDWR)
    except OSError:
        return -1


def _map(fd: int, size: int) -> mmap.mmap | None:
    """The segment mapped (the caller keeps `fd`: its lock says this rank is alive)."""
    if fd < 0:
        return None
    try:
        return mmap.mmap(fd, size)
    except (OSError, ValueError):
        return None

"""The shared block and the pipes of env workers (operant.envs.reference.workers, the trainer's
side;
operant.envs.reference.worker_process, the worker's): where each buffer lies in the block, and the
one-byte commands and length-prefixed messages both sides read and write.

Layout: one block of shared memory (an anonymous memfd, or an unlinked temporary file where
there is no memfd) holds every buffer the trainer reads and writes, laid out as
`allocate_buffers` lays them out: `actions`, `obs`, `final_obs`, `rewards`, `terminated`,
`truncated`, plus the float64 rewards the episode accounting reads (the reference impl
accounts in float64 too). The env's own `obs`, `rewards`, ... ARE views of that block, so
nothing is copied or pickled per step: worker w owns rows `lo_w:hi_w` (an even split) and
writes its sub-envs' outputs straight into them. The block has no name, so nothing can leak
when a process is killed; it is freed when the last mapping goes.
"""

from __future__ import annotations

import math
import mmap
import os
import select
import signal
import struct
import tempfile
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

STEP, RESET, CLOSE = b"S", b"R", b"C"
"""The commands down a worker's command pipe."""
DONE, ERROR = b".", b"E"
"""A worker's answers: done, or an error (a length-prefixed message follows)."""
WHERE_SIGNAL = signal.SIGUSR2
"""Sent by the trainer to a worker it is about to end as hung: the worker writes where its
Python code is (faulthandler) to its stderr, the trainer's."""
LENGTH = struct.Struct("<I")
"""The length prefix of a message."""
_ALIGN = 64


@dataclass(frozen=True)
class BufferLayout:
    """Where each buffer lies in the shared block: (name, dtype, shape, offset), 64-byte
    aligned. Parent and workers compute it from the same four numbers."""

    num_envs: int
    obs_shape: tuple[int, ...]
    obs_dtype: str
    action_shape: tuple[int, ...]
    discrete: bool

    def fields(self) -> list[tuple[str, np.dtype, tuple[int, ...], int]]:
        n = self.num_envs
        specs: list[tuple[str, Any, tuple[int, ...]]] = [
            ("actions", np.int64 if self.discrete else np.float32, (n, *self.action_shape)),
            ("obs", self.obs_dtype, (n, *self.obs_shape)),
            ("final_obs", self.obs_dtype, (n, *self.obs_shape)),
            ("rewards", np.float32, (n,)),
            ("rewards64", np.float64, (n,)),
            ("terminated", np.bool_, (n,)),
            ("truncated", np.bool_, (n,)),
        ]
        offset, placed = 0, []
        for name, dtype, shape in specs:
            dtype = np.dtype(dtype)
            placed.append((name, dtype, shape, offset))
            size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            offset += -(-size // _ALIGN) * _ALIGN
        return placed

    @property
    def size(self) -> int:
        name, dtype, shape, offset = self.fields()[-1]
        return max(_ALIGN, offset + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize)

    def views(self, block: mmap.mmap) -> dict[str, np.ndarray]:
        return {
            name: np.ndarray(shape, dtype=dtype, buffer=block, offset=offset)
            for name, dtype, shape, offset in self.fields()
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BufferLayout:
        return cls(
            data["num_envs"],
            tuple(data["obs_shape"]),
            data["obs_dtype"],
            tuple(data["action_shape"]),
            data["discrete"],
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "num_envs": self.num_envs,
            "obs_shape": list(self.obs_shape),
            "obs_dtype": self.obs_dtype,
            "action_shape": list(self.action_shape),
            "discrete": self.discrete,
        }


def shared_fd(size: int) -> int:
    """A file descriptor of `size` zeroed bytes of shared memory that has no name."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("operant-env-workers", os.MFD_CLOEXEC)
    else:
        fd, path = tempfile.mkstemp(prefix="operant-env-workers-")
        os.unlink(path)
    os.ftruncate(fd, size)
    return fd


def read_message(fd: int) -> bytes | None:
    """A length-prefixed message from `fd` (blocking until it is whole); None at end-of-file."""
    data = b""
    for size in (LENGTH.size, None):
        want = LENGTH.unpack(data)[0] if size is None else size
        data = b""
        while len(data) < want:
            chunk = os.read(fd, want - len(data))
            if not chunk:
                return None
            data += chunk
    return data


def readable(fd: int, deadline: float) -> bool:
    """Whether `fd` has something to read (or its end) before `deadline` (time.monotonic;
    math.inf: however long it takes)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    while True:
        left = deadline - time.monotonic()
        left_ms = None if left == math.inf else max(0, int(left * 1000))
        if poller.poll(left_ms):
            return True
        if time.monotonic() >= deadline:
            return False


def write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data) :]

"""`FreshArrays`: the arrays a copy=True step copies its outputs into, taken again once nothing
outside holds them rather than allocated anew each step.

Gymnasium's `copy=True` makes what `step()` returns the caller's: no later step may change it.
A new array per step keeps that promise, but at MinAtar's sizes (400 KB to 1 MB a batch of
1,024 frames) allocating it cost more than the copy: glibc serves such sizes around its
mmap and trim thresholds, and with the previous step's arrays still held, as in any
`obs, ... = env.step(actions)` loop, it gave the heap's top back to the OS and faulted it in
again on every step (72 minor faults a step on Asterix; Seaquest's copy=True stepped at 0.13x
its copy=False, `benchmarks/bench_gym_face.py --copy`, docs/journal/issue-37-gym-face-copy.md).

An array is handed out again only when its reference count says that nothing but the pool
refers to it: no name, container, view (a numpy view's base is the array it views), torch
tensor (`torch.from_numpy` holds the array), memoryview or weak reference of the caller's. So
no array is written while anything can still read it, and the memory a step writes is one of
a few arrays, already faulted in and often still in cache. A caller that keeps every step's
arrays gets a new one each step, as with a plain copy; the pool keeps at most `keep` of them.
"""

from __future__ import annotations

import sys
import weakref
from typing import Any

import numpy as np


class FreshArrays:
    """Arrays of one shape and dtype, each handed out by `take()` only while nothing else holds
    it. New ones are zeros when `zeroed` (for a caller that writes only some rows of each:
    the rest then hold what an earlier step wrote there, never memory of unknown content)."""

    def __init__(self, shape: tuple[int, ...], dtype: Any, *, zeroed: bool = False, keep: int = 4):
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.zeroed = zeroed
        self.keep = keep
        self._arrays: list[np.ndarray] = []
        self._replace = 0  # the slot a new array takes once all `keep` are held
        # The count take() sees for an array only the pool refers to, measured through the same
        # call: what sys.getrefcount adds for its own argument differs between Python versions.
        self._arrays.append(np.empty(0, self.dtype))
        self._unheld = self._count(0)
        self._arrays.clear()

    def _count(self, index: int) -> int:
        return sys.getrefcount(self._arrays[index])

    def take(self) -> np.ndarray:
        """An array nothing outside the pool refers to; its contents are whatever the last
        writer left (zeros for a new one when `zeroed`)."""
        arrays = self._arrays
        for index in range(len(arrays)):
            if self._count(index) == self._unheld and not weakref.getweakrefcount(arrays[index]):
                return arrays[index]
        array = (np.zeros if self.zeroed else np.empty)(self.shape, self.dtype)
        if len(arrays) < self.keep:
            arrays.append(array)
        else:  # all held: the pool lets go of one (its holder keeps it) and keeps the new one
            arrays[self._replace] = array
            self._replace = (self._replace + 1) % self.keep
        return array

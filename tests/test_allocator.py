"""The trainer keeps freed heap memory for reuse (operant.trainer.run.allocator): with its settings
a 4 MiB block (what one minibatch's tensors come to) comes from the heap, not from a fresh
mapping of its own, and blocks freed and allocated again fault no page in;
OPERANT_MALLOC_TUNING=0 leaves malloc alone (the block is mmap'd, as glibc does by default)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux only"
)

PROBE = """
import ctypes, resource
from operant.trainer.run import allocator

class Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]

applied = allocator.keep_freed_memory()
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = (ctypes.c_size_t,)
libc.free.argtypes = (ctypes.c_void_p,)
libc.mallinfo2.restype = Mallinfo2
size = 4 * 2**20
mapped_before = libc.mallinfo2().hblks  # blocks served by mmap so far
block = libc.malloc(size)
mapped = libc.mallinfo2().hblks - mapped_before  # 1 if this one was
ctypes.memset(block, 1, size)
libc.free(block)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    block = libc.malloc(size)
    ctypes.memset(block, 1, size)
    libc.free(block)
print(applied, mapped, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def probe(**environment: str) -> tuple[str, int, int]:
    result = subprocess.run(
        [sys.executable, "-c", PROBE],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **environment},
        timeout=60,
    )
    applied, mapped, faults = result.stdout.split()
    return applied, int(mapped), int(faults)


def test_a_minibatch_sized_block_comes_from_the_heap_and_is_reused_without_faults():
    applied, mapped, faults = probe()
    assert applied == "True" and mapped == 0
    assert faults < 100  # 20 rounds of 1,024 pages each: none faulted in again


def test_the_switch_leaves_malloc_alone():
    applied, mapped, _ = probe(OPERANT_MALLOC_TUNING="0")
    assert applied == "False" and mapped == 1

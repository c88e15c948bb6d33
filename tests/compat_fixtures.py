"""What the compat tests share (tests/test_compat_main.py, tests/test_compat_checkpoints.py):
the kind of CPU main's records depend on, and a record read without its timing fields."""

from __future__ import annotations

import json
from pathlib import Path

# Timing fields are not deterministic and are never compared.
TIMING = {"elapsed_s", "sps", "sps_mean", "phase_s"}


def cpu_key() -> str:
    """The kind of CPU the records depend on: its vendor and torch's SIMD level, e.g.
    GenuineIntel-AVX512 (the fixtures' record.sh names its folder the same way)."""
    import torch

    with open("/proc/cpuinfo") as cpuinfo:
        vendor = next(
            (line.split(":")[1].strip() for line in cpuinfo if line.startswith("vendor_id")), "cpu"
        )
    return f"{vendor}-{torch.backends.cpu.get_cpu_capability()}"


def records(path: Path, skip: int = 0) -> list[dict]:
    """A progress.jsonl's records from line `skip` on, timing fields removed."""
    lines = path.read_text().splitlines()[skip:]
    return [{k: v for k, v in json.loads(line).items() if k not in TIMING} for line in lines]

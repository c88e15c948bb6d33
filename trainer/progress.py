"""The progress log: every update's record to progress.jsonl, and to stdout as the user asked.

`ProgressLog` writes each UpdateRecord as one progress.jsonl line
(operant.shared.record.encode_progress_line) and every `log_every`-th (and the one that solved
the env) to stdout, either as that same JSON line (`--log-format json`) or as `plain_line`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, TextIO

from operant.shared.record import UpdateRecord, encode_progress_line


def number_or_dash(value: Any, spec: str) -> str:
    """`value` formatted with `spec`; '-' for None and non-finite numbers."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return format(value, spec)


def plain_line(record: UpdateRecord, total_updates: int) -> str:
    """One update in one line, for people watching a terminal."""
    return (
        f"update {record.updates}/{total_updates}  step {record.global_step:,}  "
        f"sps {record.sps:,.0f}  return {number_or_dash(record.episode_return_mean, '.1f')}  "
        f"episodes {record.episodes:,}  "
        f"pg {number_or_dash(record.policy_loss, '.4f')}  "
        f"vf {number_or_dash(record.value_loss, '.3f')}  "
        f"ent {number_or_dash(record.entropy, '.3f')}  "
        f"kl {number_or_dash(record.approx_kl, '.4f')}  "
        f"clip {number_or_dash(record.clip_fraction, '.3f')}  t {record.elapsed_s:.1f}s"
    )


class ProgressLog:
    """Every update to progress.jsonl; every `every`-th to `out`, plain or JSON (`fmt`)."""

    def __init__(
        self, path: Path, out: TextIO, fmt: str, every: int, total_updates: int, quiet: bool
    ):
        self.file = open(path, "a", buffering=1)  # noqa: SIM115 (open for the run; close())
        self.out, self.fmt, self.every = out, fmt, every
        self.total, self.quiet = total_updates, quiet

    def __call__(self, record: UpdateRecord) -> None:
        line = encode_progress_line(record)
        self.file.write(line + "\n")
        if self.quiet or (record.updates % self.every and not record.solved):
            return
        text = line if self.fmt == "json" else plain_line(record, self.total)
        print(text, file=self.out, flush=True)

    def close(self) -> None:
        self.file.close()

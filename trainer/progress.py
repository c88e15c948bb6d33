"""Progress records on their way out: every update's record appended to progress.jsonl, and
every `log_every`-th printed to stdout as one plain line or one JSON object."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, TextIO


def _fmt(value: Any, spec: str) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return format(value, spec)


def plain_line(record: dict[str, Any], total_updates: int) -> str:
    return (f"update {record['update']}/{total_updates}  step {record['global_step']:,}  "
            f"sps {record['sps']:,.0f}  return {_fmt(record['episode_return_mean'], '.1f')}  "
            f"episodes {record['episodes']:,}  "
            f"pg {_fmt(record.get('policy_loss'), '.4f')}  vf {_fmt(record.get('value_loss'), '.3f')}  "
            f"ent {_fmt(record.get('entropy'), '.3f')}  kl {_fmt(record.get('approx_kl'), '.4f')}  "
            f"clip {_fmt(record.get('clip_fraction'), '.3f')}  t {record['elapsed_s']:.1f}s")


class ProgressLog:
    """Every update to progress.jsonl; every `log_every`-th to stdout, plain or JSON."""

    def __init__(self, path: Path, out: TextIO, fmt: str, every: int, total_updates: int,
                 quiet: bool):
        self.file = open(path, "a", buffering=1)
        self.out, self.fmt, self.every, self.total, self.quiet = out, fmt, every, total_updates, quiet

    def __call__(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, separators=(",", ":"))
        self.file.write(line + "\n")
        if self.quiet or (record["update"] % self.every and not record.get("solved")):
            return
        text = line if self.fmt == "json" else plain_line(record, self.total)
        print(text, file=self.out, flush=True)

    def close(self) -> None:
        self.file.close()

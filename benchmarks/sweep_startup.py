"""What starting a trial's run costs: a plain `operant-train` process against a run forked from
operant sweep's fork server (operant.trainer.sweep.trials), alternately, for a one-update
CartPole run; the wall-clock from start to exit, less the seconds the run says it trained.

    python benchmarks/sweep_startup.py --repeats 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from operant.trainer.sweep import trials


def _argv(root: Path, run_id: str) -> list[str]:
    return ["--env", "CartPole-v1", "--total-steps", "2048", "--runs-dir", str(root),
            "--run-id", run_id, "--quiet"]  # fmt: skip


def _trained(root: Path, run_id: str) -> float:
    lines = (root / run_id / "progress.jsonl").read_text().splitlines()
    return json.loads(lines[-1])["elapsed_s"]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    trials.warm_up()
    overhead: dict[str, list[float]] = {"process": [], "forked": []}
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        for index in range(args.repeats):
            run_id = f"process-{index}"
            started = time.perf_counter()
            subprocess.run(["operant-train", *_argv(root, run_id)], check=True)
            overhead["process"].append(time.perf_counter() - started - _trained(root, run_id))
            run_id = f"forked-{index}"
            started = time.perf_counter()
            run = trials.RunProcess(_argv(root, run_id), root / run_id, root / f"{run_id}.log")
            run.process.join()
            assert run.exitcode == 0, run.last_words()
            overhead["forked"].append(time.perf_counter() - started - _trained(root, run_id))
    medians = {name: round(statistics.median(values), 3) for name, values in overhead.items()}
    print(json.dumps({"overhead_s": overhead, "median_overhead_s": medians}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

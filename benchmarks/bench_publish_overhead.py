"""What publishing into the metrics file costs the trainer: operant-train with publication on
and off, alternating in one run, same seed and budget.

    python benchmarks/bench_publish_overhead.py [--rounds 5] [--total-steps 100000]

Each round runs both variants back to back (order alternating) as real `operant-train`
processes, and compares their mean training steps/s (the summary's sps_mean, which excludes
start-up). Prints per-round numbers, the medians and their ratio.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def run(publish: bool, total_steps: int, runs_dir: str, seed: int) -> float:
    result = subprocess.run(
        [sys.executable, "-m", "operant.trainer.main", "--total-steps", str(total_steps),
         "--seed", str(seed), "--runs-dir", runs_dir, "--log-format", "json", "--quiet",
         "--set", f"train.publish_metrics={'true' if publish else 'false'}"],
        capture_output=True, text=True, check=True, env=dict(os.environ))
    summary = json.loads(result.stdout.strip().splitlines()[-1])["summary"]
    return float(summary["sps_mean"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--total-steps", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    on, off = [], []
    with tempfile.TemporaryDirectory() as runs_dir:
        for round_index in range(args.rounds):
            order = (True, False) if round_index % 2 == 0 else (False, True)
            for publish in order:
                (on if publish else off).append(run(publish, args.total_steps, runs_dir, args.seed))
            print(f"round {round_index + 1}: on {on[-1]:,.0f} steps/s, off {off[-1]:,.0f} steps/s",
                  flush=True)
    median_on, median_off = statistics.median(on), statistics.median(off)
    print(f"median: publication on {median_on:,.0f} steps/s, off {median_off:,.0f} steps/s, "
          f"on/off {median_on / median_off:.4f} ({(median_on / median_off - 1) * 100:+.2f}%)")


if __name__ == "__main__":
    main()

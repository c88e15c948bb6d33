#!/usr/bin/env python3
"""Operant against its peers in one run, one benchmark after another under the bench lock:
`operant bench trainer` with the default and the throughput CartPole configs (5 seeds each),
then the peers (benchmarks/peers/run_peers.sh: stable-baselines3 default and rl-zoo,
PufferLib 3.0 shipped / serial / serial-nolstm; 3 seeds each, in their own venvs), then the
table of median steps/s and the ratios docs/benchmarks.md quotes.

    python benchmarks/peers/side_by_side.py [--out DIR] [--seeds-peers "1 2 3"]

run_peers.sh's environment passes through: ONLY=pufferlib leaves SB3 out, PEERS_VENV picks
where the peers' venvs are.

The peers train a short budget here (SB3 20K steps, PufferLib 1M with the LSTM and 5M
without): enough for a steady steps/s, which is what is compared; their time to solve comes
from the full-budget runs in benchmarks/records/peers.jsonl. Takes about 6 minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOCK = os.environ.get("BENCH_LOCK", "/tmp/operant-bench.lock")
OURS = {
    "operant default": ROOT / "configs" / "CartPole-v1.toml",
    "operant throughput": ROOT / "configs" / "throughput" / "CartPole-v1.toml",
}
PEER_BUDGETS = {
    "SB3_DEFAULT_STEPS": "20000",
    "SB3_ZOO_STEPS": "20000",
    "PUFFER_LSTM_STEPS": "1000000",
    "PUFFER_MLP_STEPS": "5000000",
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="/tmp/operant-side-by-side")
    parser.add_argument("--seeds-peers", default="1 2 3")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    medians: dict[str, float] = {}
    for name, config in OURS.items():
        record_path = out / f"{name.split()[1]}.json"
        subprocess.run(
            [
                "flock",
                LOCK,
                sys.executable,
                "-m",
                "operant",
                "bench",
                "trainer",
                "--config",
                str(config),
                "--seeds",
                "1,2,3,4,5",
                "--output",
                str(record_path),
            ],
            check=True,
        )
        record = json.loads(record_path.read_text())
        medians[name] = record["summary"]["sps"]["median"]
        bound = record.get("bound", {})
        arithmetic = record.get("arithmetic_bound", {})
        print(
            f"{name}: {medians[name]:,.0f} steps/s, solved {record['summary']['solved']}, "
            f"{bound.get('fraction', float('nan')):.0%} of the overhead bound, "
            f"{arithmetic.get('fraction', float('nan')):.1%} of the arithmetic bound",
            flush=True,
        )
    peers_path = out / "peers.jsonl"
    peers_path.unlink(missing_ok=True)
    subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "peers" / "run_peers.sh"), str(peers_path)],
        check=True,
        env={**os.environ, **PEER_BUDGETS, "SEEDS": args.seeds_peers, "BENCH_LOCK": LOCK},
    )
    by_peer: dict[str, list[float]] = {}
    for line in peers_path.read_text().splitlines():
        row = json.loads(line)
        if row.get("sps"):
            by_peer.setdefault(f"{row['peer']} {row['config']}", []).append(row["sps"])
    for name, values in by_peer.items():
        medians[name] = statistics.median(values)
    print("\n| trainer | median steps/s | operant default / it | operant throughput / it |")
    print("|---|---:|---:|---:|")
    for name, value in medians.items():
        print(
            f"| {name} | {value:,.0f} | {medians['operant default'] / value:.2f}x | "
            f"{medians['operant throughput'] / value:.2f}x |"
        )
    (out / "summary.json").write_text(json.dumps(medians, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

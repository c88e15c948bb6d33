#!/usr/bin/env python3
"""Two installs of Operant side by side in one run, rounds alternating (A B, B A, A B, ...),
so that the drift of a shared VM's speed falls on both alike.

    python benchmarks/compare_commits.py BASE_VENV NEW_VENV [--rounds 5] [--out DIR]
    python benchmarks/compare_commits.py BASE_VENV NEW_VENV --minatar Breakout [--rounds 5]

Each venv is an install of one commit (`git worktree add DIR COMMIT`, then a venv in it with
`pip install torch==2.13.0` and `pip install -e .`). Per round and install: `operant bench
trainer` with the default and the throughput CartPole configs (seeds 1,2,3, no compute bound,
the configs' targets: a run stops once solved), and `operant bench env_only` of the native
CartPole kernel at N = 4096. Reported: each install's median steps/s over rounds, and the
median of the per-round ratios NEW / BASE (a ratio above 1 means NEW is faster).
`--minatar GAME` compares the CNN trainer instead: `operant bench trainer --config
configs/minatar/GAME.toml --seeds 1,2,3 --total-steps 81920` per round and install, with its
bounds, and reports each run's share of the arithmetic bound beside its steps/s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCHES = {
    "trainer default": [
        "trainer",
        "--config",
        "configs/CartPole-v1.toml",
        "--seeds",
        "1,2,3",
        "--no-bound",
    ],
    "trainer throughput": [
        "trainer",
        "--config",
        "configs/throughput/CartPole-v1.toml",
        "--seeds",
        "1,2,3",
        "--no-bound",
    ],
    "env_only CartPole N=4096": [
        "env_only",
        "--env",
        "CartPole-v1",
        "--impl",
        "native",
        "--num-envs",
        "4096",
        "--rounds",
        "3",
        "--no-gymnasium",
    ],
}


def _minatar(game: str) -> dict[str, list[str]]:
    config = f"configs/minatar/{game}.toml"
    args = ["trainer", "--config", config, "--seeds", "1,2,3", "--total-steps", "81920"]
    return {f"trainer {game}": args}


def _arithmetic_share(record: dict) -> float | None:
    bound = record.get("arithmetic_bound") or {}
    return bound.get("fraction")


def _median_sps(record: dict) -> float:
    if record["mode"] == "trainer":
        return float(record["summary"]["sps"]["median"])
    return float(record["results"][0]["native"]["median"])


def _run(venv: Path, bench: list[str], out: Path) -> tuple[float, float | None]:
    subprocess.run(
        [str(venv / "bin" / "operant"), "bench", *bench, "--output", str(out)],
        check=True,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
    )
    record = json.loads(out.read_text())
    return _median_sps(record), _arithmetic_share(record)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("/tmp/operant-compare"))
    parser.add_argument("--minatar", metavar="GAME", help="compare the CNN trainer on GAME")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    benches = _minatar(args.minatar) if args.minatar else BENCHES
    results = {name: {"base": [], "new": []} for name in benches}
    shares: dict[str, dict[str, list]] = {name: {"base": [], "new": []} for name in benches}
    for round_index in range(args.rounds):
        order = ("base", "new") if round_index % 2 == 0 else ("new", "base")
        for name, bench in benches.items():
            for side in order:
                venv = args.base if side == "base" else args.new
                out = args.out / f"{name.replace(' ', '_')}-{side}-{round_index}.json"
                sps, share = _run(venv, bench, out)
                results[name][side].append(sps)
                shares[name][side].append(share)
        print(f"round {round_index + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    summary = {}
    for name, sides in results.items():
        ratios = [new / base for base, new in zip(sides["base"], sides["new"])]
        summary[name] = {
            "base_median": statistics.median(sides["base"]),
            "new_median": statistics.median(sides["new"]),
            "ratio_median": round(statistics.median(ratios), 4),
            "ratios": [round(r, 4) for r in ratios],
            **sides,
        }
        if args.minatar:
            summary[name]["arithmetic_bound_share"] = {
                side: {"median": statistics.median(values), "runs": values}
                for side, values in shares[name].items()
            }
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Weak scaling of ranks on one machine (issue 37 item 5; docs/distributed.md, "When ranks
pay"): in each round, alternating, one rank with 64 envs, then 2 ranks with 64 envs each
summing through shared memory (`train.dist_shared_memory`, the default), then the same
through gloo, and optionally two independent single-process trainers at once (no collectives
at all: what the machine's cores give, the ceiling for any ranks).

    python benchmarks/bench_ranks.py --config configs/minatar/Breakout.toml [--rounds 5]
        [--updates 40] [--ceiling] [--set KEY=VALUE ...]

Each run trains `--updates` updates of its config's batch per rank (64 envs x ppo.num_steps);
its steps/s is the median of the per-update steps/s after the first five updates (start-up,
the latency probe and the first allocations left out). Prints each round and one JSON line:
the per-round ratios to one rank and their medians.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
from typing import Any

ENVS_PER_RANK = 64
WARM_UPDATES = 5


def _train(args: Any, seed: int, ranks: int, shared: bool, runs: str) -> list[str]:
    command = ["operant-train", "--config", args.config, "--seed", str(seed)]
    if ranks > 1:
        command += ["--nproc-per-node", str(ranks)]
    settings = [
        f"env.num_envs={ENVS_PER_RANK * ranks}",
        f"train.dist_shared_memory={'true' if shared else 'false'}",
        "train.target_return=1e9",  # never stop early: every run trains its updates
        *args.set,
    ]
    command += ["--runs-dir", runs, "--log-format", "json"]
    for setting in settings:
        command += ["--set", setting]
    return command


def _steps_per_s(output: str) -> float:
    rows = [json.loads(line) for line in output.splitlines() if line.startswith('{"update"')]
    return statistics.median(row["sps"] for row in rows[WARM_UPDATES:])


def _budget(args: Any, ranks: int) -> list[str]:
    from operant.trainer.config import load_config

    num_steps = load_config(args.config, args.set, {}).ppo.num_steps
    return ["--total-steps", str(ENVS_PER_RANK * ranks * num_steps * args.updates)]


def _run(args: Any, ranks: int, shared: bool, runs: str) -> float:
    done = subprocess.run(
        _train(args, 1, ranks, shared, runs) + _budget(args, ranks),
        capture_output=True,
        text=True,
        check=True,
    )
    return _steps_per_s(done.stdout)


def _pair(args: Any, runs: str) -> float:
    """Two independent one-rank trainers at once: their summed steps/s."""
    started = [
        subprocess.Popen(
            _train(args, seed, 1, True, runs) + _budget(args, 1), stdout=subprocess.PIPE, text=True
        )
        for seed in (1, 2)
    ]
    return sum(_steps_per_s(process.communicate()[0]) for process in started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--updates", type=int, default=40)
    parser.add_argument("--ceiling", action="store_true", help="also two lone trainers at once")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    ratios: dict[str, list[float]] = {"shared memory": [], "gloo": [], "two lone trainers": []}
    with tempfile.TemporaryDirectory(prefix="bench-ranks-") as runs:
        for round_ in range(args.rounds):
            one = _run(args, 1, True, runs)
            sides = {"shared memory": _run(args, 2, True, runs), "gloo": _run(args, 2, False, runs)}
            if args.ceiling:
                sides["two lone trainers"] = _pair(args, runs)
            shown = []
            for side, value in sides.items():
                ratios[side].append(value / one)
                shown.append(f"{side} {value:,.0f} ({value / one:.3f}x)")
            print(f"round {round_ + 1}: 1 rank {one:,.0f}  2 ranks: {'  '.join(shown)}", flush=True)
    medians = {side: round(statistics.median(r), 3) for side, r in ratios.items() if r}
    summary = {"config": args.config, "set": args.set, "ratios": ratios, "medians": medians}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()

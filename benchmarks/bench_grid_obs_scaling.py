"""How Grid-v0's observation phase scales: ns per agent-step against agents and window, from
the kernel's own phase timing (profile=True), beside MettaGrid's (METTAGRID_PROFILING=1).

    flock /tmp/operant-bench.lock python benchmarks/bench_grid_obs_scaling.py \
        [--rounds 5] [--round-seconds 0.5] [--plot docs/img/grid_obs_scaling.png] \
        [--record benchmarks/records/grid_obs_scaling-DATE.json]
    python benchmarks/bench_grid_obs_scaling.py --from-record RECORD --plot PNG   # replot

The configuration is bench_grid_vs_mettagrid.py's (40 x 40, wall border, 64 walls inside,
200 tokens, random noop + moves, one world), swept over agents (5, 10, 20, 50, 100 at window
11) and window (5 .. 15 at 20 agents). Each point is timed with Operant's two encoders
(sparse: the default, occupancy bits; scan: every window cell) and MettaGrid's one env
(skipped without its venv, or with --no-mettagrid). Each round visits every point and
candidate once, in a rotating order; a point's figure is the median of its rounds of
observation-phase ns divided by the agents stepped. Everything is pinned to one core.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_grid_vs_mettagrid import (  # noqa: E402
    DEFAULT_PEER_PYTHON,
    OperantBench,
    PeerBench,
    alternate,
    grid_options,
    machine,
    peer_args,
    peer_python,
)

AGENTS = (5, 10, 20, 50, 100)
WINDOWS = (5, 7, 9, 11, 13, 15)


def points() -> list[tuple[int, int]]:
    """(agents, window): the agent sweep at window 11, then the window sweep at 20 agents."""
    sweep = [(agents, 11) for agents in AGENTS] + [(20, window) for window in WINDOWS]
    return list(dict.fromkeys(sweep))


def measure(args: argparse.Namespace, python: str | None) -> dict[str, Any]:
    timing = {"round_seconds": args.round_seconds, "warmup_seconds": args.warmup_seconds}
    candidates: dict[str, Any] = {}
    for agents, window in points():
        options = grid_options(agents, window=window, tokens=args.tokens)
        for encoder in ("sparse", "scan"):
            candidates[f"operant_{encoder}/{agents}/{window}"] = OperantBench(
                args.num_envs, options, profile=True, encoder=encoder, **timing
            )
        if python is not None:
            candidates[f"mettagrid/{agents}/{window}"] = PeerBench(
                python,
                agents,
                "sim",
                [
                    *peer_args(window, args.tokens, args.round_seconds, args.warmup_seconds),
                    "--profile",
                ],
            )
    alternate(candidates, args.rounds)
    results: list[dict[str, Any]] = []
    for agents, window in points():
        row: dict[str, Any] = {"agents": agents, "window": window}
        for side in ("operant_sparse", "operant_scan", "mettagrid"):
            bench = candidates.get(f"{side}/{agents}/{window}")
            if bench is None:
                continue
            per_agent = [phases["observations"] / agents for phases in bench.round_phases]
            row[side] = {
                "obs_ns_per_agent_step": round(statistics.median(per_agent), 1),
                "rounds": [round(value, 1) for value in per_agent],
            }
            if isinstance(bench, OperantBench):
                row[side]["tokens_used_mean"] = bench.tokens_used_mean()
            else:
                row[side]["tokens_used_mean"] = bench.close()["tokens_used_mean"]
        results.append(row)
        print_row(row)
    return {"points": results}


def print_row(row: dict[str, Any]) -> None:
    parts = [f"agents={row['agents']:>3} window={row['window']:>2}"]
    for side in ("operant_sparse", "operant_scan", "mettagrid"):
        if side in row:
            value = row[side]
            parts.append(
                f"{side} {value['obs_ns_per_agent_step']:9,.1f} ns "
                f"({value['tokens_used_mean']:.1f} tokens)"
            )
    print("  ".join(parts), flush=True)


def plot(record: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = record["points"]
    figure, axes = plt.subplots(1, 2, figsize=(11, 4.6), sharey=True)
    sweeps = (
        ("agents", [row for row in rows if row["window"] == 11], "agents (window 11)"),
        ("window", [row for row in rows if row["agents"] == 20], "window (20 agents)"),
    )
    styles = {
        "operant_sparse": ("Operant, sparse encoder (default)", "o-"),
        "operant_scan": ("Operant, scan encoder", "s--"),
        "mettagrid": ("MettaGrid 0.26.22", "^-"),
    }
    for axis, (key, sweep, label) in zip(axes, sweeps):
        sweep = sorted(sweep, key=lambda row: row[key])
        for side, (name, style) in styles.items():
            if all(side in row for row in sweep):
                axis.plot(
                    [row[key] for row in sweep],
                    [row[side]["obs_ns_per_agent_step"] for row in sweep],
                    style,
                    label=name,
                )
        axis.set_xlabel(label)
        axis.set_yscale("log")
        axis.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("observation phase, ns per agent-step")
    handles, labels = axes[0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="lower center", ncol=len(labels), frameon=False)
    figure.suptitle(
        "Observation cost, one world on a 40 x 40 map, one core "
        f"({record['machine']['cpu']}, {record['machine']['date']})",
        fontsize=10,
    )
    figure.tight_layout(rect=(0, 0.07, 1, 1))
    figure.savefig(path, dpi=110)
    print(f"plot: {path}")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--round-seconds", type=float, default=0.5)
    parser.add_argument("--warmup-seconds", type=float, default=0.5)
    parser.add_argument("--num-envs", type=int, default=1, help="Operant worlds per candidate")
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--mettagrid-python", default=DEFAULT_PEER_PYTHON)
    parser.add_argument("--no-mettagrid", action="store_true")
    parser.add_argument("--cpu", type=int, default=None, help="core to pin to (default: last)")
    parser.add_argument("--record", default=None)
    parser.add_argument("--plot", default=None)
    parser.add_argument("--from-record", default=None, help="plot this record, measure nothing")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.from_record:
        record = json.loads(Path(args.from_record).read_text())
        plot(record, args.plot or "grid_obs_scaling.png")
        return record
    os.sched_setaffinity(0, {max(os.sched_getaffinity(0)) if args.cpu is None else args.cpu})
    python = None if args.no_mettagrid else peer_python(args.mettagrid_python)
    if python is None:
        print("MettaGrid skipped", flush=True)
    started = time.perf_counter()
    record: dict[str, Any] = {
        "machine": machine(),
        "command": "python benchmarks/bench_grid_obs_scaling.py "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "config": {
            "map": "40 x 40, 1-cell wall border, 64 walls inside (seed 42)",
            "tokens": args.tokens,
            "operant_worlds": args.num_envs,
            "rounds": args.rounds,
            "round_seconds": args.round_seconds,
        },
        **measure(args, python),
    }
    record["seconds"] = round(time.perf_counter() - started, 1)
    if args.record:
        Path(args.record).write_text(json.dumps(record, indent=2) + "\n")
        print(f"record: {args.record}")
    if args.plot:
        plot(record, args.plot)
    return record


if __name__ == "__main__":
    main()

"""Grid-v0's kernel against MettaGrid, env-only, random move + noop actions, one core, in one
run with alternating rounds (docs/journal/issue-17-grid-vs-mettagrid.md).

    flock /tmp/operant-bench.lock python benchmarks/bench_grid_vs_mettagrid.py \
        [--agents 20,100] [--batch 64] [--rounds 7] [--profile] [--profiling-cost] \
        [--record benchmarks/records/grid_vs_mettagrid-DATE.json]

The configuration is MettaGrid's env-only benchmark's (its benchmarks/perf/perf_benchmark.py):
a 40 x 40 map with a 1-cell wall border and int(40^2 x 0.04) = 64 walls inside, 11 x 11
observation window, a budget of 200 observation tokens per agent on both sides, no resources,
episodes that never end within the measurement (MettaGrid max_steps 0; Operant
max_episode_steps 10^9), actions uniformly random over noop + the 4 cardinal moves (Operant's
actions 0..4, MettaGrid's noop + move_{north,south,west,east}), a fresh action set every step
from a ring of pre-drawn ones (its columns rolled by one at every lap). Operant's map is an
ASCII layout built the same way (border, 64 walls drawn inside from seed 42); its agents are
drawn at reset.

Each round visits every candidate once, in an order rotated round by round: Operant one
world (N=1, `step_bound()`), Operant `--batch` worlds of the same config in one call, and
MettaGrid one env in its own venv (benchmarks/peers/mettagrid_grid.py --serve, a subprocess
that waits on a pipe while the others run) at its binding's step ("sim") and through
MettaGridPufferEnv.step ("puffer", what its perf_benchmark.py times). Everything is pinned to
one core. Rates are agent-steps/s; ratios are medians of per-round ratios.

--profile adds a pass with per-phase timing on both sides (Operant profile=True, MettaGrid
METTAGRID_PROFILING=1), rounds alternating too, printed side by side in ns per step.
--profiling-cost times Operant with profile=False and profile=True alternately.
Without the peer venv (--mettagrid-python) the MettaGrid half is skipped and said so.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
PEER_SCRIPT = HERE / "peers" / "mettagrid_grid.py"
DEFAULT_PEER_PYTHON = "/work/peers/mettagrid-venv/bin/python"
MOVE_AND_NOOP = 5
"""Operant's actions 0 (noop) .. 4 (move north/east/south/west)."""
RING = 1024
"""Action sets pre-drawn per candidate (fewer for large batches: RING_VALUES in all). At every
wrap the ring's columns roll by one, so no agent replays the same sequence: a replayed one
would drift by the same vector every lap and pin the agents against walls."""
RING_VALUES = 2**21
NEVER = 10**9
OPERANT_PHASES = ("reset", "regrowth", "actions", "rewards", "observations", "truncation")
METTAGRID_PHASES = (
    "reset",
    "events",
    "actions",
    "on_tick",
    "aoe",
    "observations",
    "rewards",
    "truncation",
)


def matched_layout(map_size: int = 40, density: float = 0.04, seed: int = 42) -> str:
    """MettaGrid's benchmark map as an Operant layout: a 1-cell wall border and
    int(map_size^2 x density) walls on inner cells drawn without replacement."""
    rng = np.random.default_rng(seed)
    cells = np.full((map_size, map_size), ".")
    cells[0, :] = cells[-1, :] = cells[:, 0] = cells[:, -1] = "#"
    inner = (map_size - 2) ** 2
    for index in rng.choice(inner, int(map_size * map_size * density), replace=False):
        cells[1 + index // (map_size - 2), 1 + index % (map_size - 2)] = "#"
    return "\n".join("".join(row) for row in cells)


def grid_options(
    agents: int,
    map_size: int = 40,
    density: float = 0.04,
    window: int = 11,
    tokens: int = 200,
    seed: int = 42,
) -> dict[str, Any]:
    """GridVectorEnv options for the matched configuration."""
    return {
        "agents": agents,
        "layout": matched_layout(map_size, density, seed),
        "resource_density": 0.0,
        "window": window,
        "tokens": tokens,
        "max_episode_steps": NEVER,
    }


class OperantBench:
    """`num_envs` worlds of one config, a ring of random actions 0..4, timed rounds."""

    def __init__(
        self,
        num_envs: int,
        options: dict[str, Any],
        *,
        profile: bool = False,
        encoder: str = "sparse",
        round_seconds: float = 1.0,
        warmup_seconds: float = 1.0,
        seed: int = 0,
    ):
        from operant.envs.grid.vector import GridVectorEnv

        self.env = GridVectorEnv(num_envs, copy=False, profile=profile, encoder=encoder, **options)
        self.env.reset(seed=seed)
        rows = self.env.num_envs
        length = max(64, min(RING, RING_VALUES // rows))
        self.ring = np.random.default_rng(seed).integers(0, MOVE_AND_NOOP, size=(length, rows))
        self.index = 0
        self.rows = rows
        self.rates: list[float] = []
        self.round_phases: list[dict[str, float]] = []
        """Each round's ns per step of one world, by phase (zeros unless profiling)."""
        self.round_tokens: list[float] = []
        self.measured_steps = 0
        self.phase_ns = dict.fromkeys(OPERANT_PHASES, 0)
        self.calls = self._calibrate(warmup_seconds, round_seconds)

    def _steps(self, count: int) -> None:
        ring, actions, step, index = self.ring, self.env.actions, self.env.step_bound, self.index
        length = len(ring)
        for _ in range(count):
            actions[:] = ring[index]
            step()
            index += 1
            if index == length:
                ring, index = np.roll(ring, 1, axis=1), 0
        self.ring, self.index = ring, index

    def _calibrate(self, warmup_seconds: float, round_seconds: float) -> int:
        started, calls = time.perf_counter(), 0
        while time.perf_counter() - started < warmup_seconds or calls == 0:
            self._steps(10)
            calls += 10
        per_step = (time.perf_counter() - started) / calls
        return max(10, int(round_seconds / per_step))

    def round(self) -> float:
        before = self.env.step_timing
        started = time.perf_counter()
        self._steps(self.calls)
        rate = self.calls * self.rows / (time.perf_counter() - started)
        after = self.env.step_timing
        world_steps = self.calls * (self.rows // self.env.layout.agents_per_env)
        for phase in OPERANT_PHASES:
            self.phase_ns[phase] += after[phase] - before[phase]
        self.round_phases.append(
            {phase: (after[phase] - before[phase]) / world_steps for phase in OPERANT_PHASES}
        )
        self.round_tokens.append(float((self.env.obs[:, :, 0] != 0xFF).sum(1).mean()))
        self.measured_steps += self.calls
        self.rates.append(rate)
        return rate

    def tokens_used_mean(self) -> float:
        """Tokens an observation row holds (padding excluded), averaged over the rows at the
        end of every round."""
        return round(statistics.mean(self.round_tokens), 2)

    def phase_ns_per_step(self) -> dict[str, float]:
        """Per phase, ns per step of one world (a batch's step divided by its worlds)."""
        worlds = self.rows // self.env.layout.agents_per_env
        steps = max(1, self.measured_steps) * worlds
        return {phase: round(ns / steps, 1) for phase, ns in self.phase_ns.items()}


def peer_python(path: str | None) -> str | None:
    """The MettaGrid venv's python, or None when it is absent."""
    if path and os.access(path, os.X_OK):
        return path
    return None


class PeerBench:
    """MettaGrid in its venv, one timed round per request (mettagrid_grid.py --serve)."""

    def __init__(self, python: str, agents: int, level: str, extra: list[str]):
        """Started with this process's CPU affinity (main pins it to one core)."""
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"}
        command = [python, str(PEER_SCRIPT), "--serve", "--agents", str(agents), "--level", level]
        self.process = subprocess.Popen(
            [*command, *extra],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd="/tmp",
            env=env,
        )
        self.meta = self._read()
        if not self.meta.get("ready"):
            raise RuntimeError(f"mettagrid peer did not start: {self.meta}")
        self.rates: list[float] = []
        self.round_phases: list[dict[str, float]] = []
        """With --profile in `extra`: each round's ns per step by phase."""

    def _read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"mettagrid peer exited with {self.process.wait()}")
        return json.loads(line)

    def round(self) -> float:
        assert self.process.stdin is not None
        self.process.stdin.write("round\n")
        self.process.stdin.flush()
        reply = self._read()
        rate = float(reply["agent_steps_per_s"])
        self.rates.append(rate)
        if "phase_ns_per_step" in reply:
            self.round_phases.append(reply["phase_ns_per_step"])
        return rate

    def close(self) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write("quit\n")
        self.process.stdin.flush()
        summary = self._read()
        self.process.wait()
        return summary


def summarize(values: list[float]) -> dict[str, Any]:
    return {
        "rounds": [round(value, 1) for value in values],
        "median": round(statistics.median(values), 1),
        "cv": round(statistics.pstdev(values) / statistics.mean(values), 4),
    }


def ratio(ours: list[float], theirs: list[float], digits: int = 2) -> dict[str, Any]:
    """Median of the per-round ratios, and their range."""
    per_round = [a / b for a, b in zip(ours, theirs)]
    return {
        "median": round(statistics.median(per_round), digits),
        "min": round(min(per_round), digits),
        "max": round(max(per_round), digits),
    }


def alternate(candidates: dict[str, Any], rounds: int) -> None:
    """`rounds` rounds, each visiting every candidate once; the order rotates by one a round."""
    names = list(candidates)
    for number in range(rounds):
        shift = number % len(names)
        for name in names[shift:] + names[:shift]:
            candidates[name].round()


def side_by_side(args: argparse.Namespace, python: str | None) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for agents in args.agents:
        options = grid_options(agents, window=args.window, tokens=args.tokens)
        timing = {"round_seconds": args.round_seconds, "warmup_seconds": args.warmup_seconds}
        candidates: dict[str, Any] = {
            "operant_n1": OperantBench(1, options, **timing),
            f"operant_n{args.batch}": OperantBench(args.batch, options, **timing),
        }
        peer_args = _peer_args(args)
        if python is not None:
            for level in args.levels:
                candidates[f"mettagrid_{level}"] = PeerBench(python, agents, level, peer_args)
        alternate(candidates, args.rounds)
        row: dict[str, Any] = {"agents": agents}
        for name, bench in candidates.items():
            row[name] = summarize(bench.rates)
            if isinstance(bench, OperantBench):
                row[name]["tokens_used_mean"] = bench.tokens_used_mean()
            else:
                summary = bench.close()
                row[name]["tokens_used_mean"] = summary["tokens_used_mean"]
                row[name]["meta"] = {
                    key: summary[key] for key in ("version", "level", "num_tokens", "num_actions")
                }
        if python is None:
            row["mettagrid"] = "skipped: no MettaGrid venv (benchmarks/peers/setup_mettagrid.sh)"
        for name in [key for key in candidates if key.startswith("operant")]:
            for level in args.levels if python is not None else []:
                row[f"{name}_vs_mettagrid_{level}"] = ratio(
                    candidates[name].rates, candidates[f"mettagrid_{level}"].rates
                )
        results[str(agents)] = row
        print_row(row, args)
    return results


def profiled(args: argparse.Namespace, python: str | None) -> dict[str, Any]:
    """Per-phase ns per step, both sides, one world each, rounds alternating."""
    results: dict[str, Any] = {}
    for agents in args.agents:
        options = grid_options(agents, window=args.window, tokens=args.tokens)
        ours = OperantBench(
            1,
            options,
            profile=True,
            round_seconds=args.round_seconds,
            warmup_seconds=args.warmup_seconds,
        )
        candidates: dict[str, Any] = {"operant_n1": ours}
        if python is not None:
            candidates["mettagrid_sim"] = PeerBench(
                python, agents, "sim", [*_peer_args(args), "--profile"]
            )
        alternate(candidates, args.rounds)
        row: dict[str, Any] = {
            "agents": agents,
            "operant": {
                "phase_ns_per_step": ours.phase_ns_per_step(),
                "wall_ns_per_step": round(agents * 1e9 / statistics.median(ours.rates), 1),
            },
        }
        if python is not None:
            theirs = candidates["mettagrid_sim"]
            summary = theirs.close()
            row["mettagrid"] = {
                "phase_ns_per_step": summary["phase_ns_per_step"],
                "wall_ns_per_step": round(agents * 1e9 / statistics.median(theirs.rates), 1),
            }
        results[str(agents)] = row
        print_profile(row)
    return results


def profiling_cost(args: argparse.Namespace) -> dict[str, Any]:
    """Operant with profile off and on, alternating; cost = 1 - median(on / off)."""
    results: dict[str, Any] = {}
    for agents in args.agents:
        options = grid_options(agents, window=args.window, tokens=args.tokens)
        for num_envs in (1, args.batch):
            timing = {"round_seconds": args.round_seconds, "warmup_seconds": args.warmup_seconds}
            off = OperantBench(num_envs, options, profile=False, **timing)
            on = OperantBench(num_envs, options, profile=True, **timing)
            alternate({"off": off, "on": on}, args.rounds)
            per_round = ratio(on.rates, off.rates, digits=3)
            key = f"agents{agents}_n{num_envs}"
            results[key] = {
                "off": summarize(off.rates),
                "on": summarize(on.rates),
                "on_vs_off": per_round,
                "cost": round(1 - per_round["median"], 3),
            }
            print(
                f"profiling cost  agents={agents:>3} N={num_envs:>3}: off "
                f"{statistics.median(off.rates) / 1e6:6.2f}M  on "
                f"{statistics.median(on.rates) / 1e6:6.2f}M agent-steps/s  on/off "
                f"{per_round['median']:.3f} ({per_round['min']:.3f}-{per_round['max']:.3f})",
                flush=True,
            )
    return results


def _peer_args(args: argparse.Namespace) -> list[str]:
    return peer_args(
        args.window, args.tokens, args.round_seconds, args.warmup_seconds, args.mettagrid_directions
    )


def peer_args(
    window: int, tokens: int, round_seconds: float, warmup_seconds: float, directions: int = 4
) -> list[str]:
    """benchmarks/peers/mettagrid_grid.py's options for one configuration."""
    return [
        "--window",
        str(window),
        "--tokens",
        str(tokens),
        "--round-seconds",
        str(round_seconds),
        "--warmup-seconds",
        str(warmup_seconds),
        "--directions",
        str(directions),
    ]


def print_row(row: dict[str, Any], args: argparse.Namespace) -> None:
    parts = [f"agents={row['agents']:>3}"]
    for name, value in row.items():
        if isinstance(value, dict) and "median" in value and "rounds" in value:
            parts.append(f"{name} {value['median'] / 1e6:7.3f}M (cv {value['cv']:.1%})")
    print("  ".join(parts), flush=True)
    for name, value in row.items():
        if "_vs_" in name:
            print(
                f"    {name}: {value['median']:.2f}x ({value['min']:.2f}-{value['max']:.2f})",
                flush=True,
            )


def print_profile(row: dict[str, Any]) -> None:
    agents = row["agents"]
    ours = row["operant"]["phase_ns_per_step"]
    theirs = row.get("mettagrid", {}).get("phase_ns_per_step", {})
    print(f"\nphase ns per step, one world of {agents} agents    Operant    MettaGrid")
    for phase in dict.fromkeys([*METTAGRID_PHASES, *OPERANT_PHASES]):
        mine = f"{ours[phase]:10,.0f}" if phase in ours else f"{'-':>10}"
        peer = f"{theirs[phase]:12,.0f}" if phase in theirs else f"{'-':>12}"
        print(f"  {phase:<40}{mine} {peer}")
    for side, label in (("operant", "Operant"), ("mettagrid", "MettaGrid")):
        if side in row:
            phases = sum(row[side]["phase_ns_per_step"].values())
            wall = row[side]["wall_ns_per_step"]
            print(
                f"  {label}: phases {phases:,.0f} ns, wall {wall:,.0f} ns per step "
                f"(outside the phases: {wall - phases:,.0f} ns)"
            )
    print(flush=True)


def machine() -> dict[str, Any]:
    from operant.trainer.bench.measure import cpu_name

    return {"cpu": cpu_name(), "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d")}


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", default="20,100", help="comma-separated agent counts")
    parser.add_argument("--batch", type=int, default=64, help="worlds in the batched candidate")
    parser.add_argument("--window", type=int, default=11)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--round-seconds", type=float, default=1.0)
    parser.add_argument("--warmup-seconds", type=float, default=1.0)
    parser.add_argument("--levels", default="sim,puffer", help="MettaGrid levels: sim,puffer")
    parser.add_argument("--mettagrid-python", default=DEFAULT_PEER_PYTHON)
    parser.add_argument(
        "--mettagrid-directions",
        type=int,
        choices=(4, 8),
        default=4,
        help="MettaGrid's moves: 4 (as Operant's) or 8 (perf_benchmark.py's preset)",
    )
    parser.add_argument("--cpu", type=int, default=None, help="core to pin to (default: last)")
    parser.add_argument("--no-throughput", action="store_true", help="skip the side-by-side")
    parser.add_argument("--profile", action="store_true", help="phase breakdowns side by side")
    parser.add_argument("--profiling-cost", action="store_true", help="Operant profile off/on")
    parser.add_argument("--record", default=None, help="write the JSON record here")
    args = parser.parse_args(argv)
    args.agents = [int(part) for part in str(args.agents).split(",") if part]
    args.levels = [part for part in args.levels.split(",") if part]
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse(sys.argv[1:] if argv is None else argv)
    if args.cpu is None:
        args.cpu = max(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {args.cpu})
    python = peer_python(args.mettagrid_python)
    if python is None:
        print(f"MettaGrid half skipped: no python at {args.mettagrid_python}", flush=True)
    record: dict[str, Any] = {
        "machine": machine(),
        "command": "python benchmarks/bench_grid_vs_mettagrid.py "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "config": {
            "map": "40 x 40, 1-cell wall border, 64 walls inside (seed 42)",
            "window": args.window,
            "tokens": args.tokens,
            "actions": "uniform over noop + 4 cardinal moves, a fresh set every step",
            "mettagrid_directions": args.mettagrid_directions,
            "episodes": "never end within the measurement",
            "rounds": args.rounds,
            "round_seconds": args.round_seconds,
            "batch": args.batch,
            "cpu_pinned": args.cpu,
        },
        "mettagrid": "present" if python else "skipped",
    }
    if not args.no_throughput:
        record["throughput"] = side_by_side(args, python)
    if args.profile:
        record["profile"] = profiled(args, python)
    if args.profiling_cost:
        record["profiling_cost"] = profiling_cost(args)
    if args.record:
        Path(args.record).write_text(json.dumps(record, indent=2) + "\n")
        print(f"record: {args.record}")
    return record


if __name__ == "__main__":
    main()

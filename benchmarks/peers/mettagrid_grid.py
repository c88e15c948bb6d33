"""MettaGrid's side of benchmarks/bench_grid_vs_mettagrid.py: one MettaGrid env, env-only,
random actions, agent-steps/s per timed round. Runs in the MettaGrid peer venv
(benchmarks/peers/setup_mettagrid.sh), never imports Operant.

    /work/peers/mettagrid-venv/bin/python benchmarks/peers/mettagrid_grid.py --agents 20
    ... --agents 100 --profile          # also its per-phase step timing (METTAGRID_PROFILING)
    ... --serve                         # one timed round per "round" line read on stdin

The configuration is the one MettaGrid's own env-only benchmark uses
(benchmarks/perf/perf_benchmark.py, "toy" preset, in github.com/Metta-AI/mettagrid): a
`map_size` x `map_size` random map (RandomMapBuilder, seed 42) with a 1-cell wall border and
int(map_size^2 x density) walls inside, `agents` agents, an 11 x 11 observation of at most
200 tokens, actions noop + move, walls as the only objects, max_steps 0 (episodes never end).
Moves are the 4 cardinal ones by default (MoveActionConfig's default; Operant's grid has those);
`--directions 8` adds the diagonals, as perf_benchmark.py's preset does.

Levels (`--level`): "sim" steps the C++ simulation through its binding (`_c_sim.step()`, the
actions written into its bound action buffer), the counterpart of Operant's `step_bound()`;
"puffer" steps MettaGridPufferEnv.step(actions), what perf_benchmark.py times (needs the
train extra: pufferlib-core). Random actions: a ring of pre-drawn action sets, one per step,
its columns rolled by one at every lap.
Observation threads are off (METTAGRID_OBS_THREADS unset: MettaGrid's default, one thread).

Output: one JSON line, {"agent_steps_per_s": [per round], "median": ..., ...}; with --profile
also "phase_ns_per_step" (c_sim.step_timing read after every step and summed over the
measured rounds; the reads add to the loop, so a profiled run's rates are not throughput).
--serve prints a "ready" line, then one line per "round" it reads (that round's rate, and
with --profile its phases), and the summary line at "quit" (or end of input).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

PHASES = ("reset", "events", "actions", "on_tick", "aoe", "observations", "rewards", "truncation")
CARDINAL = ["north", "south", "east", "west"]
DIAGONAL = ["northeast", "northwest", "southeast", "southwest"]
RING = 1024
"""Pre-drawn action sets; at every wrap the columns roll by one, so that no agent replays its
sequence (a replayed one drifts by the same vector every lap, pinning agents to walls)."""


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=20)
    parser.add_argument("--map-size", type=int, default=40)
    parser.add_argument("--density", type=float, default=0.04)
    parser.add_argument("--window", type=int, default=11)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--directions", type=int, choices=(4, 8), default=4)
    parser.add_argument("--level", choices=("sim", "puffer"), default="sim")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--round-seconds", type=float, default=1.0)
    parser.add_argument("--warmup-seconds", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--serve", action="store_true")
    return parser.parse_args(argv)


def make_config(args: argparse.Namespace):
    from mettagrid.config.mettagrid_config import (
        ActionsConfig,
        GameConfig,
        MettaGridConfig,
        MoveActionConfig,
        NoopActionConfig,
        ObsConfig,
        WallConfig,
    )
    from mettagrid.map_builder.random_map import RandomMapBuilder

    directions = CARDINAL + (DIAGONAL if args.directions == 8 else [])
    return MettaGridConfig(
        game=GameConfig(
            num_agents=args.agents,
            max_steps=0,
            obs=ObsConfig(width=args.window, height=args.window, num_tokens=args.tokens),
            actions=ActionsConfig(
                noop=NoopActionConfig(enabled=True),
                move=MoveActionConfig(enabled=True, allowed_directions=directions),
            ),
            objects={"wall": WallConfig()},
            map_builder=RandomMapBuilder.Config(
                width=args.map_size,
                height=args.map_size,
                agents=args.agents,
                objects={"wall": int(args.map_size * args.map_size * args.density)},
                border_width=1,
                border_object="wall",
                seed=args.seed,
            ),
        )
    )


class Bench:
    """One env at the chosen level, a ring of random actions, timed rounds."""

    def __init__(self, args: argparse.Namespace):
        import numpy as np

        for name in ("METTAGRID_OBS_THREADS", "METTAGRID_OBS_VALIDATION", "METTAGRID_PROFILING"):
            os.environ.pop(name, None)
        if args.profile:
            os.environ["METTAGRID_PROFILING"] = "1"  # read when the C++ env is built
        from mettagrid.simulator import Simulator

        self.args = args
        config = make_config(args)
        if args.level == "puffer":
            from mettagrid.envs.mettagrid_puffer_env import MettaGridPufferEnv

            self.env = MettaGridPufferEnv(Simulator(), config)
            self.env.reset()
            self.c_sim = self.env.current_simulation._c_sim
        else:
            self.env = None
            self.sim = Simulator().new_simulation(config, 0)
            self.c_sim = self.sim._c_sim
        self.actions = self.c_sim.actions()  # the bound buffer the C++ step reads
        self.num_actions = len(config.game.actions.actions()) - len(
            [a for a in config.game.actions.actions() if a.name.startswith("change_vibe")]
        )
        rng = np.random.default_rng(args.seed)
        self.ring = rng.integers(0, self.num_actions, size=(RING, args.agents)).astype(
            self.actions.dtype
        )
        self.index = 0
        self.phase_ns = dict.fromkeys(PHASES, 0.0)
        self.profiled_steps = 0
        self.rates: list[float] = []
        self.round_tokens: list[float] = []
        """Tokens per observation row (padding excluded), averaged over rows, each round's end."""
        self.calls = self._calibrate(args.warmup_seconds, args.round_seconds)

    def _steps(self, count: int, profile: bool) -> None:
        import numpy as np

        ring, actions, c_sim, env, index = self.ring, self.actions, self.c_sim, self.env, self.index
        step = c_sim.step
        for _ in range(count):
            if env is not None:
                env.step(ring[index])
            else:
                actions[:] = ring[index]
                step()
            if profile:
                self._add_timing()
            index += 1
            if index == RING:
                ring, index = np.roll(ring, 1, axis=1), 0
        self.ring, self.index = ring, index

    def _add_timing(self) -> None:
        timing = self.c_sim.step_timing
        for phase in PHASES:
            self.phase_ns[phase] += getattr(timing, f"{phase}_ns")
        self.profiled_steps += 1

    def _calibrate(self, warmup_seconds: float, round_seconds: float) -> int:
        started, calls = time.perf_counter(), 0
        while time.perf_counter() - started < warmup_seconds:
            self._steps(100, False)
            calls += 100
        per_step = (time.perf_counter() - started) / calls
        return max(100, int(round_seconds / per_step))

    def round(self) -> dict:
        """One timed round: its agent-steps/s and, when profiling, its phases' ns per step."""
        before, steps_before = dict(self.phase_ns), self.profiled_steps
        started = time.perf_counter()
        self._steps(self.calls, self.args.profile)
        rate = self.calls * self.args.agents / (time.perf_counter() - started)
        self.rates.append(rate)
        observed = self.c_sim.observations()
        self.round_tokens.append(float((observed[:, :, 0] != 0xFF).sum(1).mean()))
        result: dict = {"agent_steps_per_s": round(rate, 1)}
        if self.args.profile:
            steps = self.profiled_steps - steps_before
            result["phase_ns_per_step"] = {
                phase: round((self.phase_ns[phase] - before[phase]) / steps, 1) for phase in PHASES
            }
        return result

    def meta(self) -> dict:
        from importlib.metadata import version

        return {
            "peer": "mettagrid",
            "version": version("mettagrid"),
            "level": self.args.level,
            "agents": self.args.agents,
            "map_size": self.args.map_size,
            "walls_inside": int(self.args.map_size**2 * self.args.density),
            "border": 1,
            "window": self.args.window,
            "num_tokens": self.args.tokens,
            "num_actions": self.num_actions,
            "directions": self.args.directions,
            "max_steps": 0,
            "steps_per_round": self.calls,
            "profile": self.args.profile,
        }

    def summary(self) -> dict:
        record = {
            **self.meta(),
            "agent_steps_per_s": [round(rate, 1) for rate in self.rates],
            "median": round(statistics.median(self.rates), 1) if self.rates else None,
            "tokens_used_mean": (
                round(statistics.mean(self.round_tokens), 2) if self.round_tokens else None
            ),
        }
        if self.args.profile and self.profiled_steps:
            record["profiled_steps"] = self.profiled_steps
            record["phase_ns_per_step"] = {
                phase: round(ns / self.profiled_steps, 1) for phase, ns in self.phase_ns.items()
            }
        return record


def main(argv: list[str]) -> int:
    args = parse(argv)
    bench = Bench(args)
    if not args.serve:
        for _ in range(args.rounds):
            bench.round()
        print(json.dumps(bench.summary()), flush=True)
        return 0
    print(json.dumps({"ready": True, **bench.meta()}), flush=True)
    for line in sys.stdin:
        command = line.strip()
        if command == "round":
            print(json.dumps(bench.round()), flush=True)
        elif command == "quit":
            break
    print(json.dumps(bench.summary()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

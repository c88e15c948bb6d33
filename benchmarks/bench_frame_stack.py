"""Env-only cost of env.frame_stack: k = 1 (the kernel's own buffer) against k > 1
(operant.envs.face.frame_stack: the kernel writes each frame into a ring slot), per step, in one
run.

For each game, alternating rounds k = 1, k = 4 (ring), k = 4 (live obs), k = 1, ...:
`step_bound()` of `make_env("MinAtar-<Game>-v1", N, frame_stack=k)` with a random action batch
copied in before each step from a table made beforehand (the same work in all). "ring" sets
`live_obs = False`: the stacks stay in the ring, as the trainer steps them (it copies each
step's stacks into its rollout storage instead, the bytes it copies at k = 1 without a ring);
"live" keeps `obs` the current canonical stacks after every step (k x F bytes a row). A round
runs whole batch steps for at least `--round-seconds`; a ratio is the median over rounds of
(round r's time per step) / (round r's at k = 1). Bytes moved per row and step besides the F
(= C x 100) the kernel writes: none for the ring (but the final and new stacks of rows whose
episode ended: (2k - 1) x F each), k x F for live obs.

    flock /tmp/operant-bench.lock python benchmarks/bench_frame_stack.py --json out.json
"""

from __future__ import annotations

import os

for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402

import numpy as np  # noqa: E402

from operant.envs import make_env  # noqa: E402
from operant.envs.minatar.vector import GAME_IDS  # noqa: E402

ACTION_TABLE = 64


def stepper(env_id: str, num_envs: int, depth: int, seed: int, live: bool) -> Callable[[], None]:
    env = make_env(env_id, num_envs, copy=False, frame_stack=depth)
    if depth > 1:
        env.live_obs = live
    env.reset(seed=seed)
    table = np.random.default_rng(seed).integers(
        0, env.act_spec.num_actions, (ACTION_TABLE, num_envs)
    )
    position = [0]

    def step() -> None:
        np.copyto(env.actions, table[position[0] % ACTION_TABLE])
        position[0] += 1
        env.step_bound()

    return step


def seconds_per_step(step: Callable[[], None], seconds: float) -> float:
    calls = 0
    started = time.perf_counter()
    while True:
        step()
        calls += 1
        elapsed = time.perf_counter() - started
        if elapsed >= seconds:
            return elapsed / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", nargs="+", default=list(GAME_IDS))
    parser.add_argument("--num-envs", type=int, default=1024)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--round-seconds", type=float, default=0.5)
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    results = []
    for env_id in args.games:
        steps = {
            "k1": stepper(env_id, args.num_envs, 1, 0, True),
            "ring": stepper(env_id, args.num_envs, args.depth, 0, False),
            "live": stepper(env_id, args.num_envs, args.depth, 0, True),
        }
        for step in steps.values():
            seconds_per_step(step, 0.2)  # warm-up
        times: dict[str, list[float]] = {name: [] for name in steps}
        for _ in range(args.rounds):
            for name, step in steps.items():
                times[name].append(seconds_per_step(step, args.round_seconds))
        frame = make_env(env_id, 1).obs_spec.shape[0] * 100
        row = {"env_id": env_id, "num_envs": args.num_envs, "depth": args.depth}
        for name in steps:
            ratios = [k / one for k, one in zip(times[name], times["k1"])]
            row[f"ns_per_env_step_{name}"] = statistics.median(times[name]) / args.num_envs * 1e9
            row[f"ratio_{name}"] = statistics.median(ratios)
            row[f"ratio_{name}_range"] = [min(ratios), max(ratios)]
        row["frame_bytes"] = frame
        row["live_bytes_per_row_step"] = args.depth * frame
        results.append(row)
        print(
            f"{env_id:26} k=1 {row['ns_per_env_step_k1']:7.1f} ns  k={args.depth} ring "
            f"{row['ns_per_env_step_ring']:7.1f} ns (x{row['ratio_ring']:.3f})  live "
            f"{row['ns_per_env_step_live']:7.1f} ns (x{row['ratio_live']:.3f})  F = {frame} B"
        )
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(
                {
                    "date": datetime.date.today().isoformat(),
                    "machine": platform.processor() or platform.machine(),
                    "command": "benchmarks/bench_frame_stack.py",
                    "args": vars(args),
                    "results": results,
                },
                handle,
                indent=1,
            )


if __name__ == "__main__":
    main()

"""A Python env of about 20 us a step, stepped in one process, in Operant's env workers
(`env.workers = W`) and in Gymnasium's AsyncVectorEnv with shared memory, alternating round
by round:

    flock /tmp/operant-bench.lock python benchmarks/bench_env_workers.py \
        [--step-us 20] [--num-envs 128] [--rounds 25] [--seconds 0.1]

The env is CartPole-v1 with a busy loop after each step, calibrated here (a fixed count of
loop iterations, not a clock, so a process that is descheduled does not get its work done
for free) to make a step cost `--step-us` in all (`--env Acrobot-v1` steps Gymnasium's
Acrobot instead and reports its own cost). Paths, each on its own env made before the first
round and stepped with the same random actions:

- `in-process`: the reference impl (`env.workers = 1`, Gymnasium's SyncVectorEnv), N envs;
- `workers W`: Operant's WorkerVectorEnv, N envs over W = 1, 2, 4 processes, and one env per
  worker (N = W), as AsyncVectorEnv has;
- `async W`: gymnasium.vector.AsyncVectorEnv(shared_memory=True, copy=False), W processes of
  one env each (its only layout), W = 2, 4.

Prints one JSON line: the env's cost per step; each path's median env steps per second, and
the CPU time a batch step costs this process (the trainer's core, in training) and the
worker processes (all of them); ratios
(workers over in-process at the same N, workers over async at the same W and N); and the
machine's load and free cores before and after, since other processes decide what W
processes can get out of 2 cores.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from typing import Any

import gymnasium
import numpy as np
from gymnasium.envs.classic_control import CartPoleEnv

BUSY_ID = "BusyCartPole-v0"
SPIN_VARIABLE = "OPERANT_BENCH_BUSY_ITERATIONS"


class BusyCartPole(CartPoleEnv):
    """CartPole that also counts to `iterations` on every step (a Python env's own work)."""

    def __init__(self, iterations: int = 0, **kwargs: Any):
        super().__init__(**kwargs)
        self.iterations = iterations

    def step(self, action: Any) -> Any:
        for _ in range(self.iterations):
            pass
        return super().step(action)


if __name__ != "__main__":
    # Registered when imported as bench_env_workers (by main() once the loop count is set, and
    # by every worker process, for the id "bench_env_workers:BusyCartPole-v0").
    gymnasium.register(
        BUSY_ID,
        entry_point=f"{__name__}:BusyCartPole",
        max_episode_steps=500,
        kwargs={"iterations": int(os.environ.get(SPIN_VARIABLE, "0"))},
    )


def step_cost_us(env_id: str, steps: int = 3000) -> float:
    """Microseconds one `gymnasium.make(env_id)` env takes per step (best of 3)."""
    env = gymnasium.make(env_id)
    env.reset(seed=0)
    actions = [env.action_space.sample() for _ in range(steps)]
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        for action in actions:
            _, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                env.reset()
        best = min(best, (time.perf_counter() - started) / steps * 1e6)
    env.close()
    return best


def calibrate(target_us: float) -> int:
    """The busy-loop count that makes a BusyCartPole step cost `target_us` (the fastest of
    several timings of each part, so that other processes' load does not skew it)."""
    base = step_cost_us("CartPole-v1")
    count, best = 400_000, float("inf")
    for _ in range(7):
        started = time.perf_counter()
        for _ in range(count):
            pass
        best = min(best, time.perf_counter() - started)
    return max(0, round((target_us - base) / (best / count * 1e6)))


def process_cpu_s(pids: list[int]) -> float:
    """CPU seconds (user + system) the processes `pids` have used (Linux's /proc)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / ticks


def child_pids(env: Any) -> list[int]:
    """The processes that step `env` besides this one: Operant's workers, async's."""
    if hasattr(env, "_processes"):
        return [process.pid for process in env._processes]
    return [process.pid for process in getattr(env, "processes", [])]


def cores_free(loops: int = 5_000_000) -> float:
    """How many cores two CPU-bound processes got, side by side (2.0 on an idle 2-core
    machine): twice one process's time alone over the pair's wall time."""
    command = [sys.executable, "-c", f"for _ in range({loops}): pass"]

    def timed(count: int) -> float:
        started = time.perf_counter()
        for process in [subprocess.Popen(command) for _ in range(count)]:
            process.wait()
        return time.perf_counter() - started

    return round(2 * timed(1) / timed(2), 2)


def cpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    except OSError:
        return platform.processor()
    for line in out.splitlines():
        if line.startswith("Model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default=BUSY_ID, help=f"{BUSY_ID} (default) or a Gymnasium id")
    parser.add_argument("--step-us", type=float, default=20.0)
    parser.add_argument("--num-envs", type=int, default=128, help="env.num_envs' default")
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--seconds", type=float, default=0.1, help="per path per round")
    args = parser.parse_args()

    from operant.envs.reference.vector import ReferenceVectorEnv
    from operant.envs.reference.workers import WorkerVectorEnv

    if args.env == BUSY_ID:
        os.environ[SPIN_VARIABLE] = str(calibrate(args.step_us))
        importlib.import_module("bench_env_workers")  # registers BUSY_ID with that count
        env_id = f"bench_env_workers:{BUSY_ID}"
    else:
        env_id = args.env
    cost = step_cost_us(env_id.rpartition(":")[2])
    n = args.num_envs

    envs: dict[str, Any] = {"in-process, N=1": ReferenceVectorEnv(env_id.rpartition(":")[2], 1)}
    envs[f"in-process, N={n}"] = ReferenceVectorEnv(env_id.rpartition(":")[2], n)
    for workers in (1, 2, 4):
        envs[f"workers {workers}, N={workers}"] = WorkerVectorEnv(env_id, workers, workers)
        envs[f"workers {workers}, N={n}"] = WorkerVectorEnv(env_id, n, workers)
    for workers in (2, 4):
        envs[f"async {workers}, N={workers}"] = gymnasium.make_vec(
            env_id,
            num_envs=workers,
            vectorization_mode="async",
            vector_kwargs={"shared_memory": True, "copy": False},
        )
    steps: dict[str, Any] = {}
    for name, env in envs.items():
        env.reset(seed=0)
        env.action_space.seed(0)
        table = [env.action_space.sample() for _ in range(256)]  # the same for every path
        if hasattr(env, "step_bound"):
            # The trainer's path: actions written into the env's buffer, then step_bound().
            def step(i: int, env: Any = env, table: Any = table) -> None:
                np.copyto(env.actions, table[i & 255])
                env.step_bound()
        else:

            def step(i: int, env: Any = env, table: Any = table) -> None:
                env.step(table[i & 255])

        steps[name] = step

    load_before, free_before = os.getloadavg()[0], cores_free()
    rates: dict[str, list[float]] = {name: [] for name in envs}
    # CPU time of this process (the trainer's, in training) per step of the batch: what
    # stepping costs the trainer's core, whatever the other processes do.
    trainer_cpu: dict[str, list[float]] = {name: [] for name in envs}
    # The worker processes' CPU over all rounds (the clock ticks are too coarse for one).
    children_cpu_s = {name: -process_cpu_s(child_pids(env)) for name, env in envs.items()}
    total_steps = dict.fromkeys(envs, 0)
    for _ in range(args.rounds):
        for name, step in steps.items():
            done = 0
            cpu_started, started = time.process_time(), time.perf_counter()
            deadline = started + args.seconds
            while time.perf_counter() < deadline:
                for i in range(done, done + 10):
                    step(i)
                done += 10
            rates[name].append(done * envs[name].num_envs / (time.perf_counter() - started))
            trainer_cpu[name].append((time.process_time() - cpu_started) / done * 1e6)
            total_steps[name] += done
    for name, env in envs.items():
        children_cpu_s[name] += process_cpu_s(child_pids(env))
    for env in envs.values():
        env.close()

    median = {name: statistics.median(values) for name, values in rates.items()}

    def ratio(a: str, b: str) -> float:
        return round(median[a] / median[b], 2)

    print(
        json.dumps(
            {
                "date": time.strftime("%Y-%m-%d", time.gmtime()),
                "cpu": cpu_model(),
                "cores": os.cpu_count(),
                "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
                "env": env_id,
                "us_per_env_step": round(cost, 1),
                "num_envs": n,
                "env_steps_per_s": {name: round(value) for name, value in median.items()},
                "trainer_cpu_us_per_step": {
                    name: round(statistics.median(values), 1)
                    for name, values in trainer_cpu.items()
                },
                "workers_cpu_us_per_step": {
                    name: round(children_cpu_s[name] / total_steps[name] * 1e6, 1)
                    for name in envs
                    if child_pids(envs[name])
                },
                "workers_over_in_process": {
                    f"W={w}, N={n}": ratio(f"workers {w}, N={n}", f"in-process, N={n}")
                    for w in (1, 2, 4)
                },
                "workers_over_async": {
                    f"W={w}, N={w}": ratio(f"workers {w}, N={w}", f"async {w}, N={w}")
                    for w in (2, 4)
                },
                "rounds": args.rounds,
                # Other processes' load (1-minute average), and the cores two busy processes
                # got, before and after the rounds: workers need free cores to be faster.
                "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)],
                "cores_free": [free_before, cores_free()],
            }
        )
    )


if __name__ == "__main__":
    main()

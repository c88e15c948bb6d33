"""Microseconds a `step(actions)` of `gymnasium.make_vec(ENV_ID, num_envs=N, copy=False)`,
the median of five runs of 2,000 steps: run it with two installs (or two PYTHONPATHs) in
alternating fresh processes to compare faces.

    python benchmarks/bench_face_step.py operant/MinAtar-Breakout-v1 64
"""

import statistics
import sys
import time

import gymnasium
import numpy as np

import operant.envs  # noqa: F401

env_id, n = sys.argv[1], int(sys.argv[2])
env = gymnasium.make_vec(env_id, num_envs=n, vectorization_mode="vector_entry_point", copy=False)
env.reset(seed=0)
acts = np.random.default_rng(0).integers(0, env.single_action_space.n, n)


def run(k=2000):
    t = time.perf_counter()
    for _ in range(k):
        env.step(acts)
    return (time.perf_counter() - t) / k * 1e6


run(200)
print(statistics.median(run() for _ in range(5)))

"""CartPole kernel vs a plain C loop over the same SoA data, same compiler flags, same run.

    python benchmarks/bench_kernel_vs_c.py [--num-envs 4096] [--rounds 5]

Compiles benchmarks/cartpole_c_loop.c with the flags setup.py ships with (no -march=native),
loads it with ctypes, and times both on one core with the same random actions.
"""

import argparse
import ctypes
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from operant.envs import make_env

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from setup_flags import COMPILE_ARGS  # noqa: E402


def build_c_loop() -> ctypes.CDLL:
    out = os.path.join(tempfile.mkdtemp(), "cartpole_c_loop.so")
    subprocess.run(
        [
            "cc",
            *COMPILE_ARGS,
            "-shared",
            "-fPIC",
            "-o",
            out,
            os.path.join(HERE, "cartpole_c_loop.c"),
            "-lm",
        ],
        check=True,
    )
    return ctypes.CDLL(out)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--num-envs", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=500)
    args = parser.parse_args()
    n, steps = args.num_envs, args.steps
    rng = np.random.default_rng(0)
    actions = rng.integers(0, 2, size=n).astype(np.int64)

    env = make_env("CartPole-v1", n, impl="native", copy=False)
    env.reset(seed=0)
    env.actions[:] = actions

    lib = build_c_loop()
    state = [rng.uniform(-0.05, 0.05, size=n) for _ in range(4)]
    obs = np.zeros((n, 4), np.float32)
    rewards = np.zeros(n, np.float32)
    term = np.zeros(n, np.uint8)
    trunc = np.zeros(n, np.uint8)
    length = np.zeros(n, np.int64)
    seeds = np.arange(n, dtype=np.uint64)
    episodes = np.zeros(2)
    ptr = lambda a: a.ctypes.data_as(ctypes.c_void_p)  # noqa: E731
    c_args = [
        ctypes.c_int64(n),
        ctypes.c_int64(steps),
        *map(ptr, state),
        ptr(actions),
        ptr(obs),
        ptr(rewards),
        ptr(term),
        ptr(trunc),
        ptr(length),
        ptr(seeds),
        ptr(episodes),
    ]

    def kernel_round():
        started = time.perf_counter()
        for _ in range(steps):
            env.kernel.step()
        return n * steps / (time.perf_counter() - started)

    def c_round():
        started = time.perf_counter()
        lib.cartpole_c_loop(*c_args)
        return n * steps / (time.perf_counter() - started)

    kernel_round(), c_round()
    kernel, c_loop = [], []
    for _ in range(args.rounds):
        kernel.append(kernel_round())
        c_loop.append(c_round())
    k, c = statistics.median(kernel), statistics.median(c_loop)
    print(
        f"N={n}: kernel {k / 1e6:.1f}M steps/s, plain C loop {c / 1e6:.1f}M steps/s, "
        f"kernel/C {k / c:.2f} (flags: {' '.join(COMPILE_ARGS)})"
    )


if __name__ == "__main__":
    main()

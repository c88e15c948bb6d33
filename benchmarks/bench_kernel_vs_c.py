"""CartPole kernel vs a plain C loop of the same float64 arithmetic, in one run.

    python benchmarks/bench_kernel_vs_c.py [--num-envs 4096] [--rounds 41] [--steps 100]

The kernel is the shipped build (portable flags; its loops cloned per SIMD width and picked
at load time). benchmarks/cartpole_c_loop.c is compiled here with the same flags plus
-march=native, so it has this CPU's widest vectors without any dispatch: like for like, the
kernel against what the compiler makes of the same arithmetic for this machine. Before timing,
both start from the same state and streams, take the same actions for --check-steps steps, and
must end bit for bit equal (a C loop that computed something else would not be a yardstick);
a mismatch exits 2. Then one core, the two alternating round by round (short rounds, many:
this VM's speed changes within seconds), the ratio of the medians.
Prints one line, and with --json a JSON record.
"""

import argparse
import ctypes
import json
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

C_LOOP_FLAGS = [*COMPILE_ARGS, "-march=native"]


def build_c_loop() -> ctypes.CDLL:
    out = os.path.join(tempfile.mkdtemp(), "cartpole_c_loop.so")
    source = os.path.join(HERE, "cartpole_c_loop.c")
    subprocess.run(["cc", *C_LOOP_FLAGS, "-shared", "-fPIC", "-o", out, source, "-lm"], check=True)
    lib = ctypes.CDLL(out)
    lib.cartpole_c_loop.restype = ctypes.c_int64
    return lib


class CLoop:
    """The C loop's arrays, started from a kernel's state and streams."""

    def __init__(self, lib: ctypes.CDLL, kernel, actions: np.ndarray, max_episode_steps: int):
        n = kernel.num_envs
        self.lib, self.n = lib, n
        # One (4, N) block like the kernel's state, rows views into it: the same layout, so
        # the same cache sets and the same 4K-aliasing between rows (N = 4,096 float64 rows
        # are 32 KiB apart), whatever that costs.
        self.state_block = kernel.state.copy()
        self.state = list(self.state_block)
        self.rng = kernel.rng_state.copy()
        self.episode_return = kernel.episode_return.copy()
        self.length = kernel.episode_length.copy()
        self.actions = actions
        self.obs = np.zeros((n, 4), np.float32)
        self.final_obs = np.zeros((n, 4), np.float32)
        self.rewards = np.zeros(n, np.float32)
        self.terminated = np.zeros(n, np.uint8)
        self.truncated = np.zeros(n, np.uint8)
        self.stats = np.zeros_like(kernel.stats)
        self.recent_returns = np.zeros_like(kernel.recent_returns)
        self.recent_lengths = np.zeros_like(kernel.recent_lengths)
        self.recent_head = np.zeros_like(kernel.recent_head)
        ptr = lambda a: a.ctypes.data_as(ctypes.c_void_p)  # noqa: E731
        self.args = [
            ctypes.c_int64(max_episode_steps),
            *map(ptr, self.state),
            ptr(actions),
            ptr(self.obs),
            ptr(self.final_obs),
            ptr(self.rewards),
            ptr(self.terminated),
            ptr(self.truncated),
            ptr(self.episode_return),
            ptr(self.length),
            ptr(self.rng),
            ptr(self.stats),
            ptr(self.recent_returns),
            ptr(self.recent_lengths),
            ptr(self.recent_head),
            ctypes.c_uint64(len(self.recent_returns)),
        ]

    def run(self, steps: int) -> None:
        bad = self.lib.cartpole_c_loop(ctypes.c_int64(self.n), ctypes.c_int64(steps), *self.args)
        assert bad == -1, f"the C loop refused env {bad}'s action"


def mismatches(env, c_loop: CLoop) -> list[str]:
    """Names of the arrays where the kernel and the C loop differ (bit for bit)."""
    kernel = env.kernel
    pairs = {
        "state": (kernel.state, c_loop.state_block),
        "rng": (kernel.rng_state, c_loop.rng),
        "episode_return": (kernel.episode_return, c_loop.episode_return),
        "episode_length": (kernel.episode_length, c_loop.length),
        "obs": (env.obs, c_loop.obs),
        "final_obs (ended envs)": (
            env.final_obs[env.terminated | env.truncated],
            c_loop.final_obs[(c_loop.terminated | c_loop.truncated).astype(bool)],
        ),
        "terminated": (env.terminated, c_loop.terminated.astype(bool)),
        "truncated": (env.truncated, c_loop.truncated.astype(bool)),
        "rewards": (env.rewards, c_loop.rewards),
        "stats": (kernel.stats, c_loop.stats),
        "recent_returns": (kernel.recent_returns, c_loop.recent_returns),
        "recent_lengths": (kernel.recent_lengths, c_loop.recent_lengths),
    }
    return [name for name, (a, b) in pairs.items() if a.tobytes() != b.tobytes()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-envs", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=41)
    parser.add_argument("--steps", type=int, default=100, help="steps per timed round")
    parser.add_argument("--check-steps", type=int, default=1000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    n, steps = args.num_envs, args.steps
    actions = np.random.default_rng(0).integers(0, 2, size=n).astype(np.int64)

    env = make_env("CartPole-v1", n, impl="native", copy=False)
    env.reset(seed=0)
    env.actions[:] = actions
    c_loop = CLoop(build_c_loop(), env.kernel, env.actions, env.max_episode_steps)

    for _ in range(args.check_steps):
        env.kernel.step()
    c_loop.run(args.check_steps)
    differ = mismatches(env, c_loop)
    if differ:
        print(f"the C loop and the kernel differ after {args.check_steps} steps: {differ}")
        return 2

    def kernel_round() -> float:
        step = env.kernel.step
        started = time.perf_counter()
        for _ in range(steps):
            step()
        return n * steps / (time.perf_counter() - started)

    def c_round() -> float:
        started = time.perf_counter()
        c_loop.run(steps)
        return n * steps / (time.perf_counter() - started)

    kernel_round(), c_round()
    kernel, plain = [], []
    for _ in range(args.rounds):
        kernel.append(kernel_round())
        plain.append(c_round())
    k, c = statistics.median(kernel), statistics.median(plain)
    print(
        f"N={n}: kernel {k / 1e6:.1f}M steps/s, C loop (-march=native) {c / 1e6:.1f}M steps/s, "
        f"kernel/C {k / c:.3f} (medians of {args.rounds} alternating rounds); equal bit for bit "
        f"over {args.check_steps} steps (C flags: {' '.join(C_LOOP_FLAGS)})"
    )
    if args.json:
        print(
            json.dumps(
                {
                    "num_envs": n,
                    "kernel_steps_per_s": [round(v) for v in kernel],
                    "c_loop_steps_per_s": [round(v) for v in plain],
                    "kernel_over_c": round(k / c, 3),
                    "c_flags": C_LOOP_FLAGS,
                }
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""GAE on CPU: µs per call of the Cython kernel (operant.cext.gae) against the vectorised torch
loop (operant.trainer.loop.ppo._compute_gae_torch), one thread, float32, for rollout shapes (T, N).

    flock /tmp/operant-bench.lock python benchmarks/bench_gae.py [--rounds 7] [--json]

"kernel" calls the kernel on numpy arrays; "compute_gae" is what the trainer pays (the
dispatch, the zero-copy numpy views, then the kernel); "torch" is the torch loop. Both write
into preallocated advantages and returns. Each figure is the median over rounds of the mean
over enough calls to fill about 0.1 s; ratio is torch / compute_gae. Run on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import statistics

import numpy as np
import torch

from operant.cext.gae import gae as gae_kernel
from operant.trainer.bench.measure import _timed_rounds
from operant.trainer.loop.ppo import _compute_gae_torch, compute_gae

SHAPES = [(64, 32), (128, 256), (16, 1024), (64, 4096)]
GAMMA, LAM = 0.99, 0.95
ROUND_S = 0.1


def rollout(steps: int, envs: int) -> tuple[torch.Tensor, ...]:
    rng = np.random.default_rng(0)
    arrays = (
        rng.normal(size=(steps, envs)),
        rng.normal(size=(steps, envs)),
        (rng.random((steps, envs)) < 0.02).astype(np.float64),
        rng.normal(size=envs),
    )
    return tuple(torch.from_numpy(array.astype(np.float32)) for array in arrays)


def median_us(call, rounds: int) -> float:
    """Median over `rounds` of the mean µs per call, each round about ROUND_S long (the
    calibrated rounds of operant bench)."""
    return 1e6 / statistics.median(_timed_rounds(call, 1, rounds, ROUND_S))


def bench(steps: int, envs: int, rounds: int) -> dict[str, float]:
    rewards, values, dones, next_value = rollout(steps, envs)
    advantages, returns = torch.empty_like(rewards), torch.empty_like(rewards)
    arrays = tuple(t.numpy() for t in (rewards, values, dones, next_value))
    out = (advantages.numpy(), returns.numpy())
    return {
        "T": steps,
        "N": envs,
        "kernel_us": median_us(lambda: gae_kernel(*arrays, GAMMA, LAM, *out), rounds),
        "compute_gae_us": median_us(
            lambda: compute_gae(
                rewards,
                values,
                dones,
                next_value,
                GAMMA,
                LAM,
                advantages=advantages,
                returns=returns,
            ),
            rounds,
        ),
        "torch_us": median_us(
            lambda: _compute_gae_torch(
                rewards, values, dones, next_value, GAMMA, LAM, advantages, returns
            ),
            rounds,
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = [bench(steps, envs, args.rounds) for steps, envs in SHAPES]
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"GAE, float32, 1 torch thread, median of {args.rounds} rounds, µs per call")
    print(f"{'T':>5} {'N':>6} {'kernel':>10} {'compute_gae':>12} {'torch':>10} {'torch/ours':>11}")
    for row in rows:
        print(
            f"{row['T']:>5} {row['N']:>6} {row['kernel_us']:>10.1f} "
            f"{row['compute_gae_us']:>12.1f} {row['torch_us']:>10.1f} "
            f"{row['torch_us'] / row['compute_gae_us']:>10.1f}x"
        )


if __name__ == "__main__":
    main()

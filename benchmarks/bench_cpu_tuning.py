"""The CPU-path choices of the trainer, each measured against its alternative side by side in
one process (docs/journal/2026-11-23-tuning-the-cpu-path.md):

- torch threads 1 vs 2: policy forward and PPO-update samples/s (operant.trainer.bench's
  compute_bound) for the default and the throughput configs;
- the rollout's forward under torch.inference_mode vs torch.no_grad vs autograd on;
- torch.compile (inductor, default mode) of the policy's forward and of one PPO loss +
  backward, vs eager, at the rollout and minibatch shapes of the default config.

    flock /tmp/operant-bench.lock python benchmarks/bench_cpu_tuning.py [--rounds 5] [--no-compile]

Medians of --rounds rounds of about 0.2 s each. Run on an idle machine.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from operant.trainer.bench.measure import _timed_rounds, compute_bound
from operant.trainer.config import load_config
from operant.trainer.policies.mlp import ActorCritic

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = {
    "default": ROOT / "configs" / "CartPole-v1.toml",
    "throughput": ROOT / "configs" / "throughput" / "CartPole-v1.toml",
}


def per_second(work, samples: int, rounds: int) -> float:
    """Median samples/s over `rounds` rounds of about 0.2 s (operant bench's timed rounds)."""
    return statistics.median(_timed_rounds(work, samples, rounds, 0.2))


def threads(rounds: int) -> None:
    print("torch threads (samples/s; bound = steps/s the two allow together):")
    for name, path in CONFIGS.items():
        for count in (1, 2):
            config = load_config(path, [f"train.torch_threads={count}"])
            best = compute_bound(config, 0.3 * rounds)  # the best of its rounds
            forward = best["forward_samples_per_s"]
            print(
                f"  {name:10s} {count} thread(s): forward {forward / 1e6:6.2f}M"
                f"  update {best['train_samples_per_s'] / 1e6:6.2f}M"
                f"  bound {best['bound_steps_per_s'] / 1e3:7.0f}K",
                flush=True,
            )
    torch.set_num_threads(1)


def grad_modes(rounds: int) -> None:
    torch.manual_seed(0)
    policy = ActorCritic(4, 2, [64, 64])
    generator = torch.Generator().manual_seed(0)
    print("rollout forward (policy.act, 64-64 tanh, separate nets), samples/s:")
    for batch in (128, 4096):
        obs = torch.randn(batch, 4)
        out = policy.act(obs, generator)

        def act(mode, obs=obs, out=out):
            def work():
                with mode():
                    policy.act(obs, generator, out=out if mode is not torch.enable_grad else None)

            return work

        rates = {
            name: per_second(act(mode), batch, rounds)
            for name, mode in (
                ("inference_mode", torch.inference_mode),
                ("no_grad", torch.no_grad),
                ("autograd on", torch.enable_grad),
            )
        }
        base = rates["inference_mode"]
        print(
            f"  batch {batch:5d}: "
            + "  ".join(
                f"{name} {rate / 1e6:.2f}M ({rate / base:.2f}x)" for name, rate in rates.items()
            ),
            flush=True,
        )


def compiled(rounds: int) -> None:
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(
        torch.nn.Linear(4, 64),
        torch.nn.Tanh(),
        torch.nn.Linear(64, 64),
        torch.nn.Tanh(),
        torch.nn.Linear(64, 3),
    )
    print("torch.compile (inductor) vs eager, a 4-64-64-3 tanh MLP, samples/s:")
    started = time.perf_counter()
    try:
        fast = torch.compile(mlp)
        with torch.inference_mode():
            fast(torch.randn(128, 4))
    except Exception as error:  # noqa: BLE001 - report why it cannot be used here
        print(f"  torch.compile failed here: {type(error).__name__}: {error}")
        return
    print(f"  first compile: {time.perf_counter() - started:.1f} s")
    for batch in (128, 4096):
        obs = torch.randn(batch, 4)

        def forward(model, obs=obs):
            def work():
                with torch.inference_mode():
                    model(obs)

            return work

        eager, comp = (per_second(forward(model), batch, rounds) for model in (mlp, fast))
        print(
            f"  forward batch {batch:5d}: eager {eager / 1e6:.2f}M  compiled {comp / 1e6:.2f}M "
            f"({comp / eager:.2f}x)",
            flush=True,
        )
    target = torch.randn(512, 3)
    obs = torch.randn(512, 4)

    def loss_step(model):
        def work():
            model.zero_grad(set_to_none=False)
            loss = ((model(obs) - target) ** 2).mean()
            loss.backward()

        return work

    started = time.perf_counter()
    loss_step(fast)()
    print(f"  compile of forward+backward: {time.perf_counter() - started:.1f} s")
    eager, comp = (per_second(loss_step(model), 512, rounds) for model in (mlp, fast))
    print(
        f"  loss+backward minibatch 512: eager {eager / 1e6:.2f}M  compiled {comp / 1e6:.2f}M "
        f"({comp / eager:.2f}x)",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    args = parser.parse_args()
    torch.set_num_threads(1)
    grad_modes(args.rounds)
    threads(args.rounds)
    if not args.no_compile:
        torch.set_num_threads(1)
        compiled(args.rounds)


if __name__ == "__main__":
    main()

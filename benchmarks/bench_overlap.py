"""The overlapped rollout (env.overlap = true) against the plain one, side by side in one
process: rollout steps/s of `Trainer.collect()` (env stepping, policy forward, storage), one
torch thread, for each env and num_envs, and the ratio overlapped / plain.

    flock /tmp/operant-bench.lock python benchmarks/bench_overlap.py [--rounds 5] [--json]

Both trainers are built from the env's shipped config (configs/<env>.toml) with only
num_envs and overlap changed; rounds alternate between them so drift in the machine's speed
hits both alike. A ratio above 1 means the second thread hid more env time than the split
(two half-batch forwards instead of one) and the hand-offs cost. Run on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from operant.trainer.bench.measure import _timed_rounds
from operant.trainer.config import load_config
from operant.trainer.loop.train import Trainer

ROOT = Path(__file__).resolve().parent.parent
CASES = [
    ("CartPole-v1", 128),
    ("CartPole-v1", 4096),
    ("Pendulum-v1", 1024),
    ("Pendulum-v1", 8192),
    ("Acrobot-v1", 256),
    ("Acrobot-v1", 4096),
]
ROUND_S = 0.3


def trainer(env_id: str, num_envs: int, overlap: bool) -> Trainer:
    config = load_config(
        ROOT / "configs" / f"{env_id}.toml",
        [
            f"env.num_envs={num_envs}",
            f"env.overlap={str(overlap).lower()}",
            "ppo.num_steps=16",
            "ppo.num_minibatches=1",
            "train.torch_threads=1",
            "train.publish_metrics=false",
        ],
    )
    built = Trainer(config)
    built.collect()
    return built


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="one JSON line per case")
    args = parser.parse_args()
    for env_id, num_envs in CASES:
        pair = {overlap: trainer(env_id, num_envs, overlap) for overlap in (False, True)}
        steps = 16 * num_envs
        rounds: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(args.rounds):
            for overlap, built in pair.items():
                rounds[overlap] += _timed_rounds(built.collect, steps, 1, ROUND_S, warm=0)
        plain, overlapped = (statistics.median(rounds[key]) for key in (False, True))
        row = {
            "env": env_id,
            "num_envs": num_envs,
            "plain_sps": round(plain),
            "overlap_sps": round(overlapped),
            "ratio": round(overlapped / plain, 3),
        }
        for built in pair.values():
            built.env.close()
        if args.json:
            print(json.dumps(row), flush=True)
        else:
            print(
                f"{env_id:14s} N={num_envs:>5}: plain {plain / 1e3:9.1f}K  overlapped "
                f"{overlapped / 1e3:9.1f}K steps/s  ratio {row['ratio']:.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()

"""SB3 on Operant's CartPole vs SB3 on its own DummyVecEnv over Gymnasium's CartPole.

Two figures, each Operant's next to DummyVecEnv's, printed as one JSON line:

- `ppo`: SB3's PPO steps per second (`model.learn(--ppo-steps)` timed, on a fresh model and
  env each round), rl-baselines3-zoo's CartPole-v1 hyperparameters on both, 8 envs, both under
  SB3's episode recording (VecMonitor for Operant's, Monitor per env for DummyVecEnv's);
- `env_only`: env steps per second through SB3's VecEnv interface (`step(actions)` with
  random actions drawn beforehand), for each `--num-envs`.

Rounds alternate between the two (Operant's first in even rounds, DummyVecEnv's first in odd
ones) and each figure is the median of `--rounds`. Everything runs on one core: torch is held
to one thread. The record names the machine and the date.

    python benchmarks/bench_sb3.py                       # a few minutes
    python benchmarks/bench_sb3.py --rounds 1 --ppo-steps 2048 --env-seconds 0.2   # a smoke run
"""

from __future__ import annotations

import os

# One core: keep NumPy's BLAS from starting (and spinning) a thread pool of its own.
for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import stable_baselines3  # noqa: E402
import torch  # noqa: E402
from stable_baselines3 import PPO  # noqa: E402
from stable_baselines3.common.env_util import make_vec_env as sb3_make_vec_env  # noqa: E402
from stable_baselines3.common.vec_env import VecEnv  # noqa: E402

from operant.compat.sb3 import make_vec_env  # noqa: E402
from operant.trainer.bench.measure import machine  # noqa: E402

ENV_ID = "CartPole-v1"
PPO_NUM_ENVS = 8  # rl-baselines3-zoo's n_envs for PPO on CartPole-v1


def _linear(initial: float) -> Callable[[float], float]:
    return lambda progress_remaining: progress_remaining * initial


# rl-baselines3-zoo, hyperparams/ppo.yml, CartPole-v1.
RL_ZOO_PPO = dict(
    n_steps=32,
    batch_size=256,
    gae_lambda=0.8,
    gamma=0.98,
    n_epochs=20,
    ent_coef=0.0,
    learning_rate=_linear(1e-3),
    clip_range=_linear(0.2),
)

MAKERS: dict[str, Callable[..., VecEnv]] = {
    "operant": lambda num_envs, seed: make_vec_env(ENV_ID, n_envs=num_envs, seed=seed),
    "dummy_vec_env": lambda num_envs, seed: sb3_make_vec_env(ENV_ID, n_envs=num_envs, seed=seed),
}


def ppo_round(name: str, steps: int, seed: int) -> float:
    """SB3 PPO steps per second on one fresh env and model (construction not timed)."""
    env = MAKERS[name](PPO_NUM_ENVS, seed)
    model = PPO("MlpPolicy", env, seed=seed, device="cpu", **RL_ZOO_PPO)
    started = time.perf_counter()
    model.learn(steps)
    elapsed = time.perf_counter() - started
    env.close()
    return model.num_timesteps / elapsed


def env_round(name: str, num_envs: int, seconds: float, seed: int) -> float:
    """Env steps per second through VecEnv.step with random actions, after one warm-up step."""
    env = MAKERS[name](num_envs, seed)
    env.reset()
    actions = np.random.default_rng(seed).integers(0, 2, size=(256, num_envs))
    env.step(actions[0])
    calls = 0
    started = time.perf_counter()
    while (elapsed := time.perf_counter() - started) < seconds:
        env.step(actions[calls % len(actions)])
        calls += 1
    env.close()
    return calls * num_envs / elapsed


def alternate(rounds: int, run: Callable[[str, int], float]) -> dict[str, Any]:
    """`run(name, seed)` for both envs, alternating which goes first; medians and their ratio."""
    rates: dict[str, list[float]] = {name: [] for name in MAKERS}
    for round_index in range(rounds):
        order = list(MAKERS) if round_index % 2 == 0 else list(reversed(MAKERS))
        for name in order:
            rates[name].append(run(name, round_index))
    medians = {f"{name}_sps": statistics.median(values) for name, values in rates.items()}
    return {
        **medians,
        "operant_over_dummy_vec_env": medians["operant_sps"] / medians["dummy_vec_env_sps"],
        "rounds": {name: [round(value, 1) for value in values] for name, values in rates.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds per figure (median)")
    parser.add_argument(
        "--ppo-steps",
        type=int,
        default=10_240,
        help="PPO env steps per round (a multiple of 256, rl-zoo's rollout)",
    )
    parser.add_argument("--env-seconds", type=float, default=2.0, help="seconds per env-only round")
    parser.add_argument(
        "--num-envs", type=int, nargs="+", default=[8, 256], help="env-only: numbers of envs"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    record: dict[str, Any] = {
        "bench": "sb3",
        "env": ENV_ID,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "stable_baselines3": stable_baselines3.__version__,
        "ppo": {
            "num_envs": PPO_NUM_ENVS,
            "steps_per_round": args.ppo_steps,
            **alternate(args.rounds, lambda name, seed: ppo_round(name, args.ppo_steps, seed)),
        },
        "env_only": [
            {
                "num_envs": num_envs,
                **alternate(
                    args.rounds,
                    lambda name, seed, n=num_envs: env_round(name, n, args.env_seconds, seed),
                ),
            }
            for num_envs in args.num_envs
        ],
    }
    print(json.dumps(record))


if __name__ == "__main__":
    main()

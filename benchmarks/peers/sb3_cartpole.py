#!/usr/bin/env python3
"""stable-baselines3 PPO on CartPole-v1: training throughput and time-to-solve.

Peer baseline for Operant. Runs in the separate peers venv (see run_peers.sh);
stable-baselines3 is NOT an Operant dependency.

Configs:
  default  PPO("MlpPolicy", "CartPole-v1") with every SB3 default (1 env,
           n_steps 2048, batch 64, n_epochs 10, lr 3e-4, gamma 0.99,
           gae_lambda 0.95, clip 0.2, ent_coef 0). --n-envs N wraps N envs
           with make_vec_env instead (still SB3 defaults otherwise).
  zoo      rl-baselines3-zoo's tuned CartPole-v1 hyperparameters (ppo.yml):
           n_envs 8, n_steps 32, batch 256, gae_lambda 0.8, gamma 0.98,
           n_epochs 20, ent_coef 0, lr lin_0.001, clip lin_0.2
           (zoo trains for n_timesteps 1e5; linear schedules decay to 0 over
           whatever --timesteps is given).

Measures, per run (one JSON line on stdout):
  sps            model.num_timesteps / wall time of model.learn() (import, env
                 and model construction excluded)
  solve_s        seconds from just before learn() until the mean return of the
                 last 100 finished episodes (Monitor info["episode"]["r"]) first
                 reaches 475; null if not within the budget
  steps_to_solve env steps at that moment (null if unsolved)
Training always continues to the full budget, so sps is over the whole budget.
"""

import argparse
import json
import platform
import time
from collections import deque

import gymnasium
import numpy as np
import stable_baselines3
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env

SOLVE_RETURN = 475.0
WINDOW = 100


class SolveWatch(BaseCallback):
    """Reads finished-episode returns from the Monitor infos at every env step
    (SB3's own ep_info_buffer is filled only after the callback runs)."""

    def __init__(self, t0):
        super().__init__()
        self.t0 = t0
        self.returns = deque(maxlen=WINDOW)
        self.episodes = 0
        self.solve_s = None
        self.steps_to_solve = None

    def _on_step(self):
        for info in self.locals["infos"]:
            ep = info.get("episode")
            if ep is not None:
                self.returns.append(float(ep["r"]))
                self.episodes += 1
                if (
                    self.solve_s is None
                    and len(self.returns) == WINDOW
                    and sum(self.returns) / WINDOW >= SOLVE_RETURN
                ):
                    self.solve_s = time.perf_counter() - self.t0
                    self.steps_to_solve = int(self.num_timesteps)
        return True


def linear(initial):
    # rl-zoo's "lin_X": progress_remaining goes 1 -> 0 over the run
    return lambda progress_remaining: progress_remaining * initial


def build(config, n_envs, seed):
    if config == "default":
        if n_envs == 1:
            # exactly the documented one-liner: SB3 wraps Monitor + DummyVecEnv
            return PPO("MlpPolicy", "CartPole-v1", device="cpu", seed=seed, verbose=0), 1
        env = make_vec_env("CartPole-v1", n_envs=n_envs, seed=seed)
        return PPO("MlpPolicy", env, device="cpu", seed=seed, verbose=0), n_envs
    if config == "zoo":
        n = n_envs if n_envs else 8
        env = make_vec_env("CartPole-v1", n_envs=n, seed=seed)
        model = PPO(
            "MlpPolicy",
            env,
            n_steps=32,
            batch_size=256,
            gae_lambda=0.8,
            gamma=0.98,
            n_epochs=20,
            ent_coef=0.0,
            learning_rate=linear(1e-3),
            clip_range=linear(0.2),
            device="cpu",
            seed=seed,
            verbose=0,
        )
        return model, n
    raise SystemExit(f"unknown config {config}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", choices=["default", "zoo"], default="default")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--timesteps",
        type=int,
        default=None,
        help="budget (default 300000 for 'default', 100000 for 'zoo' as in rl-zoo)",
    )
    ap.add_argument(
        "--n-envs", type=int, default=None, help="default config: 1 (SB3 default); zoo config: 8"
    )
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    args = ap.parse_args()

    budget = args.timesteps or (300_000 if args.config == "default" else 100_000)
    torch.set_num_threads(args.threads)
    n_envs = args.n_envs if args.n_envs else (1 if args.config == "default" else 8)
    model, n_envs = build(args.config, n_envs, args.seed)

    t0 = time.perf_counter()
    cb = SolveWatch(t0)
    model.learn(total_timesteps=budget, callback=cb)
    wall = time.perf_counter() - t0

    steps = int(model.num_timesteps)
    last = list(cb.returns)
    print(
        json.dumps(
            {
                "peer": "sb3",
                "config": args.config,
                "seed": args.seed,
                "sps": round(steps / wall, 1),
                "solve_s": None if cb.solve_s is None else round(cb.solve_s, 2),
                "steps_to_solve": cb.steps_to_solve,
                "total_timesteps": steps,
                "budget": budget,
                "wall_s": round(wall, 2),
                "n_envs": n_envs,
                "episodes": cb.episodes,
                "final_mean_return_100": round(float(np.mean(last)), 1) if last else None,
                "torch_threads": torch.get_num_threads(),
                "device": "cpu",
                "versions": {
                    "stable_baselines3": stable_baselines3.__version__,
                    "torch": torch.__version__,
                    "gymnasium": gymnasium.__version__,
                    "numpy": np.__version__,
                    "python": platform.python_version(),
                },
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()

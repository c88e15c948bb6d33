#!/usr/bin/env python3
"""PufferLib 3.0's own PPO trainer (pufferlib.pufferl.PuffeRL) on its Ocean
CartPole (puffer_cartpole): training throughput and time-to-solve.

Peer baseline for Operant. Runs in its own venv (see run_peers.sh); PufferLib
is NOT an Operant dependency.

The run uses PufferLib's own config loader (pufferl.load_config, i.e. the
shipped pufferlib/config/default.ini + config/ocean/cartpole.ini), its own
load_env/load_policy and PuffeRL.evaluate()/train() - the same loop as
`puffer train puffer_cartpole` - with these overrides only:
  train.device=cpu (no GPU here), train.seed/vec.seed=--seed,
  train.total_timesteps=--timesteps (shipped: 20M; also sets its cosine LR
  schedule length), train.data_dir=a temp dir (checkpoints).
Configs:
  shipped        as shipped: vec backend Multiprocessing, 2 x 4096 envs,
                 LSTM (rnn_name=Recurrent), Muon optimizer, minibatch 32768,
                 bptt 64 (batch 2*4096*64 = 524288 steps per update)
  serial         same, vec.backend=Serial
  serial-nolstm  same as serial, rnn_name=None (plain MLP policy)
The final 32-rollout evaluation and checkpoint copy of pufferl.train() are not
run (they are not training).

IMPORTANT: PufferLib's Ocean CartPole truncates episodes at 200 steps
(MAX_STEPS 200, i.e. CartPole-v0 length, not CartPole-v1's 500), and gives
reward 0 on the final step. A mean return >= 475 is therefore impossible on
it: solve_s is always null. The env reports per-episode "score" (= episode
length); solve_equiv_s is the time the mean score of the latest >=100 finished
episodes first reaches 190 = 95% of the 200 cap (475/500 is 95% of
CartPole-v1's cap). The Ocean env reports episode stats aggregated per env step
(mean and count n), so the window is the most recent such chunks adding up to
at least 100 episodes. (PufferLib's gymnasium "classic_control" cartpole
integration cannot be used instead: in 3.0.0 it imports a module that is not
shipped, pufferlib.postprocess, and it aliases cartpole to CartPole-v0.)

Measures, per run (one JSON line on stdout; PufferLib's dashboard goes to
/dev/null):
  sps     global_step / wall time of the evaluate()/train() loop (import, env,
          policy and PuffeRL construction excluded; init_s reports those)
"""

import argparse
import contextlib
import importlib.metadata as md
import json
import os
import platform
import random
import shutil
import sys
import tempfile
import time
from collections import deque

import numpy as np
import pufferlib.pufferl as pufferl
import torch

ENV_NAME = "puffer_cartpole"
CAP = 200  # Ocean CartPole MAX_STEPS
EQUIV_SCORE = 0.95 * CAP
WINDOW = 100

CONFIGS = {
    "shipped": {"backend": None, "rnn": True},
    "serial": {"backend": "Serial", "rnn": True},
    "serial-nolstm": {"backend": "Serial", "rnn": False},
}


class Watch:
    """Finished-episode stats from the env infos; each info dict is the mean
    over the n episodes that ended since the previous report."""

    def __init__(self, t0_ref):
        self.t0_ref = t0_ref
        self.chunks = deque()  # (n, mean_score, mean_perf)
        self.in_window = 0.0
        self.episodes = 0.0
        self.solve_equiv_s = None
        self.steps_to_solve_equiv = None
        self.step_ref = None
        self.best_mean_score = None

    def add(self, n, score, perf):
        self.chunks.append((n, score, perf))
        self.in_window += n
        self.episodes += n
        while self.chunks and self.in_window - self.chunks[0][0] >= WINDOW:
            self.in_window -= self.chunks.popleft()[0]
        if self.in_window >= WINDOW:
            m = self.mean_score()
            if self.best_mean_score is None or m > self.best_mean_score:
                self.best_mean_score = m
            if self.solve_equiv_s is None and m >= EQUIV_SCORE:
                self.solve_equiv_s = time.perf_counter() - self.t0_ref[0]
                self.steps_to_solve_equiv = int(self.step_ref())

    def mean_score(self):
        return sum(n * s for n, s, _ in self.chunks) / self.in_window

    def mean_return(self):
        # perf = episode_return / 200 in the Ocean env
        return sum(n * p for n, _, p in self.chunks) / self.in_window * CAP


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", choices=sorted(CONFIGS), default="shipped")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--timesteps", type=int, default=2_000_000, help="budget (shipped config trains 20M)"
    )
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    args = ap.parse_args()
    cfg = CONFIGS[args.config]

    torch.set_num_threads(args.threads)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)

    data_dir = tempfile.mkdtemp(prefix="puffer_ckpt_")
    over = [
        "--train.device",
        "cpu",
        "--train.seed",
        str(args.seed),
        "--vec.seed",
        str(args.seed),
        "--train.total-timesteps",
        str(args.timesteps),
        "--train.data-dir",
        data_dir,
    ]
    if cfg["backend"]:
        over += ["--vec.backend", cfg["backend"]]
    saved_argv = sys.argv
    sys.argv = [saved_argv[0]] + over
    try:
        pargs = pufferl.load_config(ENV_NAME)
    finally:
        sys.argv = saved_argv
    if not cfg["rnn"]:
        pargs["rnn_name"] = None
        pargs["train"]["use_rnn"] = False

    devnull = open(os.devnull, "w")  # noqa: SIM115 (silences PufferLib for the whole run)
    t_init = time.perf_counter()
    with contextlib.redirect_stdout(devnull):
        vecenv = pufferl.load_env(ENV_NAME, pargs)
        policy = pufferl.load_policy(pargs, vecenv)
        train_config = dict(**pargs["train"], env=ENV_NAME)
        trainer = pufferl.PuffeRL(train_config, vecenv, policy)
    init_s = time.perf_counter() - t_init

    t0 = [0.0]
    watch = Watch(t0)
    watch.step_ref = lambda: trainer.global_step
    orig_recv = vecenv.recv

    def recv():
        out = orig_recv()
        for info in out[4]:
            n = info.get("n") if isinstance(info, dict) else None
            if n:
                watch.add(float(n), float(info["score"]), float(info["perf"]))
        return out

    vecenv.recv = recv

    budget = train_config["total_timesteps"]
    try:
        if budget < train_config["batch_size"]:
            # PuffeRL divides by total_timesteps // batch_size
            raise SystemExit(
                f"--timesteps {budget} is below one PuffeRL batch "
                f"({train_config['batch_size']} steps)"
            )
        t0[0] = time.perf_counter()
        with contextlib.redirect_stdout(devnull):
            while trainer.global_step < budget:
                trainer.evaluate()
                trainer.train()
        wall = time.perf_counter() - t0[0]
        steps = int(trainer.global_step)
    finally:
        # PuffeRL's Utilization thread is not a daemon: without stop() a
        # failed run would never exit
        with contextlib.redirect_stdout(devnull):
            trainer.utilization.stop()
            vecenv.close()
        shutil.rmtree(data_dir, ignore_errors=True)

    have = watch.in_window >= WINDOW
    print(
        json.dumps(
            {
                "peer": "pufferlib",
                "config": args.config,
                "seed": args.seed,
                "sps": round(steps / wall, 1),
                "solve_s": None,  # return >= 475 unreachable: 200-step cap
                "steps_to_solve": None,
                "solve_equiv_s": None
                if watch.solve_equiv_s is None
                else round(watch.solve_equiv_s, 2),
                "steps_to_solve_equiv": watch.steps_to_solve_equiv,
                "solve_equiv_rule": f"mean score (episode length) of latest >={WINDOW} episodes "
                f">= {EQUIV_SCORE:g} of a {CAP}-step cap",
                "env": ENV_NAME,
                "episode_cap": CAP,
                "total_timesteps": steps,
                "budget": budget,
                "wall_s": round(wall, 2),
                "init_s": round(init_s, 2),
                "updates": int(trainer.epoch),
                "batch_size": int(train_config["batch_size"]),
                "num_agents": int(vecenv.num_agents),
                "backend": type(vecenv).__name__,
                "use_rnn": bool(train_config["use_rnn"]),
                "episodes": int(watch.episodes),
                "final_mean_score_100": round(watch.mean_score(), 1) if have else None,
                "final_mean_return_100": round(watch.mean_return(), 1) if have else None,
                "best_mean_score_100": None
                if watch.best_mean_score is None
                else round(watch.best_mean_score, 1),
                "torch_threads": torch.get_num_threads(),
                "device": "cpu",
                "versions": {
                    "pufferlib": md.version("pufferlib"),
                    "torch": torch.__version__,
                    "heavyball": md.version("heavyball"),
                    "numpy": np.__version__,
                    "python": platform.python_version(),
                },
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()

"""The training loop, top to bottom: storage allocated once, rollout, GAE, update, publish.

Tensor name prefixes tell the shape: rollout storage is (num_steps, num_envs, ...), `b_` is
flattened to (batch, ...), `mb_` is one minibatch.
"""

from __future__ import annotations

import json
import math
import os
import platform
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from operant.trainer.config import Config, Derived, derive, to_dict
from operant.trainer.envs import make_env, resolve_impl
from operant.trainer.policy import ActorCritic, FlatParameters
from operant.trainer.ppo import compute_gae, ppo_update

PHASES = ("env", "forward", "store", "gae", "update", "publish")
SOLVE_WINDOW = 100  # episodes in the "mean of the last 100" that solves an env


@dataclass
class PhaseTimer:
    """Nanoseconds per named phase, accumulated over one update (cheap enough to stay on)."""

    totals: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PHASES, 0))

    def reset(self) -> None:
        for name in self.totals:
            self.totals[name] = 0

    def seconds(self) -> dict[str, float]:
        return {name: ns / 1e9 for name, ns in self.totals.items()}


def _as_tensor(buffer) -> torch.Tensor:
    """The env buffer as a tensor sharing its memory (numpy kernels) or itself (torch envs)."""
    return buffer if isinstance(buffer, torch.Tensor) else torch.from_numpy(buffer)


class Trainer:
    """One PPO run: owns the envs, the policy, the storage and the run directory."""

    def __init__(self, config: Config, log: Callable[[dict[str, Any]], None] | None = None,
                 run_dir: Path | None = None):
        self.config = config
        self.derived: Derived = derive(config)
        self.impl = resolve_impl(config.env.id, config.env.impl)
        self.log = log
        self.run_dir = run_dir
        self.device = torch.device(config.train.device)
        torch.manual_seed(config.train.seed)
        np.random.seed(config.train.seed % 2**32)
        if config.train.torch_threads and self.device.type == "cpu":
            torch.set_num_threads(config.train.torch_threads)
        self.generator = torch.Generator(device=self.device).manual_seed(config.train.seed)
        self.cpu_generator = torch.Generator().manual_seed(config.train.seed + 1)

        env_kwargs: dict[str, Any] = {}
        if config.env.max_episode_steps is not None:
            env_kwargs["max_episode_steps"] = config.env.max_episode_steps
        self.env = make_env(config.env.id, config.env.num_envs, impl=self.impl, copy=False,
                            **env_kwargs)
        self.env.reset(seed=config.train.seed)
        obs_dim = self.env.single_observation_space.shape[0]
        num_actions = int(self.env.single_action_space.n)
        self.policy = ActorCritic(obs_dim, num_actions, config.policy.hidden_sizes,
                                  config.policy.activation).to(self.device)
        self.flat = FlatParameters(self.policy)
        # One tensor, so Adam is a single fused kernel (CPU and CUDA alike).
        self.optimizer = torch.optim.Adam([self.flat.param], lr=config.ppo.learning_rate,
                                          eps=config.ppo.adam_eps, fused=True)

        # Env buffers seen as tensors: the same memory the kernel writes (no copies).
        self.env_obs = _as_tensor(self.env.obs)
        self.env_actions = _as_tensor(self.env.actions)
        self.env_rewards = _as_tensor(self.env.rewards)
        self.env_terminated = _as_tensor(self.env.terminated)
        self.env_truncated = _as_tensor(self.env.truncated)
        self.env_final_obs = _as_tensor(self.env.final_obs)

        steps, num_envs = config.ppo.num_steps, config.env.num_envs
        device = self.device
        self.obs = torch.zeros((steps, num_envs, obs_dim), device=device)
        self.actions = torch.zeros((steps, num_envs), dtype=torch.long, device=device)
        self.logprobs = torch.zeros((steps, num_envs), device=device)
        self.rewards = torch.zeros((steps, num_envs), device=device)
        self.dones = torch.zeros((steps, num_envs), device=device)
        self.values = torch.zeros((steps, num_envs), device=device)
        self.advantages = torch.zeros((steps, num_envs), device=device)
        self.done_mask = torch.zeros(num_envs, dtype=torch.bool, device=self.env_terminated.device)

        self.global_step = 0
        self.update = 0
        self.episodes = 0
        self.timer = PhaseTimer()
        self.solved_at: float | None = None
        self.last_record: dict[str, Any] = {}

    # -- rollout -------------------------------------------------------------------------
    @torch.inference_mode()
    def collect(self) -> torch.Tensor:
        """Fill the rollout storage; returns V(obs after the last step)."""
        ppo = self.config.ppo
        totals = self.timer.totals
        clock = time.perf_counter_ns
        on_cpu = self.device.type == "cpu"
        for t in range(ppo.num_steps):
            started = clock()
            obs = self.env_obs if on_cpu else self.env_obs.to(self.device, non_blocking=True)
            actions, logprob, value = self.policy.act(obs, self.generator)
            forwarded = clock()
            self.obs[t].copy_(obs)
            self.actions[t].copy_(actions)
            self.logprobs[t].copy_(logprob)
            self.values[t].copy_(value)
            self.env_actions.copy_(actions)
            stored = clock()
            self.env.step_bound()
            stepped = clock()
            rewards = self.rewards[t]
            rewards.copy_(self.env_rewards)
            torch.logical_or(self.env_terminated, self.env_truncated, out=self.done_mask)
            self.dones[t].copy_(self.done_mask)
            if self.env.truncated.any():
                # A time limit is not a terminal state: bootstrap from the final observation.
                final = self.env_final_obs if on_cpu else self.env_final_obs.to(self.device)
                truncated = self.env_truncated if on_cpu else self.env_truncated.to(self.device)
                rewards.add_(ppo.gamma * self.policy.value(final) * truncated)
            finished = clock()
            totals["forward"] += forwarded - started
            totals["store"] += (stored - forwarded) + (finished - stepped)
            totals["env"] += stepped - stored
        self.global_step += ppo.num_steps * self.config.env.num_envs
        obs = self.env_obs if on_cpu else self.env_obs.to(self.device)
        return self.policy.value(obs)

    # -- one update ----------------------------------------------------------------------
    def train_update(self) -> dict[str, Any]:
        config, derived = self.config, self.derived
        if config.ppo.anneal_lr:
            fraction = 1.0 - self.update / derived.num_updates
            for group in self.optimizer.param_groups:
                group["lr"] = fraction * config.ppo.learning_rate
        # "publish" is the time spent publishing the previous update (it happens after its
        # record is made), so it survives the reset.
        published_ns = self.timer.totals["publish"]
        self.timer.reset()
        self.timer.totals["publish"] = published_ns
        update_started = time.perf_counter()
        next_value = self.collect()

        clock = time.perf_counter_ns
        started = clock()
        advantages, returns = compute_gae(self.rewards, self.values, self.dones, next_value,
                                          config.ppo.gamma, config.ppo.gae_lambda,
                                          advantages=self.advantages)
        gae_done = clock()
        obs_dim = self.obs.shape[-1]
        stats = ppo_update(
            self.policy, self.flat, self.optimizer, config.ppo,
            b_obs=self.obs.reshape(-1, obs_dim), b_actions=self.actions.reshape(-1),
            b_logprobs=self.logprobs.reshape(-1), b_advantages=advantages.reshape(-1),
            b_returns=returns.reshape(-1), b_values=self.values.reshape(-1),
            minibatch_size=derived.minibatch_size, generator=self.cpu_generator)
        update_done = clock()
        self.timer.totals["gae"] += gae_done - started
        self.timer.totals["update"] += update_done - gae_done
        self.update += 1
        return self._record(stats, time.perf_counter() - update_started)

    def _record(self, stats: dict[str, float], update_seconds: float) -> dict[str, Any]:
        episode = self.env.drain_episode_stats()
        self.episodes += episode.episodes
        recent = self.env.recent_returns(SOLVE_WINDOW)
        elapsed = time.perf_counter() - self.started
        steps_this_update = self.config.ppo.num_steps * self.config.env.num_envs
        record: dict[str, Any] = {
            "update": self.update,
            "global_step": self.global_step,
            "episodes": self.episodes,
            "elapsed_s": round(elapsed, 4),
            "sps": round(steps_this_update / update_seconds, 1),
            "sps_mean": round(self.global_step / elapsed, 1) if elapsed > 0 else 0.0,
            # Mean of the last 100 finished episodes (the usual "solved" window).
            "episode_return_mean": float(recent.mean()) if len(recent) else None,
            "episode_return_min": episode.return_min if episode.episodes else None,
            "episode_return_max": episode.return_max if episode.episodes else None,
            "episode_length_mean": episode.length_mean if episode.episodes else None,
            "episodes_this_update": episode.episodes,
            "learning_rate": self.optimizer.param_groups[0]["lr"],
            **{key: (None if isinstance(value, float) and not math.isfinite(value) else value)
               for key, value in stats.items()},
            "phase_s": {name: round(value, 6) for name, value in self.timer.seconds().items()},
        }
        target = self.config.train.target_return
        if (target is not None and self.solved_at is None and len(recent) >= SOLVE_WINDOW
                and recent.mean() >= target):
            self.solved_at = elapsed
            record["solved"] = True
        self.last_record = record
        return record

    def run(self, should_stop: Callable[[], bool] = lambda: False) -> dict[str, Any]:
        """Train for the configured budget (or to target_return); returns the last record."""
        self.started = time.perf_counter()
        while self.update < self.derived.num_updates and not should_stop():
            record = self.train_update()
            started = time.perf_counter_ns()
            if self.log is not None:
                self.log(record)
            self.timer.totals["publish"] = time.perf_counter_ns() - started
            if self.solved_at is not None and self.config.train.target_return is not None:
                break
        return self.last_record

    def save_model(self, path: Path) -> None:
        torch.save({"policy": self.policy.state_dict(), "config": to_dict(self.config),
                    "global_step": self.global_step}, path)


def run_metadata(config: Config, run_id: str, impl: str) -> dict[str, Any]:
    """What run.json records: enough to know what ran, where, with what."""
    import gymnasium

    from operant import __version__

    return {
        "run_id": run_id,
        "env_id": config.env.id,
        "env_impl": impl,
        "config": to_dict(config),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "started_at": time.time(),
        "argv": sys.argv,
        "versions": {"operant": __version__, "python": platform.python_version(),
                     "torch": torch.__version__, "numpy": np.__version__,
                     "gymnasium": gymnasium.__version__},
    }


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as handle:
        json.dump(data, handle, indent=2)
        handle.write("\n")
    os.replace(tmp, path)


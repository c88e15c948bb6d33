"""The training loop, top to bottom: storage allocated once, rollout, GAE, update, publish.

Tensor name prefixes tell the shape: rollout storage is (num_steps, num_envs, ...), `b_` is
flattened to (batch, ...), `mb_` is one minibatch.
"""

from __future__ import annotations

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

from operant.shared import atomic
from operant.trainer.config import Config, Derived, derive, to_dict
from gymnasium import spaces

from operant.trainer.envs import EnvError, make_env, resolve_impl
from operant.trainer.normalize import ObservationNormalizer, RewardNormalizer
from operant.trainer.policy import ActorCritic, FlatAdam, FlatParameters
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


def _always() -> bool:
    return True


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
        if self.impl == "torch":
            # Device-resident envs: observations, rewards and flags never leave the device.
            env_kwargs["device"] = self.device
        self.env = make_env(config.env.id, config.env.num_envs, impl=self.impl, copy=False,
                            overlap=config.env.overlap, **env_kwargs)
        self.env.reset(seed=config.train.seed)
        obs_dim = self.env.single_observation_space.shape[0]
        action_space = self.env.single_action_space
        self.continuous = isinstance(action_space, spaces.Box)
        if self.continuous:
            action_shape: tuple[int, ...] = tuple(action_space.shape)
            num_actions = int(np.prod(action_shape))
            # Samples are unbounded; the env sees them clipped to its bounds.
            self.action_low = torch.as_tensor(action_space.low, device=self.device)
            self.action_high = torch.as_tensor(action_space.high, device=self.device)
        elif isinstance(action_space, spaces.Discrete):
            action_shape, num_actions = (), int(action_space.n)
        else:
            raise EnvError(f"{config.env.id} has {action_space} actions; operant trains "
                           "Discrete and Box action spaces")
        self.policy = ActorCritic.from_config(config.policy, obs_dim, num_actions,
                                              self.continuous).to(self.device)
        norm = config.normalize
        self.obs_normalizer = (ObservationNormalizer(obs_dim, norm.clip_obs).to(self.device)
                               if norm.obs else None)
        self.reward_normalizer = (
            RewardNormalizer(config.env.num_envs, config.ppo.gamma, norm.clip_reward).to(self.device)
            if norm.reward else None)
        self.flat = FlatParameters(self.policy)
        # Adam over the one flat tensor: five in-place ops per step, on any device.
        self.optimizer = FlatAdam(self.flat.param, lr=config.ppo.learning_rate,
                                  eps=config.ppo.adam_eps)

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
        self.actions = torch.zeros((steps, num_envs, *action_shape), device=device,
                                   dtype=torch.float32 if self.continuous else torch.long)
        self.logprobs = torch.zeros((steps, num_envs), device=device)
        self.rewards = torch.zeros((steps, num_envs), device=device)
        self.dones = torch.zeros((steps, num_envs), device=device)
        self.values = torch.zeros((steps, num_envs), device=device)
        self.advantages = torch.zeros((steps, num_envs), device=device)
        self.done_mask = torch.zeros(num_envs, dtype=torch.bool, device=self.env_terminated.device)
        # Per-step scratch, so the rollout allocates nothing after its first step.
        self.truncated = torch.zeros(num_envs, device=device)
        self.final_values = torch.zeros(num_envs, device=device)
        self.next_value = torch.zeros(num_envs, device=device)
        self.returns = torch.zeros((steps, num_envs), device=device)
        self.clipped_actions = (torch.zeros((num_envs, *action_shape), device=device)
                                if self.continuous else None)
        if config.env.overlap:
            # Per half: its rows, and views of its env observations, actions and clip scratch.
            self._halves = tuple(
                (slice(lo, hi), self.env_obs[lo:hi], self.env_actions[lo:hi],
                 None if self.clipped_actions is None else self.clipped_actions[lo:hi])
                for lo, hi in self.env.halves)

        self.global_step = 0
        self.update = 0
        self.episodes = 0
        self.timer = PhaseTimer()
        self.solved_at: float | None = None
        self.last_record: dict[str, Any] = {}
        # Seconds trained before this process started: a resumed run's clock continues.
        self.elapsed_offset_s = 0.0
        self.started: float | None = None

    # -- rollout -------------------------------------------------------------------------
    def _truncation_check(self) -> Callable[[], bool]:
        """Whether to bootstrap truncated episodes this step. Native and reference envs keep
        their flags in host memory, where asking costs nothing (and allocates nothing);
        device-resident envs on CPU ask torch; on an accelerator always bootstrap, since
        asking would make the host wait for the device every step."""
        if isinstance(self.env.truncated, np.ndarray):
            return self.env.truncated.any
        if self.env_truncated.device.type == "cpu":
            return self.env_truncated.any
        return _always

    @torch.inference_mode()
    def collect(self) -> torch.Tensor:
        """Fill the rollout storage; returns V(obs after the last step)."""
        if self.config.env.overlap:
            return self._collect_overlapped()
        totals = self.timer.totals
        clock = time.perf_counter_ns
        some_truncated = self._truncation_check()
        everything = slice(None)
        for t in range(self.config.ppo.num_steps):
            self._act(t, everything, self.env_obs, self.env_actions, self.clipped_actions)
            stepped_from = clock()
            self.env.step_bound()
            stepped = clock()
            self._after_step(t, some_truncated)
            totals["env"] += stepped - stepped_from
            totals["store"] += clock() - stepped
        return self._finish_rollout()

    def _collect_overlapped(self) -> torch.Tensor:
        """collect() with the envs in two halves, A and B, each stepped on the env thread
        while the policy works on the other: A's step t runs during B's forward t, B's step t
        during A's forward t + 1. Step t's bookkeeping (rewards, dones, bootstrap) runs over
        all envs once both halves have taken it, exactly as in collect()."""
        totals = self.timer.totals
        clock = time.perf_counter_ns
        some_truncated = self._truncation_check()
        env = self.env
        (a_rows, a_obs, a_actions, a_clipped), (b_rows, b_obs, b_actions, b_clipped) = self._halves
        for t in range(self.config.ppo.num_steps):
            self._act(t, a_rows, a_obs, a_actions, a_clipped)
            if t > 0:
                waited_from = clock()
                env.finish_half(1)
                waited = clock()
                self._after_step(t - 1, some_truncated)
                totals["env"] += waited - waited_from
                totals["store"] += clock() - waited
            env.start_half(0)
            self._act(t, b_rows, b_obs, b_actions, b_clipped)
            waited_from = clock()
            env.finish_half(0)
            env.start_half(1)
            totals["env"] += clock() - waited_from
        waited_from = clock()
        env.finish_half(1)
        waited = clock()
        self._after_step(self.config.ppo.num_steps - 1, some_truncated)
        totals["env"] += waited - waited_from
        totals["store"] += clock() - waited
        return self._finish_rollout()

    def _act(self, t: int, rows: slice, env_obs: torch.Tensor, env_actions: torch.Tensor,
             clipped: torch.Tensor | None) -> None:
        """The policy on `rows` of the envs at step t: sample into the storage, keep the
        observation, write the actions the envs will take (clipped to a Box's bounds)."""
        clock = time.perf_counter_ns
        started = clock()
        obs = self._observe(env_obs, update=True)
        actions = self.policy.act(obs, self.generator, out=(
            self.actions[t, rows], self.logprobs[t, rows], self.values[t, rows]))[0]
        forwarded = clock()
        self.obs[t, rows].copy_(obs)
        if clipped is not None:
            torch.clamp(actions, self.action_low, self.action_high, out=clipped)
            actions = clipped
        env_actions.copy_(actions)
        totals = self.timer.totals
        totals["forward"] += forwarded - started
        totals["store"] += clock() - forwarded

    def _after_step(self, t: int, some_truncated: Callable[[], bool]) -> None:
        """Step t's outcome into the storage: rewards (normalised if configured; a truncated
        episode's reward plus gamma * V(final observation), since a time limit is not a
        terminal state) and dones."""
        rewards = self.rewards[t]
        rewards.copy_(self.env_rewards)
        torch.logical_or(self.env_terminated, self.env_truncated, out=self.done_mask)
        self.dones[t].copy_(self.done_mask)
        if self.reward_normalizer is not None:
            rewards.copy_(self.reward_normalizer(rewards, self.dones[t]))
        if some_truncated():
            final_value = self.policy.value(self._observe(self.env_final_obs),
                                            out=self.final_values)
            self.truncated.copy_(self.env_truncated)
            rewards.addcmul_(final_value, self.truncated, value=self.config.ppo.gamma)

    def _finish_rollout(self) -> torch.Tensor:
        self.global_step += self.config.ppo.num_steps * self.config.env.num_envs
        return self.policy.value(self._observe(self.env_obs), out=self.next_value)

    def _observe(self, env_obs: torch.Tensor, update: bool = False) -> torch.Tensor:
        """An env observation buffer as the policy sees it: on its device, normalised if
        configured (`update` folds it into the running statistics)."""
        obs = env_obs if env_obs.device == self.device else env_obs.to(self.device, non_blocking=True)
        if self.obs_normalizer is not None:
            obs = self.obs_normalizer(obs, update=update)
        return obs

    # -- one update ----------------------------------------------------------------------
    def train_update(self) -> dict[str, Any]:
        config, derived = self.config, self.derived
        if config.ppo.anneal_lr:
            fraction = 1.0 - self.update / derived.num_updates
            self.optimizer.lr = fraction * config.ppo.learning_rate
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
                                          advantages=self.advantages, returns=self.returns)
        gae_done = clock()
        stats = ppo_update(self.policy, self.flat, self.optimizer, config.ppo,
                           **self.flat_batch(advantages, returns),
                           minibatch_size=derived.minibatch_size, generator=self.cpu_generator)
        update_done = clock()
        self.timer.totals["gae"] += gae_done - started
        self.timer.totals["update"] += update_done - gae_done
        self.update += 1
        return self._record(stats, time.perf_counter() - update_started)

    def flat_batch(self, advantages: torch.Tensor, returns: torch.Tensor) -> dict[str, torch.Tensor]:
        """The rollout storage flattened to (batch, ...) views: ppo_update's `b_` arguments."""
        return {"b_obs": self.obs.reshape(-1, self.obs.shape[-1]),
                "b_actions": self.actions.reshape(self.derived.batch_size, *self.actions.shape[2:]),
                "b_logprobs": self.logprobs.reshape(-1), "b_advantages": advantages.reshape(-1),
                "b_returns": returns.reshape(-1), "b_values": self.values.reshape(-1)}

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
            "learning_rate": self.optimizer.lr,
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
        self.started = time.perf_counter() - self.elapsed_offset_s
        while self.update < self.derived.num_updates and not should_stop():
            record = self.train_update()
            started = time.perf_counter_ns()
            if self.log is not None:
                self.log(record)
            self.timer.totals["publish"] = time.perf_counter_ns() - started
            if self.solved_at is not None and self.config.train.target_return is not None:
                break
        return self.last_record

    def elapsed_s(self) -> float:
        """Seconds this run has trained, across resumes."""
        if self.started is None:
            return self.elapsed_offset_s
        return time.perf_counter() - self.started

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue this run bit for bit, as tensors and plain containers
        under explicit names (operant.trainer.state says which and why)."""
        from operant.trainer.state import trainer_state_dict

        return trainer_state_dict(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from `state_dict()` output; raises CheckpointError if it does not fit."""
        from operant.trainer.state import load_trainer_state_dict

        load_trainer_state_dict(self, state)

    def check_finite(self) -> None:
        """The NaN guard after an update: raise FloatingPointError naming the first parameter
        that holds a NaN or an infinity (one reduction when all are finite)."""
        if self.flat.all_finite():
            return
        for name, parameter in self.policy.named_parameters():
            if not bool(torch.isfinite(parameter).all()):
                raise FloatingPointError(
                    f"non-finite values in parameter {name} after update {self.update}")

    def save_model(self, path: Path) -> None:
        """The policy with what it needs to act: its config and normalisation statistics."""
        model: dict[str, Any] = {"policy": self.policy.state_dict(), "config": to_dict(self.config),
                                 "global_step": self.global_step}
        if self.obs_normalizer is not None:
            model["obs_normalizer"] = self.obs_normalizer.state_dict()
        if self.reward_normalizer is not None:
            model["reward_normalizer"] = self.reward_normalizer.state_dict()
        atomic.write_with(path, lambda handle: torch.save(model, handle))


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


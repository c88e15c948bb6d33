"""The training loop, top to bottom: storage allocated once, rollout, GAE, update, publish.

Tensor name prefixes tell the shape: rollout storage (operant.trainer.loop.storage) is
(num_steps, rows, ...), `b_` is flattened to (batch, ...), `mb_` is one minibatch. A row is
an env or an agent of an env (operant.envs.contract); the loop does not know which.
"""

from __future__ import annotations

import os
import platform
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from operant.envs import resolve_impl
from operant.envs.contract import ProfilesStep
from operant.shared import atomic
from operant.shared.record import PHASES, UpdateRecord
from operant.trainer.config import Config, Derived, build_env, derive, to_dict
from operant.trainer.loop.collect import as_tensor, make_collector
from operant.trainer.loop.flat import FlatAdam, FlatParameters
from operant.trainer.loop.fused import make_native
from operant.trainer.loop.normalize import (
    ObservationNormalizer,
    RewardNormalizer,
    check_obs_normalizable,
)
from operant.trainer.loop.ppo import compute_gae, ppo_update, update_path
from operant.trainer.loop.storage import RolloutStorage
from operant.trainer.loop.update_record import make_record
from operant.trainer.policies import user as user_policy
from operant.trainer.policies.registry import choose_policy
from operant.trainer.run.allocator import keep_freed_memory

# Rank r seeds its sampling generators with train.seed + r * this (rank 0: a lone trainer's).
RANK_SEED_STRIDE = 1_000_003


@dataclass
class PhaseTimer:
    """Nanoseconds per named phase, accumulated over one update (cheap enough to stay on)."""

    totals: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PHASES, 0))

    def reset(self) -> None:
        for name in self.totals:
            self.totals[name] = 0

    def seconds(self) -> dict[str, float]:
        return {name: ns / 1e9 for name, ns in self.totals.items()}


class Trainer:
    """One PPO run: composes the env (any family of operant.envs.contract), the rollout
    storage built from its specs, a collector, the policy the registry chooses for those
    specs, and the optimizer; owns the counters and the run directory. Nothing here knows
    which family it trains."""

    def __init__(
        self,
        config: Config,
        log: Callable[[UpdateRecord], None] | None = None,
        run_dir: Path | None = None,
        group: Any = None,
        derived: Derived | None = None,
    ):
        """`derived`: the batch the run's plan settled (RunPlan.settle, from the preflight's
        env); None derives it here from the env built."""
        self.config = config
        # Under torchrun, this rank's place in the run (operant.trainer.distributed.group); None
        # trains alone.
        self.group = group
        self.rank = group.rank if group is not None else 0
        world = group.world_size if group is not None else 1
        # Minibatch tensors reuse freed heap memory instead of faulting in fresh pages.
        keep_freed_memory()
        self.impl = resolve_impl(config.env.id, config.env.impl)
        self.log = log
        self.run_dir = run_dir
        self.device = torch.device(config.train.device)
        torch.manual_seed(config.train.seed)
        np.random.seed(config.train.seed % 2**32)
        if config.train.torch_threads and self.device.type == "cpu":
            torch.set_num_threads(config.train.torch_threads)
        # Each rank samples and shuffles with its own streams; rank 0's are a lone trainer's.
        self.rank_seed = config.train.seed + RANK_SEED_STRIDE * self.rank
        self.generator = torch.Generator(device=self.device).manual_seed(self.rank_seed)
        self.cpu_generator = torch.Generator().manual_seed(self.rank_seed + 1)
        self.reseeded: tuple[str, ...] = ()
        """Generators a resume could not restore (a checkpoint of another device type)."""

        local_envs = config.env.num_envs // world
        self.env = self._make_env(local_envs)
        # Rank r's envs are envs r * n .. r * n + n - 1 of a lone trainer's, seeds included.
        self.env.reset(seed=config.train.seed + self.rank * local_envs)
        obs_spec, act_spec, layout = self.env.obs_spec, self.env.act_spec, self.env.layout
        self.derived: Derived = derived or derive(config, layout.agents_per_env, world)
        rows = config.ppo.num_steps * layout.agents_per_env
        if (self.derived.world_size, self.derived.rows_per_env) != (world, rows):
            raise ValueError(  # a caller's bug: the plan was settled for another env or group
                f"derived for {self.derived.world_size} ranks of {self.derived.rows_per_env} "
                f"rows per env; this trainer is one of {world} with {rows}"
            )
        self._build_policy(obs_spec, act_spec, layout)
        self._build_storage(obs_spec, act_spec, layout)
        self.votes: Callable[[], tuple[bool, ...]] = lambda: ()
        """Under torchrun: this rank's votes for the next update boundary (the session's
        GroupCheckpoints sets it), gathered with the update's record; `decision` is their OR
        over the ranks, the same on every rank."""
        self.decision: tuple[bool, ...] = ()
        self.rank_record: UpdateRecord | None = None
        """This rank's own record of the last update (its steps, steps/s, episodes): what
        its metrics file publishes. `last_record` is the run's, pooled over the ranks."""

        self.global_step = 0
        self.update = 0
        self.episodes = 0
        self.solved_at: float | None = None
        self.last_record: UpdateRecord | None = None
        # The env's own per-phase ns (Grid-v0 with OPERANT_PROFILING=1) at the last record.
        self.env_timing_ns: dict[str, int] = {}
        # Seconds trained before this process started: a resumed run's clock continues.
        self.elapsed_offset_s = 0.0
        self.started: float | None = None

    def _build_policy(self, obs_spec: Any, act_spec: Any, layout: Any) -> None:
        """Build the policy, its observation/reward normalizers, and its flat Adam."""
        config = self.config
        norm = config.normalize
        if norm.obs:
            check_obs_normalizable(obs_spec, config.env.id)
        chosen = choose_policy(config.policy.kind, obs_spec, act_spec)
        self.policy_name = chosen.name
        """The registered policy trained ("auto" chooses by the observation spec)."""
        self.policy = chosen.build(config, obs_spec, act_spec).to(self.device)
        self.obs_normalizer = (
            ObservationNormalizer(obs_spec.shape, norm.clip_obs).to(self.device)
            if norm.obs
            else None
        )
        self.reward_normalizer = (
            RewardNormalizer(layout.num_rows, config.ppo.gamma, norm.clip_reward).to(self.device)
            if norm.reward
            else None
        )
        self.flat = FlatParameters(self.policy)
        # Adam over the one flat tensor: five in-place ops per step, on any device.
        self.optimizer = FlatAdam(
            self.flat.param, lr=config.ppo.learning_rate, eps=config.ppo.adam_eps
        )
        # ppo.update_impl: the C update and rollout forward where they cover the run.
        self.native = make_native(config, self.policy, self.flat, self.device)
        # The update's path, chosen once: the native MLP update, the heads' native loss, or
        # torch autograd (operant.trainer.loop.ppo.update_path).
        self.update_path = update_path(
            self.policy,
            self.flat,
            self.optimizer,
            config.ppo,
            self.derived.local_minibatch_size,
            self.device,
            self.group,
            self.native,
        )
        if self.group is not None:
            self.group.reserve_shared(self.flat.grad)

    def _build_storage(self, obs_spec: Any, act_spec: Any, layout: Any) -> None:
        """Build the rollout storage, the phase timer, and the collector that fills it."""
        config = self.config
        flags_device = as_tensor(self.env.terminated).device
        self.storage = RolloutStorage(
            config.ppo.num_steps,
            layout.num_rows,
            obs_spec,
            act_spec,
            self.device,
            flags_device=flags_device,
        )
        self.timer = PhaseTimer()
        self.collector = make_collector(
            config.env.overlap,
            self.env,
            self.storage,
            self.policy,
            self._observe,
            self.reward_normalizer,
            self.generator,
            self.timer.totals,
            config.ppo.gamma,
        )

    def _make_env(self, num_envs: int) -> Any:
        config = self.config
        # A torch env on the training device: observations, rewards and flags never leave it.
        return build_env(
            config,
            num_envs,
            impl=self.impl,
            device=self.device,
            overlap=config.env.overlap,
            workers=config.env.workers,
        )

    # -- rollout -------------------------------------------------------------------------
    def collect(self) -> torch.Tensor:
        """Fill `self.storage` (the collector's strategy); returns V(obs after the last step)."""
        next_value = self.collector.collect()
        self.global_step += self.derived.batch_size
        return next_value

    def _observe(self, env_obs: torch.Tensor, update: bool = False) -> torch.Tensor:
        """An env observation buffer as the policy sees it: on its device, normalised if
        configured (`update` folds it into the running statistics)."""
        obs = (
            env_obs if env_obs.device == self.device else env_obs.to(self.device, non_blocking=True)
        )
        if self.obs_normalizer is not None:
            obs = self.obs_normalizer(obs, update=update)
        return obs

    # -- one update ----------------------------------------------------------------------
    def train_update(self) -> UpdateRecord:
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
        storage = self.storage
        compute_gae(
            storage.rewards,
            storage.values,
            storage.dones,
            next_value,
            config.ppo.gamma,
            config.ppo.gae_lambda,
            advantages=storage.advantages,
            returns=storage.returns,
        )
        gae_done = clock()
        stats = ppo_update(self.update_path, storage.flat(), self.cpu_generator)
        update_done = clock()
        self.timer.totals["gae"] += gae_done - started
        self.timer.totals["update"] += update_done - gae_done
        self.update += 1
        # The NaN guard: an update that left non-finite parameters is never recorded.
        self.check_finite()
        return make_record(self, stats, time.perf_counter() - update_started)

    def env_phases(self) -> tuple[str, ...]:
        """The env's own step phases, for an env that profiles its step; else ()."""
        if not (isinstance(self.env, ProfilesStep) and self.env.profiling):
            return ()
        return tuple(self.env.step_timing)

    def env_phase_seconds(self) -> dict[str, float] | None:
        """Seconds per env step phase during the last update, for an env that profiles its
        step (`step_timing`, read once per update: nothing on the per-step path); else None."""
        if not self.env_phases():
            return None
        timing, before = self.env.step_timing, self.env_timing_ns
        self.env_timing_ns = timing
        return {phase: round((ns - before.get(phase, 0)) / 1e9, 6) for phase, ns in timing.items()}

    def run(self, should_stop: Callable[[], bool] = lambda: False) -> UpdateRecord | None:
        """Train for the configured budget (or to target_return); returns the last record
        (None when no update was left to train)."""
        self.started = time.perf_counter() - self.elapsed_offset_s
        while self.update < self.derived.num_updates and not should_stop():
            record = user_policy.train_update(self)  # a user's network's failure named
            started = time.perf_counter_ns()
            if self.log is not None:
                self.log(record)
            self.timer.totals["publish"] = time.perf_counter_ns() - started
            if self.solved_at is not None and self.config.train.target_return is not None:
                break
        return self.last_record

    @property
    def finished(self) -> bool:
        """The run trained its whole budget, or stopped at train.target_return as asked."""
        solved = self.solved_at is not None and self.config.train.target_return is not None
        return self.update >= self.derived.num_updates or solved

    def elapsed_s(self) -> float:
        """Seconds this run has trained, across resumes."""
        if self.started is None:
            return self.elapsed_offset_s
        return time.perf_counter() - self.started

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue this run bit for bit, as tensors and plain containers
        under explicit names (operant.trainer.checkpoint.state says which and why)."""
        from operant.trainer.checkpoint.state import trainer_state_dict

        return trainer_state_dict(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from `state_dict()` output; raises CheckpointError if it does not fit."""
        from operant.trainer.checkpoint.state import load_trainer_state_dict

        load_trainer_state_dict(self, state)

    def check_finite(self) -> None:
        """The NaN guard, run by train_update after every update (so every caller of the loop
        has it): raise FloatingPointError naming the first parameter that holds a NaN or an
        infinity (one reduction when all are finite)."""
        if self.flat.all_finite():
            return
        for name, parameter in self.policy.named_parameters():
            if not bool(torch.isfinite(parameter).all()):
                raise FloatingPointError(
                    f"non-finite values in parameter {name} after update {self.update}"
                    + self._env_cause()
                )

    def _env_cause(self) -> str:
        """Where the env fed this update a NaN or an infinity (a reward or an observation
        of its rollout), said after the NaN guard's line: the parameter is the symptom."""
        storage = self.storage
        for what, values in (("reward", storage.rewards), ("observation", storage.obs)):
            if not values.dtype.is_floating_point:
                continue
            bad = ~torch.isfinite(values.reshape(values.shape[0], values.shape[1], -1)).all(-1)
            if bool(bad.any()):
                step, row = (int(index) for index in torch.nonzero(bad)[0])
                return (
                    f": the env returned a non-finite {what} in that update's rollout (row "
                    f"{row}, at step {step + 1} of {values.shape[0]}); fix the env, or bound "
                    "it with a gymnasium wrapper"
                )
        return ""

    def model_payload(self) -> dict[str, Any]:
        """model.pt's content: the policy with what it needs to act, its config and
        normalisation statistics (the tensors are the live ones, not copies)."""
        model: dict[str, Any] = {
            "policy": self.policy.state_dict(),
            "config": to_dict(self.config),
            "global_step": self.global_step,
            "update": self.update,
        }
        if self.obs_normalizer is not None:
            model["obs_normalizer"] = self.obs_normalizer.state_dict()
        if self.reward_normalizer is not None:
            model["reward_normalizer"] = self.reward_normalizer.state_dict()
        return model

    def save_model(self, path: Path) -> None:
        """Write `model_payload()` to `path`, whole or not at all, with its digest."""
        model = with_digest(self.model_payload())
        atomic.write_with(path, lambda handle: torch.save(model, handle))


def with_digest(model: dict[str, Any]) -> dict[str, Any]:
    """model.pt's (or best.pt's) content with `digest`: SHA-256 of the rest, as a checkpoint
    has (operant.trainer.checkpoint.file_format), so a reader finds a damaged file instead of
    acting with damaged weights (a zip's own checks miss a flipped byte in a tensor)."""
    from operant.trainer.checkpoint.file_format import content_digest

    return {**model, "digest": content_digest(model)}


def run_metadata(config: Config, run_id: str, impl: str, derived: Derived) -> dict[str, Any]:
    """What run.json records: enough to know what ran, where, with what. `total_steps` is the
    budget trained, train.total_steps rounded up to whole updates (the config keeps the one
    given)."""
    import gymnasium

    from operant import __version__

    return {
        "run_id": run_id,
        "env_id": config.env.id,
        "env_impl": impl,
        "config": to_dict(config),
        "total_steps": derived.total_steps,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "started_at": time.time(),
        "argv": sys.argv,
        "cwd": os.getcwd(),
        "versions": {
            "operant": __version__,
            "python": platform.python_version(),
            "torch": torch.__version__,
            "numpy": np.__version__,
            "gymnasium": gymnasium.__version__,
        },
    }

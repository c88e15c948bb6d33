"""Collectors: how one rollout fills the storage, as a strategy the Trainer composes.

A collector acts with the policy on rows of the env's buffers, steps the env, and stores
each step's outcome; `collect()` fills a whole `RolloutStorage` and returns V(observation
after the last step). Both strategies draw the same samples in the same order, so they fill
the storage bit for bit alike:

- `PlainCollector`: every row at once, step after step;
- `OverlappedCollector`: the rows in two halves, each stepped on the env's own thread while
  the policy works on the other (an env that offers `halves`, `start_half`, `finish_half`:
  trainer/envs/overlap.py).

Phases are timed once, in the shared helpers (`_act`: forward and store; `_wait_and_store`:
env and store), into the trainer's `PhaseTimer` totals.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import torch

from operant.trainer.storage import RolloutStorage


def _always() -> bool:
    return True


def as_tensor(buffer: Any) -> torch.Tensor:
    """An env buffer as a tensor sharing its memory (numpy buffers) or itself (torch envs)."""
    return buffer if isinstance(buffer, torch.Tensor) else torch.from_numpy(buffer)


class RowSlice(NamedTuple):
    """Rows the policy acts on together: their index into the storage, and views of the env's
    observations, the env's actions and the clip scratch (None for discrete actions)."""

    rows: slice
    env_obs: torch.Tensor
    env_actions: torch.Tensor
    clipped: torch.Tensor | None


class Collector:
    """What both strategies share: acting on rows, and one step's outcome into the storage.

    `observe` turns an env observation buffer into what the policy sees (on its device,
    normalised if configured); `reward_normalizer` is None or called on each step's rewards.
    """

    def __init__(
        self,
        env: Any,
        storage: RolloutStorage,
        policy: Any,
        observe: Callable[..., torch.Tensor],
        reward_normalizer: Any,
        generator: torch.Generator,
        totals: dict[str, int],
        gamma: float,
    ):
        self.env, self.storage, self.policy = env, storage, policy
        self.observe, self.reward_normalizer = observe, reward_normalizer
        self.generator, self.totals, self.gamma = generator, totals, gamma
        # Env buffers seen as tensors: the same memory the kernel writes (no copies).
        self.env_obs = as_tensor(env.obs)
        self.env_actions = as_tensor(env.actions)
        self.env_rewards = as_tensor(env.rewards)
        self.env_terminated = as_tensor(env.terminated)
        self.env_truncated = as_tensor(env.truncated)
        self.env_final_obs = as_tensor(env.final_obs)
        act_spec = env.act_spec
        device = storage.values.device
        if not act_spec.discrete:
            # Samples are unbounded; the env sees them clipped to its bounds.
            self.action_low = torch.as_tensor(act_spec.low, device=device)
            self.action_high = torch.as_tensor(act_spec.high, device=device)
        self.everything = RowSlice(
            slice(None), self.env_obs, self.env_actions, storage.clipped_actions
        )

    def collect(self) -> torch.Tensor:
        """Fill the rollout storage; returns V(obs after the last step)."""
        raise NotImplementedError

    def _truncation_check(self) -> Callable[[], bool]:
        """Whether to bootstrap truncated episodes this step. Host envs keep their flags in
        host memory, where asking costs nothing (and allocates nothing); device-resident envs
        on CPU ask torch; on an accelerator always bootstrap, since asking would make the
        host wait for the device every step."""
        if isinstance(self.env.truncated, np.ndarray):
            return self.env.truncated.any
        if self.env_truncated.device.type == "cpu":
            return self.env_truncated.any
        return _always

    def _act(self, t: int, part: RowSlice) -> None:
        """The policy on `part`'s rows at step t: sample into the storage, keep the
        observation, write the actions the envs will take (clipped to a Box's bounds)."""
        clock = time.perf_counter_ns
        storage, rows = self.storage, part.rows
        started = clock()
        obs = self.observe(part.env_obs, update=True)
        actions = self.policy.act(
            obs,
            self.generator,
            out=(storage.actions[t, rows], storage.logprobs[t, rows], storage.values[t, rows]),
        )[0]
        forwarded = clock()
        storage.obs[t, rows].copy_(obs)
        if part.clipped is not None:
            torch.clamp(actions, self.action_low, self.action_high, out=part.clipped)
            actions = part.clipped
        part.env_actions.copy_(actions)
        self.totals["forward"] += forwarded - started
        self.totals["store"] += clock() - forwarded

    def _wait_and_store(
        self, t: int, wait: Callable[[], None], some_truncated: Callable[[], bool]
    ) -> None:
        """`wait()` for the env (timed as "env"), then store step t's outcome ("store")."""
        clock = time.perf_counter_ns
        waited_from = clock()
        wait()
        waited = clock()
        self._after_step(t, some_truncated)
        self.totals["env"] += waited - waited_from
        self.totals["store"] += clock() - waited

    def _after_step(self, t: int, some_truncated: Callable[[], bool]) -> None:
        """Step t's outcome into the storage: rewards (normalised if configured; a truncated
        episode's reward plus gamma * V(final observation), since a time limit is not a
        terminal state) and dones."""
        storage = self.storage
        rewards = storage.rewards[t]
        rewards.copy_(self.env_rewards)
        torch.logical_or(self.env_terminated, self.env_truncated, out=storage.done_mask)
        storage.dones[t].copy_(storage.done_mask)
        if self.reward_normalizer is not None:
            rewards.copy_(self.reward_normalizer(rewards, storage.dones[t]))
        if some_truncated():
            final_value = self.policy.value(
                self.observe(self.env_final_obs), out=storage.final_values
            )
            storage.truncated.copy_(self.env_truncated)
            rewards.addcmul_(final_value, storage.truncated, value=self.gamma)

    def _next_value(self) -> torch.Tensor:
        return self.policy.value(self.observe(self.env_obs), out=self.storage.next_value)


class PlainCollector(Collector):
    """Every row acts, then the env steps them all, `num_steps` times."""

    @torch.inference_mode()
    def collect(self) -> torch.Tensor:
        some_truncated = self._truncation_check()
        step = self.env.step_bound
        for t in range(self.storage.num_steps):
            self._act(t, self.everything)
            self._wait_and_store(t, step, some_truncated)
        return self._next_value()


class OverlappedCollector(Collector):
    """The rows in two halves, A and B, each stepped on the env thread while the policy works
    on the other: A's step t runs during B's forward t, B's step t during A's forward t + 1.
    Step t's bookkeeping (rewards, dones, bootstrap) runs over all rows once both halves
    have taken it, exactly as in the plain collector."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        clipped = self.storage.clipped_actions
        self.halves = tuple(
            RowSlice(
                slice(lo, hi),
                self.env_obs[lo:hi],
                self.env_actions[lo:hi],
                None if clipped is None else clipped[lo:hi],
            )
            for lo, hi in self.env.halves
        )

    @torch.inference_mode()
    def collect(self) -> torch.Tensor:
        some_truncated = self._truncation_check()
        env, totals, clock = self.env, self.totals, time.perf_counter_ns
        first, second = self.halves
        finish_second = self._finish_second
        for t in range(self.storage.num_steps):
            self._act(t, first)
            if t > 0:
                self._wait_and_store(t - 1, finish_second, some_truncated)
            env.start_half(0)
            self._act(t, second)
            waited_from = clock()
            env.finish_half(0)
            env.start_half(1)
            totals["env"] += clock() - waited_from
        self._wait_and_store(self.storage.num_steps - 1, finish_second, some_truncated)
        return self._next_value()

    def _finish_second(self) -> None:
        self.env.finish_half(1)


def make_collector(overlap: bool, *args: Any, **kwargs: Any) -> Collector:
    """The overlapped collector when `overlap` (env.overlap), else the plain one."""
    return (OverlappedCollector if overlap else PlainCollector)(*args, **kwargs)

"""Rollout storage: every tensor one rollout fills, allocated once from the env's specs.

Shapes say what a tensor holds (DESIGN: CleanRL's naming): rollout tensors are
`(num_steps, rows, ...)`, where a row is an env or an agent of an env (operant.envs.contract);
`flat()` gives the `b_` views PPO takes, `(num_steps * rows, ...)`, flattening only those two
batch dimensions, so a `uint8 (C, H, W)` observation stays `uint8 (batch, C, H, W)`.

Observations are stored in the observation spec's dtype (frames stay uint8: four times less
memory than float32, and the policy converts on the fly). Actions are int64 for a Discrete
spec and float32 for a Box spec. Everything else is float32 per row.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from operant.envs.contract import ActSpec, ObsSpec


def torch_dtype(dtype: np.dtype) -> torch.dtype:
    """The torch dtype with numpy `dtype`'s bytes and meaning."""
    return torch.from_numpy(np.empty(0, dtype=dtype)).dtype


class Batch(NamedTuple):
    """One update's rollout as flat `(B, ...)` tensors, what ppo_update reads."""

    obs: torch.Tensor
    actions: torch.Tensor
    logprobs: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    values: torch.Tensor


class RolloutStorage:
    """One rollout's tensors (`(steps, rows, ...)`) and the per-step scratch the collectors
    write into, so a rollout allocates nothing after its first step.

    Rollout: `obs`, `actions`, `logprobs`, `rewards`, `dones`, `values`, and what GAE writes,
    `advantages` and `returns`; `final_obs_steps` and `final_values_steps`, each step's final
    observations and V of those of the rows that truncated
    (operant.trainer.loop.collect.BatchedBootstrap);
    `terminated_steps` and `truncated_steps` (bool, on the device of the env's flags), where
    an env that writes into the storage itself puts its flags (operant.trainer.loop.collect). Per
    step (`(rows, ...)`): `done_mask` (bool, on the device of the env's flags), `truncated`,
    `final_values`, `next_value`, and `clipped_actions` for a Box action spec (None for
    Discrete).
    """

    def __init__(
        self,
        num_steps: int,
        num_rows: int,
        obs_spec: ObsSpec,
        act_spec: ActSpec,
        device: torch.device,
        flags_device: torch.device | None = None,
    ):
        self.num_steps, self.num_rows = num_steps, num_rows
        self.obs_spec, self.act_spec = obs_spec, act_spec
        continuous = not act_spec.discrete
        self.obs = torch.zeros(
            (num_steps, num_rows, *obs_spec.shape), device=device, dtype=torch_dtype(obs_spec.dtype)
        )
        self.actions = torch.zeros(
            (num_steps, num_rows, *act_spec.shape),
            device=device,
            dtype=torch.float32 if continuous else torch.long,
        )
        self.logprobs = torch.zeros((num_steps, num_rows), device=device)
        self.rewards = torch.zeros((num_steps, num_rows), device=device)
        self.dones = torch.zeros((num_steps, num_rows), device=device)
        self.values = torch.zeros((num_steps, num_rows), device=device)
        self.advantages = torch.zeros((num_steps, num_rows), device=device)
        flags_device = flags_device or device
        steps_rows = (num_steps, num_rows)
        self.terminated_steps = torch.zeros(steps_rows, dtype=torch.bool, device=flags_device)
        self.truncated_steps = torch.zeros(steps_rows, dtype=torch.bool, device=flags_device)
        self.done_mask = torch.zeros(num_rows, dtype=torch.bool, device=flags_device)
        self.truncated = torch.zeros(num_rows, device=device)
        self.final_values = torch.zeros(num_rows, device=device)
        self.final_values_steps = torch.zeros((num_steps, num_rows), device=device)
        self.final_obs_steps = torch.zeros_like(self.obs)
        self.next_value = torch.zeros(num_rows, device=device)
        self.returns = torch.zeros((num_steps, num_rows), device=device)
        self.clipped_actions = (
            torch.zeros((num_rows, *act_spec.shape), device=device) if continuous else None
        )

    @property
    def batch_size(self) -> int:
        return self.num_steps * self.num_rows

    def flat(self) -> Batch:
        """The rollout as `(batch, ...)` views, one update's Batch (call after GAE has filled
        `advantages` and `returns`)."""
        batch = self.batch_size
        return Batch(
            obs=self.obs.reshape(batch, *self.obs.shape[2:]),
            actions=self.actions.reshape(batch, *self.actions.shape[2:]),
            logprobs=self.logprobs.reshape(-1),
            advantages=self.advantages.reshape(-1),
            returns=self.returns.reshape(-1),
            values=self.values.reshape(-1),
        )

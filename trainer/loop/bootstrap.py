"""The truncation bootstrap of a rollout in host memory, deferred to the rollout's end.

A time limit is not a terminal state: a truncated episode's reward takes gamma * V(final
observation). Each step's final observations are kept in the storage's `final_obs_steps` (a
bound env's kernel writes them there itself; otherwise the collector copies them on steps
that truncate), and after the rollout every step on which some row truncated is valued: the
value network over all of that step's rows, gamma * V added to its truncated rows' rewards.
That is the per-step pass's arithmetic exactly, moved out of the step: the same rows in the
same positions of a batch of the same shape (a matrix product's rounding can depend on its
shape and on where a row falls in the BLAS's blocks, never on the other rows' values), so a
run with the torch update still reproduces main's records bit for bit
(tests/test_compat_main.py). A batch of the truncated rows alone, gathered, measured cheaper
when many rows truncate at once, but changed torch's values in their last bits; the native
MLP (operant.trainer.loop.fused), whose rows are each summed in one order wherever they fall,
values the truncated rows alone. Each row's value
is the network's at the rollout's parameters on the observation that step produced
(normalised with that step's statistics, where configured).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from operant.trainer.loop.storage import RolloutStorage


def batchable(storage: RolloutStorage, final_obs: torch.Tensor, truncated: torch.Tensor) -> bool:
    """Whether the batched bootstrap applies: the storage, the env's final observations and
    its flags all in host memory."""
    return all(tensor.device.type == "cpu" for tensor in (storage.obs, final_obs, truncated))


class BatchedBootstrap:
    """Values, after a rollout, the final observations of the steps on which rows truncated."""

    def __init__(self, storage: RolloutStorage, policy: Any):
        self.policy = policy
        self.final_obs = storage.final_obs_steps
        self.final_values = storage.final_values_steps
        self.truncated = storage.truncated_steps
        self.mask = storage.truncated  # float (rows,): the flags addcmul multiplies by
        self._flags = storage.truncated_steps.numpy().view(np.uint8)
        # The native MLP values the truncated rows alone (its rows do not round by batch
        # shape); any other policy takes the full-width pass.
        self._value_where = getattr(policy, "value_where", lambda *args: False)
        self.value_ns = 0
        """ns spent in the value network (the collector counts it as "forward")."""

    def finish(self, rewards: torch.Tensor, gamma: float, steps: np.ndarray | None = None) -> None:
        """After a rollout: each step's truncated rows valued, gamma * V added to `rewards`.
        `steps` (uint8, one per step), where the caller knows them, marks the steps on which
        some row truncated; else each step's flags are looked through here."""
        marked = steps.tolist() if steps is not None else None
        rewards_rows = rewards.numpy() if rewards.device.type == "cpu" else None
        for t in range(self._flags.shape[0]):
            if not (marked[t] if marked is not None else self._flags[t].any()):
                continue
            started = time.perf_counter_ns()
            values = self.final_values[t]
            if rewards_rows is not None and self._value_where(
                self.final_obs[t], self._flags[t], values, rewards_rows[t], gamma
            ):
                # gamma * V added to the truncated rows' rewards in the same C call (where
                # torch's copy and addcmul cost several microseconds)
                self.value_ns += time.perf_counter_ns() - started
                continue
            self.policy.value(self.final_obs[t], out=values)
            self.value_ns += time.perf_counter_ns() - started
            self.mask.copy_(self.truncated[t])
            rewards[t].addcmul_(values, self.mask, value=gamma)

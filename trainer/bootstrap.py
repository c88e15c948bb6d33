"""The truncation bootstrap of a rollout in host memory, batched (operant.cext.rollout_rows).

A time limit is not a terminal state: a truncated episode's reward takes gamma * V(final
observation). Once episodes reach their limit, some row truncates on most steps, and a value
pass over every row on each of them costs about as much as the policy's own forward. Here
each step's final observations are kept in the storage's `final_obs_steps` (a bound env's
kernel writes them there itself; otherwise the collector copies them on steps that truncate),
and after the rollout the truncated rows alone are gathered into batches of fixed size (at
most `BATCH_ROWS` rows, so the network's workspaces are made once), valued, and scattered to
their (step, row) in `final_values_steps`; gamma times them goes into the rewards. Each row's
value is the network's at the rollout's parameters on the observation that step produced
(normalised with that step's statistics, where configured), as the per-step pass gave; only
the batching differs.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from operant.trainer.storage import RolloutStorage

BATCH_ROWS = 256
"""The gathered batch's rows (fewer when the rollout has fewer rows)."""


def byte_rows(array: np.ndarray) -> np.ndarray:
    """A (rows, ...) C-contiguous array as (rows, bytes per row) uint8, the same memory."""
    return array.reshape(array.shape[0], -1).view(np.uint8)


def batchable(storage: RolloutStorage, final_obs: torch.Tensor, truncated: torch.Tensor) -> bool:
    """Whether the batched bootstrap applies: the storage, the env's final observations and
    its flags all in host memory."""
    return all(tensor.device.type == "cpu" for tensor in (storage.obs, final_obs, truncated))


class BatchedBootstrap:
    """Values the truncated rows of a filled storage in fixed-size batches."""

    def __init__(self, storage: RolloutStorage, policy: Any):
        from operant.cext.rollout_rows import RowGather

        self.policy = policy
        capacity = min(storage.num_rows, BATCH_ROWS)
        self.batch = torch.zeros((capacity, *storage.obs.shape[2:]), dtype=storage.obs.dtype)
        self.values = torch.zeros(capacity)
        self.final_values = storage.final_values_steps
        self._flat_values = self.final_values.view(-1).numpy()
        self._values = self.values.numpy()
        # Every step's flags and final observations as one table of rows.
        self._flags = storage.truncated_steps.view(1, -1).numpy().view(np.uint8)
        self._rows = byte_rows(storage.final_obs_steps.view(-1, *storage.obs.shape[2:]).numpy())
        self.gather = RowGather(byte_rows(self.batch.numpy()), np.zeros(capacity, np.int64))
        self.value_ns = 0
        """ns spent in the value network (the collector counts it as "forward")."""

    def finish(self, rewards: torch.Tensor, gamma: float) -> None:
        """After a rollout: every truncated row valued, gamma * V added to `rewards`."""
        done = self.gather.take(self._flags, 0, self._rows, 0)
        if done and not self.gather.count:
            return  # nothing truncated
        self.final_values.zero_()
        while not done:
            self._value_batch()
            done = self.gather.take(self._flags, 0, self._rows, 0)
        if self.gather.count:
            self._value_batch()
        rewards.add_(self.final_values, alpha=gamma)

    def _value_batch(self) -> None:
        started = time.perf_counter_ns()
        self.policy.value(self.batch, out=self.values)
        self.value_ns += time.perf_counter_ns() - started
        self.gather.scatter(self._values, self._flat_values)

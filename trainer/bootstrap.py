"""The truncation bootstrap of a rollout in host memory, batched (operant.cext.rollout_rows).

A time limit is not a terminal state: a truncated episode's reward takes gamma * V(final
observation). Once episodes reach their limit, some row truncates on most steps, and a value
pass over every row on each of them costs about as much as the policy's own forward. Here the
final observations of the truncated rows alone are gathered, as the steps go, into one batch
of fixed size (at most `BATCH_ROWS` rows, so the network's workspaces are made once), which
the network evaluates when it is full and at the end of the rollout; the values go to their
(step, row) in `final_values`, and `finish()` adds gamma times them to the rewards (zero for
rows that did not truncate). Each row's value is the network's at the rollout's parameters on
the observation that step produced (normalised with that step's statistics, where
configured), as the per-step pass gave; only the batching differs.
"""

from __future__ import annotations

from collections.abc import Callable
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
    """Gathers truncated rows' final observations and values them in fixed-size batches."""

    def __init__(
        self,
        storage: RolloutStorage,
        policy: Any,
        observe: Callable[..., torch.Tensor],
        final_obs: torch.Tensor,
    ):
        from operant.cext.rollout_rows import RowGather

        self.policy, self.observe, self.final_obs = policy, observe, final_obs
        # Each step's first flat index, made once (an int past 256 is a new object).
        self.bases = tuple(t * storage.num_rows for t in range(storage.num_steps))
        capacity = min(storage.num_rows, BATCH_ROWS)
        self.batch = torch.zeros((capacity, *storage.obs.shape[2:]), dtype=storage.obs.dtype)
        self.values = torch.zeros(capacity)
        self.final_values = storage.final_values_steps
        self._flat_values = self.final_values.view(-1).numpy()
        self._values = self.values.numpy()
        self._final_rows = byte_rows(final_obs.numpy())
        self.gather = RowGather(byte_rows(self.batch.numpy()), np.zeros(capacity, np.int64))
        self.used = False

    def start(self) -> None:
        """Before a rollout: no values yet."""
        self.final_values.zero_()
        self.used = False

    def add(self, t: int, flags: np.ndarray, slot: int) -> None:
        """Step t's truncated rows (`flags[slot]`, flags uint8 (slots, rows)) into the batch,
        valued as it fills."""
        obs = self.observe(self.final_obs)
        rows = self._final_rows if obs is self.final_obs else byte_rows(obs.numpy())
        while not self.gather.take(flags, slot, rows, self.bases[t]):
            self._value_batch()
        self.used = True

    def finish(self, rewards: torch.Tensor, gamma: float) -> None:
        """After a rollout: the last batch valued, and gamma * V added to `rewards`."""
        if not self.used:
            return
        if self.gather.count:
            self._value_batch()
        rewards.add_(self.final_values, alpha=gamma)

    def _value_batch(self) -> None:
        self.policy.value(self.batch, out=self.values)
        self.gather.scatter(self._values, self._flat_values)

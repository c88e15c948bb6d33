"""The rows a collector's policy acts on together, with their per-step views of the rollout
storage made once (operant.trainer.loop.collect)."""

from __future__ import annotations

from typing import NamedTuple

import torch

from operant.trainer.loop.storage import RolloutStorage


class RowSlice(NamedTuple):
    """Rows the policy acts on together: their index into the storage, and views of the env's
    observations, the env's actions and the clip scratch (None for discrete actions); per
    step t, `step_obs[t]` (the storage's observation rows) and `outs[t]` (the storage's
    action, log-probability and value rows the policy samples into)."""

    rows: slice
    env_obs: torch.Tensor
    env_actions: torch.Tensor
    clipped: torch.Tensor | None
    step_obs: tuple[torch.Tensor, ...]
    outs: tuple[tuple[torch.Tensor, torch.Tensor, torch.Tensor], ...]


def row_slice(
    storage: RolloutStorage,
    rows: slice,
    env_obs: torch.Tensor,
    env_actions: torch.Tensor,
    clipped: torch.Tensor | None,
) -> RowSlice:
    """`rows`' RowSlice, its per-step views made once (indexing a tensor costs a microsecond)."""
    steps = range(storage.num_steps)
    return RowSlice(
        rows,
        env_obs,
        env_actions,
        clipped,
        tuple(storage.obs[t, rows] for t in steps),
        tuple(
            (storage.actions[t, rows], storage.logprobs[t, rows], storage.values[t, rows])
            for t in steps
        ),
    )

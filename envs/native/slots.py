"""Binding a native env's kernels to rows of the trainer's rollout storage (issue 18's rollout
without copies): the mixin every kernel-backed face shares (NativeVectorEnv, MinAtar's)."""

from __future__ import annotations

from typing import Any, cast

import numpy as np


class SlotBinding:
    """Fulfils operant.envs.contract.BindsSlots.

    Rebinding a native env's kernels to rows of larger arrays (cext/common/kernel_slots.pxd): the
    trainer's rollout storage, so that step t's outputs land in the storage's row t and its
    observations in row t + 1 without a copy (operant.trainer.loop.collect).

    `bind_slots(obs=..., rewards=..., terminated=..., truncated=..., actions=...,
    final_obs=...)` takes
    numpy arrays shaped `(slots, num_envs, ...)` (None keeps the env's own buffer; no argument
    unbinds everything); `select_slots(obs_slot, step_slot)` points every kernel at those slots
    for the next step (-1: the env's own buffers). `slot_selectors()` are the kernels' own
    `select(obs_slot, step_slot)`, one per entry of `_kernel_rows()`, for a caller that
    steps the kernels apart (the overlapped rollout's halves). While bound, the env's own
    `obs`, `final_obs`, `rewards` and flags are not written for steps that select other
    slots."""

    num_envs: int
    actions: np.ndarray
    kernels: tuple[Any, ...]
    """The env's kernels (operant.cext's, untyped), one per entry of `_kernel_rows()`."""
    _slot_actions: np.ndarray | None
    """The action slots bound last (None: the env's own `actions`)."""

    binds_slots = True
    keeps_obs_rows = False
    """Whether a step reads the observation rows the previous step wrote (a kernel that
    writes them by difference): then only the env's own buffer may hold them, and
    `bind_slots` refuses observation slots (`binds_obs` is false)."""

    @property
    def binds_obs(self) -> bool:
        return not self.keeps_obs_rows

    def _kernel_rows(self) -> tuple[tuple[int, int], ...]:
        """The rows (lo, hi) each of `kernels` steps (the env that binds says)."""
        raise NotImplementedError

    def bind_slots(self, **arrays: np.ndarray | None) -> None:
        names = ("obs", "rewards", "terminated", "truncated", "actions", "final_obs")
        unknown = set(arrays) - set(names)
        if unknown:
            raise TypeError(f"bind_slots() takes {', '.join(names)}, got {sorted(unknown)}")
        if arrays.get("obs") is not None and not self.binds_obs:
            raise ValueError(
                f"{type(self).__name__} keeps its observation rows by difference: "
                "its observations cannot move to slots"
            )
        for name, array in arrays.items():
            if array is not None and (np.ndim(array) < 2 or array.shape[1] != self.num_envs):
                raise ValueError(
                    f"slots for {name} must be (slots, {self.num_envs}, ...), got {np.shape(array)}"
                )
        for (lo, hi), kernel in zip(self._kernel_rows(), self.kernels):
            kernel.bind_slots(
                **{
                    name: None if array is None else array[:, lo:hi]
                    for name, array in arrays.items()
                }
            )
        self._slot_actions = None if arrays.get("actions") is None else arrays["actions"]

    def slot_selectors(self) -> tuple[Any, ...]:
        return tuple(kernel.select for kernel in self.kernels)

    def select_slots(self, obs_slot: int, step_slot: int) -> None:
        for kernel in self.kernels:
            kernel.select(obs_slot, step_slot)

    def _action_rows(self, which: int = 0) -> np.ndarray:
        """The action rows kernel `which` read last (for InvalidActionError's message)."""
        slot = self.kernels[which].action_slot
        # a kernel reads an action slot only while bind_slots has bound them
        return self.actions if slot < 0 else cast(np.ndarray, self._slot_actions)[slot]

"""The overlapped rollout's env: one native env whose two halves step on a second thread.

`SplitNativeVectorEnv` is a `NativeVectorEnv` (same buffers, same Gymnasium API, same
dynamics) whose rows are stepped by two kernels, rows [0, N/2) and [N/2, N), each bound to
its half of the one set of buffers and seeded as those rows of a single kernel would be. A
native thread (`operant.cext.overlap.StepThread`) steps either half on request, so the trainer
can run the policy on one half while the other half's envs move (`Trainer.collect` with
`env.overlap = true`); nothing touches the GIL on that thread, and the halves write disjoint
rows. `step_bound()` steps both halves on the calling thread, as the plain env does.

Each half keeps its own finished-episode statistics: `drain_episode_stats()` merges them, and
`recent_returns(count)` takes the latest episodes of each half, half the window from each
(more from one where the other has finished fewer). Both halves run the same policy on
independent envs, so this estimates the same quantity as the last `count` episodes overall,
but it is not that exact set of episodes: a run with overlap is not step-for-step identical
to one without (the policy also sees two half batches, which changes its sampling order).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from operant.envs.contract import EpisodeStats, clear_stats
from operant.envs.native.vector import NativeVectorEnv, recent_from_ring
from operant.envs.registry import EnvEntry, InvalidActionError, invalid_action_message


class SplitNativeVectorEnv(NativeVectorEnv):
    """A native env stepped as two halves, either of them on a native thread."""

    def __init__(
        self,
        entry: EnvEntry,
        num_envs: int,
        copy: bool = True,
        max_episode_steps: int | None = None,
        spin_us: float = 200.0,
        **face_options: Any,
    ):
        if (
            isinstance(num_envs, int)
            and not isinstance(num_envs, bool)
            and (num_envs < 2 or num_envs % 2)
        ):
            raise ValueError(
                f"an overlapped env needs an even num_envs of at least 2, got {num_envs}"
            )
        super().__init__(
            entry, num_envs, copy=copy, max_episode_steps=max_episode_steps, **face_options
        )
        from operant.cext.overlap import StepThread

        self.thread = StepThread(self.kernels, spin_us=spin_us)

    def _bind_kernels(self) -> tuple[Any, ...]:
        half = self.num_envs // 2
        self.halves = ((0, half), (half, self.num_envs))
        self.kernel = None  # no one kernel holds every row
        return tuple(self._kernel_over(lo, hi) for lo, hi in self.halves)

    def _kernel_rows(self) -> tuple[tuple[int, int], ...]:
        return self.halves

    # -- stepping ------------------------------------------------------------------------
    def start_half(self, which: int) -> None:
        """Step half `which` (0 or 1) on the native thread; returns at once. Its action rows
        must be written already, and nothing may read or write its rows until finish_half."""
        self.thread.start(which)

    def finish_half(self, which: int) -> None:
        """Wait for the step start_half(which) began; raises InvalidActionError as step_bound
        does (then no env of that half moved)."""
        self._check(which, self.thread.wait())

    def step_bound(self) -> None:
        for which, kernel in enumerate(self.kernels):
            self._check(which, kernel.step())

    def _check(self, which: int, bad: int) -> None:
        if bad >= 0:
            row = self.halves[which][0] + bad
            raise InvalidActionError(
                invalid_action_message(
                    self.single_action_space, row, self._action_rows(which)[row].tolist()
                )
            )

    # -- episode statistics ----------------------------------------------------------------
    def drain_episode_stats(self) -> EpisodeStats:
        parts = [EpisodeStats.from_record(kernel.stats) for kernel in self.kernels]
        for kernel in self.kernels:
            clear_stats(kernel.stats)
        return EpisodeStats.merge(parts)

    def recent_returns(self, count: int) -> np.ndarray:
        first, second = (
            recent_from_ring(kernel.recent_returns, int(kernel.recent_head[0]), count)
            for kernel in self.kernels
        )
        take_first = min(len(first), max(count // 2, count - len(second)))
        take_second = min(len(second), count - take_first)
        return np.concatenate(
            [first[len(first) - take_first :], second[len(second) - take_second :]]
        )

    def _state_prefixes(self) -> tuple[str, ...]:
        """Each half's arrays are saved as `half0.<name>` and `half1.<name>` (state_dict and
        load_state_dict are NativeVectorEnv's)."""
        return tuple(f"half{which}" for which in range(len(self.kernels)))

    def close_extras(self, **kwargs) -> None:
        self.thread.close()
        super().close_extras(**kwargs)

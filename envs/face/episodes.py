"""Episode accounting in numpy, for families written in Python (no torch).

`EpisodeAccounting` keeps each row's running return and length, and when rows' episodes end
reduces them into the named statistics layout of operant.envs.contract
(`EPISODE_STATS_DTYPE`, the same fields the C kernels write), plus a ring of recent returns.
With more than one agent per env (`RowLayout.agents_per_env > 1`) a row is an agent: the row
record holds agents' episodes, and an env-level record holds envs' episodes, whose return is
the sum of the env's agents' returns and whose length is its longest agent's (the rows of
one env end together, so the lengths agree).

A family calls `record(rewards, terminated, truncated)` after every step, `reset_episodes()`
when it resets, `drain()` / `recent_returns(k)` for the BatchEnv statistics, and keeps
`state_dict()` in its own state under a prefix of its choice.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from operant.envs.contract import (
    EPISODE_STATS_DTYPE,
    EpisodeStats,
    RowLayout,
    clear_stats,
)

_WORDS = EPISODE_STATS_DTYPE.itemsize // np.dtype(np.float64).itemsize
"""The float64 words of one statistics record (8)."""


def _record_view(words: np.ndarray) -> np.ndarray:
    """A 0-d `EPISODE_STATS_DTYPE` view of 8 float64 words (the words are what state holds:
    plain arrays, for checkpoints)."""
    return words.view(EPISODE_STATS_DTYPE).reshape(())


def _reduce(record: np.ndarray, returns: np.ndarray, lengths: np.ndarray) -> None:
    """Fold finished episodes into a statistics record."""
    record["episodes"] += len(returns)
    record["return_sum"] += returns.sum()
    record["return_min"] = min(float(record["return_min"]), float(returns.min()))
    record["return_max"] = max(float(record["return_max"]), float(returns.max()))
    record["length_sum"] += lengths.sum()
    record["length_min"] = min(float(record["length_min"]), float(lengths.min()))
    record["length_max"] = max(float(record["length_max"]), float(lengths.max()))


class EpisodeAccounting:
    """Per-row episode returns and lengths, their statistics since the last drain (per row,
    and per env when rows are agents), and the last `ring_capacity` row returns."""

    def __init__(self, layout: RowLayout, ring_capacity: int = 1024):
        self.layout = layout
        rows = layout.num_rows
        self.episode_return = np.zeros(rows, dtype=np.float64)
        self.episode_length = np.zeros(rows, dtype=np.int64)
        self.row_words = np.zeros(_WORDS, dtype=np.float64)
        self.env_words = np.zeros(_WORDS, dtype=np.float64)
        self.row_stats = _record_view(self.row_words)
        self.env_stats = _record_view(self.env_words)
        clear_stats(self.row_stats)
        clear_stats(self.env_stats)
        self.ring = np.zeros(ring_capacity, dtype=np.float64)
        self.ring_head = np.zeros(1, dtype=np.int64)
        """Returns written to the ring so far (the next one goes to head % capacity)."""

    def reset_episodes(self) -> None:
        """Every row starts a new episode (what a reset does); statistics are kept."""
        self.episode_return[:] = 0.0
        self.episode_length[:] = 0

    def record(
        self,
        rewards: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        counted: np.ndarray | None = None,
    ) -> None:
        """One step of every row: accumulate, then reduce and restart the rows that ended.
        `counted` (bool per row) marks the rows whose step belongs to an episode; the others
        (a NEXT_STEP env's reset step) add their reward, 0, but no length."""
        self.episode_return += rewards
        self.episode_length += 1 if counted is None else counted
        done = np.logical_or(terminated, truncated)
        if not done.any():
            return
        returns, lengths = self.episode_return[done], self.episode_length[done]
        _reduce(self.row_stats, returns, lengths)
        self._to_ring(returns)
        agents = self.layout.agents_per_env
        if agents > 1:
            env_done = done.reshape(-1, agents).all(axis=1)
            if env_done.any():
                per_env = self.episode_return.reshape(-1, agents).sum(axis=1)[env_done]
                env_lengths = self.episode_length.reshape(-1, agents).max(axis=1)[env_done]
                _reduce(self.env_stats, per_env, env_lengths)
        self.episode_return[done] = 0.0
        self.episode_length[done] = 0

    def _to_ring(self, returns: np.ndarray) -> None:
        capacity, head = len(self.ring), int(self.ring_head[0])
        self.ring[np.arange(head, head + len(returns)) % capacity] = returns
        self.ring_head[0] = head + len(returns)

    def drain(self) -> EpisodeStats:
        """Episodes finished since the last drain (`per_env` set when rows are agents), then
        clear the statistics."""
        per_env = (
            EpisodeStats.from_record(self.env_stats) if self.layout.agents_per_env > 1 else None
        )
        result = EpisodeStats.from_record(self.row_stats, per_env=per_env)
        clear_stats(self.row_stats)
        clear_stats(self.env_stats)
        return result

    def recent_returns(self, count: int) -> np.ndarray:
        """Returns of the last `count` finished row episodes (fewer if fewer), oldest first."""
        capacity, head = len(self.ring), int(self.ring_head[0])
        count = max(0, min(count, head, capacity))
        return self.ring[np.arange(head - count, head) % capacity]

    def state_dict(self) -> dict[str, np.ndarray]:
        """The live arrays under stable names (plain dtypes, for checkpoints)."""
        return {
            "episode_return": self.episode_return,
            "episode_length": self.episode_length,
            "row_stats": self.row_words,
            "env_stats": self.env_words,
            "ring": self.ring,
            "ring_head": self.ring_head,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Copy `state_dict()` output back in place; ValueError naming the first array that
        is missing or does not fit."""
        live = self.state_dict()
        if set(state) != set(live):
            raise ValueError(
                f"episode accounting state holds {sorted(state)}, expected {sorted(live)}"
            )
        for name, target in live.items():
            value = np.asarray(state[name])
            if value.shape != target.shape or value.dtype != target.dtype:
                raise ValueError(
                    f"episode accounting state {name!r} is {value.dtype} "
                    f"{value.shape}, expected {target.dtype} {target.shape}"
                )
        for name, target in live.items():
            np.copyto(target, state[name])


class AccountedPythonEnv:
    """What an env whose episodes an `EpisodeAccounting` (`self.episodes`) counts, and whose
    envs keep Python state a checkpoint cannot hold (`resumable = False`: a resume re-seeds
    them), answers of the BatchEnv contract: the reference impl, its worker processes and
    the minatar package's games."""

    episodes: EpisodeAccounting
    resumable = False

    def drain_episode_stats(self) -> EpisodeStats:
        return self.episodes.drain()

    def recent_returns(self, count: int) -> np.ndarray:
        return self.episodes.recent_returns(count)

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state:
            raise ValueError(f"a reference env has no state to load, got {sorted(state)}")

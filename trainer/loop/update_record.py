"""An update's record: this rank's (what its metrics file publishes) and the run's (what the
progress log, the console and systemd see), which under torchrun pools every rank's.

Pooling (one all-gather of a short float64 row per update): steps, episodes and steps/s are
summed over the ranks; the lowest and highest returns are over all ranks' episodes of the
update; the mean episode length is weighted by each rank's episodes; the return that solves
an env is the mean of the newest ceil(100 / K) episodes of each of the K ranks (100 episodes
in all, as a lone trainer's "mean of the last 100"), and every rank reads the same pooled
values, so every rank stops at the same update when train.target_return is reached. The
losses, entropy, KL and clip fraction are the ranks' means (averaged here, in the same
all-gather, unless ppo.target_kl made the update average them already); the explained
variance is rank 0's batch's.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import torch

from operant.envs import EpisodeStats
from operant.shared.record import SOLVE_WINDOW, PPOStatistics, UpdateRecord

# The pooled row's fixed fields, then the rank's newest returns (NaN-padded).
_FIELDS = ("steps", "episodes", "episodes_now", "sps", "sps_mean", "low", "high", "length_sum")
# The update's statistics, each rank's: the run's are their means (NaN where not finite).
_MEANS = ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction")
_CHECKS = ("crc",)  # then the votes (Trainer.votes), then the newest returns


def _env_episode_fields(episode: EpisodeStats) -> dict[str, Any]:
    """UpdateRecord's env-level episode fields when rows are agents (the drain's `per_env`),
    none otherwise: a single-agent run's progress lines stay as they were."""
    per_env = episode.per_env
    if per_env is None:
        return {}
    return {
        "env_episodes": per_env.episodes,
        "env_episode_return_mean": per_env.return_mean if per_env.episodes else None,
    }


def _finite_or_none(value: float) -> float | None:
    """A statistic as the record holds it: None where it is not a finite number."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


def make_record(trainer: Any, stats: PPOStatistics, update_seconds: float) -> UpdateRecord:
    """The update's record, the run's: this rank's alone when it trains alone, else pooled
    (the module docstring); sets `trainer.rank_record` and `trainer.last_record`, and
    `trainer.solved_at` the first time the pooled mean reaches train.target_return."""
    episode = trainer.env.drain_episode_stats()
    trainer.episodes += episode.episodes
    group, derived = trainer.group, trainer.derived
    world = derived.world_size
    elapsed = time.perf_counter() - trainer.started
    steps = trainer.global_step // world
    window = -(-SOLVE_WINDOW // world)
    recent = trainer.env.recent_returns(window)
    record = UpdateRecord(
        updates=trainer.update,
        global_step=steps,
        episodes=trainer.episodes,
        elapsed_s=round(elapsed, 4),
        sps=round(derived.local_batch_size / update_seconds, 1),
        sps_mean=round(steps / elapsed, 1) if elapsed > 0 else 0.0,
        # Mean of the last 100 finished episodes (the usual "solved" window).
        episode_return_mean=float(recent.mean()) if len(recent) else None,
        episode_return_min=episode.return_min if episode.episodes else None,
        episode_return_max=episode.return_max if episode.episodes else None,
        episode_length_mean=episode.length_mean if episode.episodes else None,
        episodes_this_update=episode.episodes,
        learning_rate=trainer.optimizer.lr,
        policy_loss=_finite_or_none(stats.policy_loss),
        value_loss=_finite_or_none(stats.value_loss),
        entropy=_finite_or_none(stats.entropy),
        approx_kl=_finite_or_none(stats.approx_kl),
        clip_fraction=_finite_or_none(stats.clip_fraction),
        explained_variance=_finite_or_none(stats.explained_variance),
        epochs=_finite_or_none(stats.epochs),
        phase_s={name: round(value, 6) for name, value in trainer.timer.seconds().items()},
        env_phase_s=trainer.env_phase_seconds(),
        **_env_episode_fields(episode),
    )
    trainer.rank_record = record
    if group is not None:
        record, recent = _pool(trainer, record, recent, window)
        record.global_step = trainer.global_step
    _judge(trainer, record, recent, elapsed)
    trainer.last_record = record
    return record


def _judge(trainer: Any, record: UpdateRecord, recent: np.ndarray, elapsed: float) -> None:
    """Mark the record solved the first time the mean of the last 100 reaches the target."""
    target = trainer.config.train.target_return
    solved = (
        target is not None
        and trainer.solved_at is None
        and len(recent) >= SOLVE_WINDOW
        and bool(recent.mean() >= target)
    )
    if solved:
        trainer.solved_at = elapsed
        record.solved = True


def _pool(
    trainer: Any, record: UpdateRecord, recent: np.ndarray, window: int
) -> tuple[UpdateRecord, np.ndarray]:
    """The run's record from every rank's (module docstring); and the pooled recent returns.

    The same all-gather carries a CRC32 of each rank's parameters (they must be identical:
    GroupError names a rank whose differ) and each rank's votes for the next update boundary
    (stop, checkpoint), ORed into `trainer.decision`: one collective per update for all
    three, rather than three."""
    from operant.trainer.distributed.group import parameter_crc

    group = trainer.group
    votes = trainer.votes()
    nan = float("nan")
    low, high = record.episode_return_min, record.episode_return_max
    length = record.episode_length_mean
    checks = len(_FIELDS) + len(_CHECKS) + len(votes)
    head = checks + len(_MEANS)
    row = np.full(head + window, nan)
    row[len(_FIELDS) : checks] = (parameter_crc(trainer.flat.param), *votes)
    row[checks:head] = [_or_nan(getattr(record, name)) for name in _MEANS]
    row[: len(_FIELDS)] = (
        record.global_step,
        record.episodes,
        record.episodes_this_update,
        record.sps,
        record.sps_mean,
        nan if low is None else low,
        nan if high is None else high,
        0.0 if length is None else length * record.episodes_this_update,
    )
    row[head : head + len(recent)] = recent
    rows = group.all_gather(torch.from_numpy(row), "the update record's all-gather").numpy()
    _check_replicas(rows[:, len(_FIELDS)], trainer.update)
    trainer.decision = tuple(bool(v) for v in rows[:, len(_FIELDS) + 1 : checks].max(axis=0))
    means = rows[:, checks:head].mean(axis=0)
    column = {name: rows[:, index] for index, name in enumerate(_FIELDS)}
    pooled = rows[:, head:].reshape(-1)
    pooled = pooled[~np.isnan(pooled)]
    episodes_now = int(column["episodes_now"].sum())
    fields = {
        "episodes": int(column["episodes"].sum()),
        "episodes_this_update": episodes_now,
        "sps": round(float(column["sps"].sum()), 1),
        "sps_mean": round(float(column["sps_mean"].sum()), 1),
        "episode_return_mean": float(pooled.mean()) if len(pooled) else None,
        "episode_return_min": _nan_extreme(np.nanmin, column["low"]),
        "episode_return_max": _nan_extreme(np.nanmax, column["high"]),
        "episode_length_mean": (
            float(column["length_sum"].sum() / episodes_now) if episodes_now else None
        ),
        **{name: _finite_or_none(float(mean)) for name, mean in zip(_MEANS, means, strict=True)},
    }
    pooled_record = UpdateRecord(**{**_as_fields(record), **fields})
    return pooled_record, pooled


def _check_replicas(crcs: np.ndarray, update: int) -> None:
    """Every rank holds rank 0's parameters, bit for bit (their CRC32s agree)."""
    from operant.trainer.services.protocol import GroupError

    for rank, crc in enumerate(crcs):
        if crc != crcs[0]:
            raise GroupError(
                f"rank {rank}'s parameters differ from rank 0's after update {update} "
                f"(CRC32 {int(crc):08x} vs {int(crcs[0]):08x}): the replicas diverged"
            )


def _or_nan(value: float | None) -> float:
    return float("nan") if value is None else value


def _nan_extreme(reduce: Any, values: np.ndarray) -> float | None:
    return None if np.isnan(values).all() else float(reduce(values))


def _as_fields(record: UpdateRecord) -> dict[str, Any]:
    return {name: getattr(record, name) for name in record.__struct_fields__}

"""What a seed passed to `reset(seed=...)` means, for every family: its checks, and the
random stream each env gets from it.

- `reset(seed=S)` (an int): env i's stream is set from (S, i), as it always has been
  (kernel_common.h's `op_rng_seed(S, i)`).
- `reset(seed=[s_0, ..., s_{N-1}])` (Gymnasium's per-env form): env i's stream is set from
  (s_i, 0), so env i seeded with s behaves exactly as env 0 of `reset(seed=s)` (and as a
  one-env batch reset with s), whatever N and i are. A `None` entry leaves env i's stream
  where it is (as Gymnasium's SyncVectorEnv resets that sub-env without a seed); on an env
  never seeded before, that is a stream drawn from the OS's entropy.
- `reset()` (no seed): the first one seeds every env from the OS's entropy; later ones
  continue the streams.

Gymnasium's own vector envs give env i the seed S + i for `reset(seed=S)`; Operant's streams
are SplitMix64 (not NumPy's generator), so a seed gives other episodes than Gymnasium's
anyway, and keeping (S, i) keeps every run seeded before this existed bit-identical.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB
_SEED_SALT = 0x6A09E667F3BCC909
INDEX_STRIDE = 0xD1B54A32D192ED03


def _mix(z: int) -> int:
    z = ((z ^ (z >> 30)) * _MIX1) & _MASK64
    z = ((z ^ (z >> 27)) * _MIX2) & _MASK64
    return z ^ (z >> 31)


def stream_base(seed: int) -> int:
    """What every env's stream for `seed` starts from: env i's is the SplitMix64 output of
    `stream_base(seed) + i * INDEX_STRIDE` (mod 2**64)."""
    return (_mix(((seed ^ _SEED_SALT) + _GOLDEN) & _MASK64) + _GOLDEN) & _MASK64


def rng_stream(seed: int, index: int) -> int:
    """The SplitMix64 state (an unsigned 64-bit int) of env `index` seeded with `seed`, bit for
    bit kernel_common.h's `op_rng_seed(seed, index)`."""
    return _mix((stream_base(seed) + index * INDEX_STRIDE) & _MASK64)


def _is_seed(value: Any) -> bool:
    return (
        isinstance(value, (int, np.integer))
        and not isinstance(value, (bool, np.bool_))
        and 0 <= int(value) < 2**64
    )


def check_seed(seed: Any, num_envs: int) -> int | list[int | None] | None:
    """`seed` as `reset` takes it: None, an int in [0, 2**64), or a list (or tuple or 1-d
    array) of `num_envs` such ints or None. Anything else raises a one-line ValueError."""
    if seed is None:
        return None
    if _is_seed(seed):
        return int(seed)
    if isinstance(seed, (str, bytes)) or not isinstance(seed, (Sequence, np.ndarray)):
        raise ValueError(
            f"seed must be an integer in [0, 2**64), a list of {num_envs} of them "
            f"(None entries allowed), or None; got {seed!r}"
        )
    seeds = list(seed.tolist() if isinstance(seed, np.ndarray) else seed)
    if len(seeds) != num_envs:
        raise ValueError(f"a list of seeds needs one per env: {num_envs} entries, got {len(seeds)}")
    for index, value in enumerate(seeds):
        if value is not None and not _is_seed(value):
            raise ValueError(
                f"seed[{index}] must be an integer in [0, 2**64) or None, got {value!r}"
            )
    return [None if value is None else int(value) for value in seeds]


def seed_np_random(env: Any, seed: int | list[int | None] | None) -> None:
    """Gymnasium's VectorEnv.reset rule for the env's own generator (`np_random`, which
    wrappers and loggers draw from): an int seed seeds it, so `np_random_seed` reads that seed
    and two resets with it draw alike (it was left to the OS). A list or None leaves it."""
    if isinstance(seed, int):
        from gymnasium.utils import seeding

        env._np_random, env._np_random_seed = seeding.np_random(seed)


def per_env_streams(seeds: list[int | None], entropy: int | None) -> list[int | None]:
    """Each env's new stream for a list of seeds: from (s_i, 0), or None (keep the stream)
    where s_i is None. `entropy`, for an env never seeded, stands in for a None entry's seed:
    that env's stream is then set from (entropy, i)."""
    return [
        rng_stream(seed, 0)
        if seed is not None
        else None
        if entropy is None
        else rng_stream(entropy, index)
        for index, seed in enumerate(seeds)
    ]

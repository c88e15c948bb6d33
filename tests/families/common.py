"""What both test families share: per-env random streams as numpy arrays (xorshift64 state
per env, seeded by splitmix64 from (seed, env index), as the C kernels seed theirs; nothing
process-wide is touched), the state-loading check, and the action check."""

from __future__ import annotations

import secrets

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def _shift(values: np.ndarray, left: int | None = None, right: int | None = None) -> np.ndarray:
    return values << np.uint64(left) if left is not None else values >> np.uint64(right)


def seed_streams(state: np.ndarray, seed: int | None) -> None:
    """Seed every env's stream in place from (seed, env index); None draws a seed."""
    seed = secrets.randbits(64) if seed is None else int(seed) % 2**64
    index = np.arange(len(state), dtype=np.uint64)
    z = np.uint64(seed) + (index + np.uint64(1)) * _GOLDEN
    z = (z ^ _shift(z, right=30)) * _MIX1
    z = (z ^ _shift(z, right=27)) * _MIX2
    state[:] = (z ^ _shift(z, right=31)) | np.uint64(1)  # xorshift's state must not be 0


def draw(state: np.ndarray) -> np.ndarray:
    """Advance every stream once (xorshift64: 13, 7, 17); returns the new words (a copy)."""
    state ^= _shift(state, left=13)
    state ^= _shift(state, right=7)
    state ^= _shift(state, left=17)
    return state.copy()


def load_arrays(live: dict[str, np.ndarray], state: dict, family: str) -> None:
    """The BatchEnv contract's load_state_dict: check names, dtypes and shapes (ValueError
    naming the first mismatch), then copy in place."""
    if set(state) != set(live):
        raise ValueError(f"{family} state holds {sorted(state)}, expected {sorted(live)}")
    for name, target in live.items():
        value = np.asarray(state[name])
        if value.dtype != target.dtype or value.shape != target.shape:
            raise ValueError(
                f"{family} state {name!r} is {value.dtype} {value.shape}, expected "
                f"{target.dtype} {target.shape}"
            )
    for name, target in live.items():
        np.copyto(target, state[name])


def check_discrete(actions: np.ndarray, num_actions: int) -> None:
    """Refuse out-of-range actions before any env moves (InvalidActionError, as the kernels)."""
    from operant.envs import InvalidActionError

    bad = np.flatnonzero((actions < 0) | (actions >= num_actions))
    if len(bad):
        raise InvalidActionError(
            f"action {int(actions[bad[0]])} for row {int(bad[0])} is "
            f"outside Discrete({num_actions})"
        )

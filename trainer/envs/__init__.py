"""Deprecated alias of `operant.envs` (the environments moved to their own package), kept for
one version: import `operant.envs` instead. This package and its modules (`native`,
`overlap`, `parity`, `reference`, `registry`, `torch_envs`) re-export the same names."""

import warnings

import operant.envs as _moved
from operant.envs import *  # noqa: F401,F403

warnings.warn(
    "operant.trainer.envs is deprecated: import operant.envs instead",
    DeprecationWarning,
    stacklevel=2,
)


def __getattr__(name: str):
    return getattr(_moved, name)

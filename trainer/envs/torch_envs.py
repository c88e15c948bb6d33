"""Deprecated alias of `operant.envs.torch` (the torch envs, now a base module and one module
per env), kept for one version: import that instead."""

import operant.envs.torch as _moved
from operant.envs.torch import base as _base


def __getattr__(name: str):
    return getattr(_moved if hasattr(_moved, name) else _base, name)

"""Deprecated alias of `operant.envs.registry`, kept for one version: import that instead."""

import operant.envs.registry as _moved


def __getattr__(name: str):
    return getattr(_moved, name)

"""Deprecated alias of `operant.envs.overlap`, kept for one version: import that instead."""

import operant.envs.overlap as _moved


def __getattr__(name: str):
    return getattr(_moved, name)

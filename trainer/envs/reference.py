"""Deprecated alias of `operant.envs.reference`, kept for one version: import that instead."""

import operant.envs.reference as _moved


def __getattr__(name: str):
    return getattr(_moved, name)

"""Deprecated alias of `operant.envs.parity`, kept for one version: import that instead."""

import operant.envs.parity as _moved


def __getattr__(name: str):
    return getattr(_moved, name)

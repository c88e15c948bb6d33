"""Deprecated alias of `operant.envs.native`, kept for one version: import that instead."""

import operant.envs.native as _moved


def __getattr__(name: str):
    return getattr(_moved, name)

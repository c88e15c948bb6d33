"""Deprecated alias of `operant.envs.registry`, kept for one version: import that instead.

Importing this module gives that very module (so patching a name through either path patches
both)."""

import sys

import operant.envs.registry

sys.modules[__name__] = operant.envs.registry

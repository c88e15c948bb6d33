"""Deprecated alias of `operant.envs.reference`, kept for one version: import that instead.

Importing this module gives that very module (so patching a name through either path patches
both)."""

import sys

import operant.envs.reference

sys.modules[__name__] = operant.envs.reference

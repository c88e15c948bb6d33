"""Operant: fast, dependable reinforcement learning on one machine.

The root package stays import-light (no torch, numpy or Textual) because the monitor and the
`operant` dispatcher import it first. Importing it after Gymnasium registers the `operant/`
environments; `import operant.envs` registers them in any order.
"""

import sys

__version__ = "0.1.0"

if "gymnasium" in sys.modules:
    from operant import envs as _envs  # noqa: F401  (registers operant/* env ids)

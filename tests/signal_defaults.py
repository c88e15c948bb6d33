"""The signal dispositions the tests' child processes start with: those an interactive shell
gives a command, whatever the test run itself inherited.

A test run started in the background of a script (`pytest ... &`, a shell without job
control) has SIGINT and SIGQUIT ignored, and every process it starts would inherit that: a
test of how a program answers Ctrl-C must not depend on how pytest was started. Pass
`preexec_fn=default_signals` to subprocess.Popen/run.
"""

from __future__ import annotations

import signal

# What a shell without job control sets to ignored for a background command.
SHELL_IGNORED = (signal.SIGINT, signal.SIGQUIT)


def default_signals() -> None:
    """In the child, before exec: SIGINT and SIGQUIT back to their default actions."""
    for signum in SHELL_IGNORED:
        signal.signal(signum, signal.SIG_DFL)

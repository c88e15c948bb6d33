"""operant-train's exit statuses (documented in operant.trainer.main, which re-exports them):
what a shell, a supervisor or systemd's Restart=on-failure sees when a trainer ends."""

EXIT_OK = 0
"""Finished (budget spent, or train.target_return reached), or stopped by SIGTERM/SIGINT at an
update boundary after writing a checkpoint."""
EXIT_FAILED = 1
"""Training failed: an error, or a non-finite loss or parameter."""
EXIT_USAGE = 2
"""Bad input: flags, config, env id, a run that cannot be resumed; nothing was started."""
EXIT_INTERRUPTED = 130
"""A second SIGINT: stopped at once, without a final checkpoint."""

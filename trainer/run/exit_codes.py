"""operant-train's exit statuses (operant.trainer.run.main's docstring lists them): what a
shell, a supervisor or systemd's Restart=on-failure sees when a trainer ends."""

EXIT_OK = 0
"""Finished (budget spent, or train.target_return reached), or stopped by SIGTERM/SIGINT at an
update boundary after writing a checkpoint."""
EXIT_FAILED = 1
"""Training failed: an error, or a non-finite loss or parameter."""
EXIT_USAGE = 2
"""Bad input: flags, config, env id, a run that cannot be resumed; nothing was started."""
EXIT_NO_SPACE = 75
"""The disk cannot take what the run cannot end (or start) without: the run directory or the
metrics file at start, the final checkpoint, model.pt (ENOSPC, EDQUOT, EIO). sysexits.h's
EX_TEMPFAIL: the condition is temporary and the same command works once space is freed
(`--resume` continues from the last checkpoint written), but restarting at once cannot, so the
systemd unit lists it in RestartPreventExitStatus= (operant.trainer.run.disk: the policy)."""
EXIT_INTERRUPTED = 130
"""A second SIGINT: stopped at once, without a final checkpoint."""

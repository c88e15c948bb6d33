"""The `operant` command: a thin dispatcher.

Each subcommand's module is imported only when that subcommand runs, so `operant monitor`,
`operant runs` and `operant exporter` never load torch.
"""

from __future__ import annotations

import errno
import importlib
import os
import sys

EXIT_BROKEN_PIPE = 141
"""128 + SIGPIPE: what a shell reports for a command killed by a closed pipe."""

# subcommand -> (module, one-line description); each module has main(argv) -> int
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "train": (
        "operant.trainer.run.main",
        "train a policy (same as operant-train; --monitor, --detach)",
    ),
    "monitor": ("operant.monitor.cli", "watch a run live (--latest, --once, --json)"),
    "runs": ("operant.monitor.runs_cmd", "list runs with their status, steps and SPS"),
    "bench": ("operant.trainer.bench.cli", "measure env-only and training throughput"),
    "eval": ("operant.trainer.eval.evaluate", "evaluate a run's policy, a model or a checkpoint"),
    "exporter": ("operant.monitor.exporter", "serve live runs' metrics in OpenMetrics format"),
    "sweep": ("operant.trainer.sweep.cli", "tune a config with Optuna (show NAME: leaderboard)"),
}


def usage() -> str:
    width = max(len(name) for name in SUBCOMMANDS)
    lines = ["usage: operant COMMAND [ARGS...]", "", "commands:"]
    lines += [f"  {name:<{width}}  {text}" for name, (_, text) in SUBCOMMANDS.items()]
    lines += ["", "Run `operant COMMAND --help` for a command's options."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    try:
        return _dispatch(sys.argv[1:] if argv is None else argv)
    except BrokenPipeError:
        # Whoever read the output stopped reading (`operant runs | head -3`): stop quietly
        # with the status a process killed by SIGPIPE has, as cat and ls do. stdout goes to
        # /dev/null first, or the interpreter's final flush would fail again and say so.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except OSError as error:
        if error.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EIO):
            raise
        # The output's file or device is full or gone (`operant runs > /dev/full`): one line,
        # not a traceback; stdout to /dev/null so the interpreter's final flush is quiet.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        print(f"operant: cannot write the output: {error.strerror}", file=sys.stderr)
        return 1


def _dispatch(args: list[str]) -> int:
    if not args or args[0] in ("-h", "--help"):
        print(usage())
        return 0 if args else 2
    if args[0] == "--version":
        from operant import __version__

        print(f"operant {__version__}")
        return 0
    name = args[0]
    if name not in SUBCOMMANDS:
        print(
            f"operant: unknown command {name!r}; choose one of: {', '.join(SUBCOMMANDS)}",
            file=sys.stderr,
        )
        return 2
    module_name, _ = SUBCOMMANDS[name]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name is not None and error.name.startswith("operant"):
            print(f"operant: the {name!r} command is not available in this build", file=sys.stderr)
            return 2
        raise
    return int(module.main(args[1:]) or 0)


if __name__ == "__main__":
    sys.exit(main())

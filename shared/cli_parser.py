"""The command lines' argparse: a usage error is one line, `PROG: message (see PROG --help)`,
and exit status 2, as every other bad input (argparse's own prints the usage block first)."""

from __future__ import annotations

import argparse
import math

EXIT_USAGE = 2


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see {self.prog} --help)\n")


def add_stuck_after(parser: argparse.ArgumentParser) -> None:
    """`--stuck-after SECONDS`, for every command that says whether a run is stuck."""
    from operant.shared import progress  # the readers' module: not for every command line

    parser.add_argument(
        "--stuck-after",
        type=positive_seconds,
        metavar="SECONDS",
        help="call a running run stuck after this long without an update (default: "
        f"max({progress.STUCK_FLOOR_S:g}, {progress.STUCK_FACTOR:g} x its recent updates' "
        f"time); {progress.FIRST_UPDATE_FLOOR_S:g} before its first update)",
    )


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value

"""The command lines' argparse: a usage error is one line, `PROG: message (see PROG --help)`,
and exit status 2, as every other bad input (argparse's own prints the usage block first)."""

from __future__ import annotations

import argparse

EXIT_USAGE = 2


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see {self.prog} --help)\n")

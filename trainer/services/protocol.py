"""The contract between a training session and its services: the hooks, the roles, the rank
a process has, and the outcome the end hooks see.

A service is a small object with hooks; operant.trainer.run.session composes a list of them and
calls each hook on every service, in the list's order (the order is the contract: it is why,
for example, a final checkpoint exists before the metrics file names it):

  on_start()            once, before the first update; the run directory exists and is locked
  on_update(record)     after every update, with its progress record
  on_boundary() -> bool before every update; True stops the loop there (the first service that
                        returns True ends the round: later services are not asked)
  on_stopping(outcome)  the loop ended cleanly (budget spent, target reached, or a stop
                        signal): write what the run leaves behind (final checkpoint, model)
  on_stop(outcome)      the run's end is known, whatever it was: say so (metrics file state,
                        systemd, console); on an error this is the only end hook called
  close()               always, last, whatever happened: release what on_start acquired

Every hook is optional (Service's are no-ops). A service's `role` says where it runs: on
EVERY_RANK (the NaN guard, stop signals, the metrics publisher: each rank trains and publishes
its own section) or on RANK_ZERO only (the run directory's files, the console, systemd). The
session filters its list through a `Rank` (rank 0 of a world of 1 today), so adding ranks is
wiring, not a rank check in each service.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from operant.trainer.run.errors import STORAGE_ERRNOS

HOOKS = ("on_start", "on_update", "on_boundary", "on_stopping", "on_stop", "close")


class GroupError(RuntimeError):
    """The process group of a run under torchrun failed (operant.trainer.distributed.group): a
    collective timed out, a peer went away, or the replicas diverged. One line."""


class Role(enum.Enum):
    """Where a service runs: in every rank's process, or in rank 0's alone."""

    EVERY_RANK = "every rank"
    RANK_ZERO = "rank 0 only"


@dataclass(frozen=True)
class Rank:
    """Which process of a training group this is. One process today: rank 0 of 1."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    """The rank's index on its machine (torchrun's LOCAL_RANK)."""

    def runs(self, role: Role) -> bool:
        """Whether a service of `role` runs in this process."""
        return role is Role.EVERY_RANK or self.rank == 0


@dataclass
class Outcome:
    """How the run ended; the end hooks fill in what they produce."""

    stopped_by: str = ""
    """The stop signal's name (SIGTERM, SIGINT) when one ended the loop."""
    error: BaseException | None = None
    """What ended the run abnormally: FloatingPointError (the NaN guard), GroupError (the
    ranks of a distributed run lost each other), an error whose class sets `fails_the_run`
    (an env worker that died: operant.envs.reference.workers), KeyboardInterrupt (a
    second SIGINT), an OSError of a full disk, or any other exception."""
    checkpoint: Path | None = None
    """The run's final checkpoint (on_stopping writes it)."""
    last_record: Any = None
    """The run's last progress record (of this process, else of the run it resumed)."""
    ending: bool = False
    """The end hooks' writes had begun (on_stopping was called): an error now is one of
    theirs (the final checkpoint, model.pt), not the training's."""
    writing: str = ""
    """What an end hook is writing ("model.pt", "the final checkpoint"): after an error, the
    write it failed."""
    model: Path | None = None
    """model.pt, once the finished run's policy is written."""

    @property
    def kind(
        self,
    ) -> Literal["finished", "stopped", "failed", "interrupted", "no_space", "crashed"]:
        """no_space: the disk refused what the run cannot do without (the full-disk policy:
        operant.trainer.run.errors)."""
        if isinstance(self.error, (FloatingPointError, GroupError)) or getattr(
            self.error, "fails_the_run", False
        ):
            return "failed"
        if isinstance(self.error, OSError) and self.error.errno in STORAGE_ERRNOS:
            return "no_space"
        if isinstance(self.error, KeyboardInterrupt):
            return "interrupted"
        if self.error is not None:
            return "crashed"
        return "stopped" if self.stopped_by else "finished"


class Service:
    """Base of the services: every hook a no-op (see the module docstring)."""

    role: ClassVar[Role] = Role.RANK_ZERO

    def on_start(self) -> None:
        pass

    def on_update(self, record: Any) -> None:
        pass

    def on_boundary(self) -> bool:
        return False

    def on_stopping(self, outcome: Outcome) -> None:
        pass

    def on_stop(self, outcome: Outcome) -> None:
        pass

    def close(self) -> None:
        pass

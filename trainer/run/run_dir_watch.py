"""Whether the run directory is still where the trainer writes it.

A live run's directory can be deleted (`rm -rf`), moved (`mv`, an archive script), or its
filesystem can turn read-only (a disk error remounts ext4 `errors=remount-ro`). The trainer's
open files follow the directory's inode, so without a look nothing fails at once: records go on
into a deleted progress.jsonl, and the first file the run creates (a checkpoint, best.pt) fails
with a raw FileNotFoundError or EROFS. `WatchRunDir` looks once per update, at its boundary
(one `stat`), and explains any write error that the directory's loss caused: the run ends
failed (exit 1) with one line naming what happened (`RunDirLost`), the same text as the
reason in its metrics file. What becomes of its checkpoints (docs/deploy.md, "A run
directory that disappears"):
- deleted: they went with the directory; nothing is written anywhere else, and the directory
  is not made again (someone removed the run on purpose, or a new start must be a fresh run);
- moved: they moved with it, whole (each is written under a temporary name and renamed), and
  the run resumes from its new place; nothing more is written into it;
- read-only: they stay as they were, and the run resumes from the last one once the
  filesystem is writable.
The updates since the last checkpoint are lost, as after a SIGKILL.
"""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path
from typing import Any

from operant.trainer.checkpoint.resume import resume_hint
from operant.trainer.services.protocol import Service

EIO_SETTLE_S = 1.0
"""How long an EIO's write waits for the mount to show read-only before it counts as the
disk's error (a failing disk that stays writable): one second, once per refused write."""


WRITE_PROBE = ".write-probe"
"""An empty file made and removed at once to ask the filesystem whether it takes writes."""


class RunDirLost(Exception):
    """The run directory was deleted, moved, or turned read-only under the trainer."""

    fails_the_run = True  # Outcome.kind "failed": exit 1, the metrics file says why


class WatchRunDir(Service):
    """Raises RunDirLost at the first update boundary after the run directory is gone from
    its path, and turns a write error that its loss caused into one (`explain`)."""

    def __init__(self, run_dir: Path, trainer: Any, checkpointer: Any):
        self.run_dir, self.trainer, self.checkpointer = run_dir, trainer, checkpointer
        self.fd = -1
        self.identity: tuple[int, int] | None = None

    def on_start(self) -> None:
        # The directory itself, wherever it goes: /proc/self/fd/N names its new path.
        self.fd = os.open(self.run_dir, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        status = os.fstat(self.fd)
        self.identity = (status.st_dev, status.st_ino)

    def on_boundary(self) -> bool:
        # After the update's hooks: its record is in progress.jsonl (of a moved directory).
        self._check()
        return False

    def _check(self) -> None:
        problem = self.problem()
        if problem is not None:
            raise RunDirLost(problem)

    def explain(self, error: BaseException) -> BaseException:
        """`error`, or RunDirLost when the run directory's loss caused it."""
        if not isinstance(error, OSError) or isinstance(error, RunDirLost) or self.fd < 0:
            return error
        problem = self.problem()
        if problem is None and self._turned_read_only(error):
            problem = self._read_only(OSError(errno.EROFS, os.strerror(errno.EROFS)))
        return error if problem is None else RunDirLost(problem)

    def _turned_read_only(self, error: OSError) -> bool:
        """Whether the filesystem refused `error`'s write by turning read-only. ext4 with
        errors=remount-ro fails the write in flight with EIO; since Linux 6.x it then refuses
        new writes with EROFS ("emergency_ro" in /proc/mounts) while statvfs still says
        read-write, and older kernels mark the mount read-only only after the EIO (CI saw both
        kinds of EIO). So after an EIO, look for up to EIO_SETTLE_S: the mount's flag, or a
        file that cannot be made in the run directory for EROFS."""
        if error.errno == errno.EROFS:
            return True
        if error.errno != errno.EIO:
            return False
        deadline = time.monotonic() + EIO_SETTLE_S
        while not self._refuses_writes():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
        return True

    def _refuses_writes(self) -> bool:
        try:
            if os.statvfs(self.run_dir).f_flag & os.ST_RDONLY:
                return True
            probe = self.run_dir / WRITE_PROBE
            os.close(os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, 0o600))
            os.unlink(probe)
        except FileExistsError:  # left by a process killed between the two calls
            os.unlink(self.run_dir / WRITE_PROBE)
        except OSError as refused:
            return refused.errno == errno.EROFS
        return False

    def problem(self) -> str | None:
        """What happened to the run directory, or None while it is where it was."""
        if self.fd < 0:
            return None
        try:
            status = os.stat(self.run_dir)
            if (status.st_dev, status.st_ino) == self.identity:
                return None
        except OSError:
            pass
        where = (
            f"the run directory {self.run_dir} was %s while training (after update {self._at()})"
        )
        if os.fstat(self.fd).st_nlink == 0:
            return (
                where
                % "deleted"
                + "; its checkpoints went with it and nothing was written elsewhere: the run "
                "stops, and a new start trains it from the beginning"
            )
        moved = Path(os.readlink(f"/proc/self/fd/{self.fd}"))
        last = self.checkpointer.last_path
        kept = f"; its last checkpoint is {moved / last.parent.name / last.name}" if last else ""
        return (
            where % f"moved to {moved}"
            + f"; the run stops{kept}; continue it there with "
            + resume_hint(moved.name, moved.parent, auto=last is None)
        )

    def _read_only(self, error: OSError) -> str:
        last = self.checkpointer.last_path
        kept = f"its last checkpoint {last} is as it was" if last else "it has no checkpoint"
        again = resume_hint(self.run_dir.name, self.run_dir.parent, auto=last is None)
        return (
            f"the run directory {self.run_dir} turned read-only while training (after update "
            f"{self._at()}): {error.strerror}; the run stops; {kept}; once the filesystem is "
            f"writable, continue with {again}"
        )

    def _at(self) -> int:
        return int(self.trainer.update)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

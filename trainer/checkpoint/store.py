"""Checkpoints of a run: when they are written, where, under which names, which one a resume
starts from, and how many are kept. (What one file holds: operant.trainer.checkpoint.file_format;
what the trainer's state is: operant.trainer.checkpoint.state.)

A run's checkpoints are `runs/<run_id>/checkpoints/ckpt-<update, 9 digits>.pt`, and the
pointer `checkpoints/latest` (the newest file's name, one line).

Writing (`Checkpointer.save`): the file is written whole or not at all (operant.shared.atomic:
temporary name in the same directory, fsync, rename, directory fsync); then `latest` is
replaced the same way, last; then checkpoints beyond the newest `keep` are deleted. A SIGKILL
or power loss at any point leaves every `ckpt-*.pt` file whole and `latest` naming one of
them. Temporary files of a writer that died are deleted when the next trainer of the run
starts (`remove_leftovers`).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, cast

import msgspec
import torch

from operant.shared import atomic
from operant.trainer.checkpoint.file_format import CheckpointError, build_payload
from operant.trainer.checkpoint.state import capture_global_rng
from operant.trainer.run.errors import storage_errors

POINTER = "latest"
_FILE = re.compile(r"^ckpt-(\d{9,})\.pt$")

# Config keys a resumed run may change: they steer how long and how visibly it trains, not
# what its state means. Everything else must equal the checkpoint's.
RESUMABLE_CHANGES = (
    "train.total_steps",
    "train.target_return",
    "train.log_every",
    "train.publish_metrics",
    "train.runs_dir",
    "train.run_id",
    "train.torch_threads",
    # How the ranks' gradient sum travels (shared memory or gloo): the same sum, in rank
    # order or gloo's (for two ranks the same bits).
    "train.dist_shared_memory",
    "train.tensorboard",
    "checkpoint.",
    # Who computes the update (torch autograd or the native kernel, on how many threads):
    # the same state, the same arithmetic up to float32 rounding.
    "ppo.update_impl",
    "ppo.update_threads",
    # Where the policy runs (a run trained on a GPU continued on a CPU, or on another GPU):
    # weights, Adam's moments and the env's state load onto the new device as they are; only
    # the action-sampling generator cannot follow a change of device type (a CUDA generator's
    # state is a seed and an offset, the CPU's a Mersenne Twister), so it is re-seeded
    # (Trainer.load_state_dict) and the resume says so.
    "train.device",
    # How many processes step a reference env (env.workers): the same envs, bit for bit
    # (docs/envs.md), and a reference env is not resumable (re-seeded on resume) anyway: a
    # run moved to a machine with more or fewer cores changes it.
    "env.workers",
    "env.step_timeout_s",
    "env.stop_grace_s",
)


def file_name(update: int) -> str:
    return f"ckpt-{update:09d}.pt"


def update_of(path: Path) -> int | None:
    """The update number in a checkpoint's file name, or None if it is not one."""
    match = _FILE.match(path.name)
    return int(match.group(1)) if match else None


def read_pointer(directory: Path) -> Path | None:
    """The checkpoint `latest` names; None without a pointer. Raises CheckpointError when the
    pointer is not a checkpoint name or names a file that is gone."""
    pointer = directory / POINTER
    try:
        name = pointer.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as error:
        raise CheckpointError(f"{pointer}: cannot be read ({error})") from None
    if not _FILE.match(name):
        raise CheckpointError(
            f"{pointer}: does not name a checkpoint ({name[:80]!r}); point it "
            "at one of the ckpt-*.pt files beside it, or delete it"
        )
    path = directory / name
    if not path.exists():
        raise CheckpointError(
            f"{pointer}: names {name}, which does not exist; point it at one "
            "of the ckpt-*.pt files beside it, or delete it"
        )
    return path


def checkpoint_files(directory: Path) -> list[Path]:
    """Complete checkpoint files (only whole files ever get this name), oldest first."""
    try:
        entries = list(directory.iterdir())
    except FileNotFoundError:
        return []
    found = [(update_of(path), path) for path in entries if update_of(path) is not None]
    return [path for _, path in sorted(found)]


def find_checkpoint(directory: Path) -> Path | None:
    """The checkpoint to resume from: the one `latest` names, else (a crash before the first
    pointer was written) the newest complete file, else None."""
    named = read_pointer(directory)
    if named is not None:
        return named
    files = checkpoint_files(directory)
    return files[-1] if files else None


def _flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def check_compatible(path: Path, saved: dict[str, Any], config: Any) -> None:
    """Refuse to resume with a config that changes what the checkpoint's state means: any key
    outside RESUMABLE_CHANGES that differs names the field, both values and the way out."""
    from operant.trainer.config import Config, to_dict, toml_value

    try:
        saved_config = msgspec.convert(saved, Config)
    except msgspec.ValidationError as error:
        raise CheckpointError(
            f"{path}: its config does not fit this operant ({error}); resume it "
            "with the operant version that wrote it"
        ) from None
    before, after = _flatten(to_dict(saved_config)), _flatten(to_dict(config))
    for key in sorted(before.keys() | after.keys()):
        if key.startswith(RESUMABLE_CHANGES):
            continue
        if before.get(key) != after.get(key) and not _both_nan(before.get(key), after.get(key)):
            raise CheckpointError(
                f"{path.name} was written with {key} = {toml_value(before.get(key))}, but the "
                f"config says {toml_value(after.get(key))}; resume with the run's own config, "
                "or train under a new run id"
            )


def _both_nan(a: Any, b: Any) -> bool:
    return isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)


class Checkpointer:
    """Writes a run's checkpoints, decides when the periodic ones are due, prunes old ones."""

    def __init__(
        self,
        directory: Path,
        every_updates: int | None,
        every_seconds: float | None,
        keep: int,
        beat: Callable[[], None] = lambda: None,
    ):
        self.directory = directory
        self.every_updates, self.every_seconds, self.keep = every_updates, every_seconds, keep
        self.beat = beat
        self.last_update: int | None = None
        """Update of the newest checkpoint written (or resumed from) by this process."""
        self.last_path: Path | None = None
        self.last_duration_s = 0.0
        self.last_size: int | None = None
        """Bytes of the newest checkpoint this process wrote or failed to write (about what the
        next one needs)."""
        self._last_time = time.monotonic()
        directory.mkdir(parents=True, exist_ok=True)

    def remove_leftovers(self, newer_than: int | None = None) -> None:
        """Delete temporary files of writers that died, and, when resuming from update
        `newer_than`, checkpoints past it: their updates are redone."""
        for path in self.directory.iterdir():
            update = update_of(path)
            replaced = atomic.final_name(path.name)
            if (replaced is not None and (replaced == POINTER or _FILE.match(replaced))) or (
                newer_than is not None and update is not None and update > newer_than
            ):
                path.unlink(missing_ok=True)
        atomic.fsync_directory(self.directory)

    def resumed_from(self, path: Path, update: int) -> None:
        self.last_update, self.last_path = update, path
        self._last_time = time.monotonic()

    def due(self, update: int) -> bool:
        """Whether a periodic checkpoint is due at the boundary after `update`."""
        if update == (self.last_update or 0):
            return False
        if self.every_updates is not None and update % self.every_updates == 0:
            return True
        return (
            self.every_seconds is not None
            and time.monotonic() - self._last_time >= self.every_seconds
        )

    def failed(self) -> None:
        """A checkpoint due now could not be written: the next try is one interval away (by
        time; by update count it is the next multiple), not at every update."""
        self._last_time = time.monotonic()

    def save(
        self,
        trainer: Any,
        config_dict: dict[str, Any],
        progress_bytes: int,
        ranks: list[dict[str, Any]] | None = None,
    ) -> Path:
        """Write the checkpoint of the trainer's current update, then point `latest` at it;
        `ranks`: the other ranks' states under torchrun (checkpoint_format.build_payload)."""
        started = time.monotonic()
        self.beat()
        payload = build_payload(
            trainer.state_dict(), capture_global_rng(), config_dict, progress_bytes, ranks
        )
        path = self.directory / file_name(trainer.update)
        try:
            with storage_errors():
                atomic.write_with(path, lambda handle: torch.save(payload, handle), self.beat)
        except OSError:
            self.last_size = _serialized_size(payload)  # what a retry needs, for the message
            raise
        atomic.write_with(
            self.directory / POINTER,
            lambda handle: handle.write(f"{path.name}\n".encode()),
            self.beat,
        )
        self._prune(path)
        self.last_size = path.stat().st_size
        self.last_update, self.last_path = trainer.update, path
        self._last_time = time.monotonic()
        self.last_duration_s = self._last_time - started
        return path

    def _prune(self, newest: Path) -> None:
        files = [path for path in checkpoint_files(self.directory) if path != newest]
        excess = files[: max(0, len(files) - (self.keep - 1))]
        for path in excess:
            self.beat()
            path.unlink(missing_ok=True)
        if excess:
            atomic.fsync_directory(self.directory)


class _Counter:
    """A file-like sink that counts what is written to it."""

    def __init__(self) -> None:
        self.size = 0

    def write(self, data: bytes) -> int:
        self.size += len(data)
        return len(data)

    def flush(self) -> None:
        pass


def _serialized_size(payload: dict[str, Any]) -> int:
    """Bytes `payload` takes as a checkpoint file (serialised into nothing)."""
    counter = _Counter()
    # torch.save only writes to and flushes a file-like (its stubs ask for an IO[bytes]).
    torch.save(payload, cast(IO[bytes], counter))
    return counter.size

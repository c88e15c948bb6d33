"""The checkpoint file format: what one checkpoint file holds, how it is verified when read,
and how files of older versions are brought up to this one.

A checkpoint is one file made with `torch.save` from tensors and plain containers only, so
`torch.load(weights_only=True)` reads it without unpickling arbitrary objects. Version 2
holds:

- `format` ("operant-checkpoint"), `version` (2): what this is;
- `metrics_layout`: the metrics-file layout version (major, minor) of the writer, because a
  resumed run continues the same metrics history;
- `created_at`: wall-clock seconds when it was written;
- `config`: the run's configuration (a plain dict), checked against the resuming config;
- `trainer`: `Trainer.state_dict()`, whose names operant.trainer.checkpoint.state documents (policy,
  optimizer, the configured normalisers, generator, cpu_generator, counters, env);
- `rng`: the process-wide generators (operant.trainer.checkpoint.state.capture_global_rng);
- `progress_bytes`: the length of progress.jsonl when the checkpoint was taken (a resumed run
  cuts off the records of updates it redoes);
- `world_size` and `ranks`, only in a checkpoint of a run of several ranks (torchrun,
  operant.trainer.distributed.group): `trainer` and `rng` are rank 0's, `ranks` holds every other
  rank's `{"trainer", "rng"}` in rank order (its envs, generators and counters; the
  parameters are every rank's alike), so each rank continues exactly;
- `digest`: SHA-256 over all of the above (dtypes, shapes and bytes of every tensor), because
  `torch.load` does not check the zip archive's CRCs: a flipped bit would otherwise load.

Version 1 (operant up to 6031fcf) found the trainer's state by reflection over its
attributes: `trainer` held `modules` (every nn.Module attribute by name: policy, optimizer,
and the normalisers when configured), `optimizers` (always empty: FlatAdam is a module),
`generators` (generator, cpu_generator), `counters` and `env` as version 2 does. `load`
verifies a file as it was written (digest included) and then migrates it, one version at a
time, so a file written by any older version it knows resumes as if this version wrote it.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from operant.trainer.checkpoint.resume import ResumeError
from operant.trainer.run.errors import first_line

FORMAT = "operant-checkpoint"
VERSION = 2


class CheckpointError(ResumeError):
    """A checkpoint that cannot be used: missing, unreadable, corrupt, foreign, or written for
    another configuration. The message is one line naming the file and what to do."""


class DamagedCheckpointError(CheckpointError):
    """A checkpoint whose bytes are damaged: it does not parse, or its content does not match
    its digest. (Not one that is unreadable for its permissions, or written by another
    version or for another config: an older checkpoint of the run would not mend those.)"""

    def __init__(self, path: Path, problem: str):
        super().__init__(f"{path}: {problem}; delete it to resume from an older one")
        self.path, self.problem = path, problem


def _feed(digest: Any, value: Any) -> None:
    """Hash `value` canonically: type tags, dict keys in a fixed order, tensors by bytes."""
    if isinstance(value, torch.Tensor):
        tensor = value.detach().to("cpu").contiguous()
        digest.update(f"T{tensor.dtype}{tuple(tensor.shape)}|".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    elif isinstance(value, dict):
        digest.update(f"D{len(value)}|".encode())
        for key in sorted(value, key=repr):
            _feed(digest, key)
            _feed(digest, value[key])
    elif isinstance(value, (list, tuple)):
        digest.update(f"L{len(value)}|".encode())
        for item in value:
            _feed(digest, item)
    else:
        digest.update(f"P{value!r}|".encode())


def content_digest(payload: dict[str, Any]) -> str:
    """The digest of everything in `payload` but its `digest`."""
    digest = hashlib.sha256()
    _feed(digest, {key: value for key, value in payload.items() if key != "digest"})
    return digest.hexdigest()


def build_payload(
    trainer_state: dict[str, Any],
    rng: dict[str, Any],
    config: dict[str, Any],
    progress_bytes: int,
    ranks: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A version-2 checkpoint's content, digest included, ready for `torch.save`. `ranks`:
    under torchrun, the other ranks' `{"trainer": ..., "rng": ...}` in rank order."""
    from operant.shared import metrics_layout

    payload = {
        "format": FORMAT,
        "version": VERSION,
        "metrics_layout": (metrics_layout.VERSION_MAJOR, metrics_layout.VERSION_MINOR),
        "created_at": time.time(),
        "config": config,
        "trainer": trainer_state,
        "rng": rng,
        "progress_bytes": int(progress_bytes),
    }
    if ranks:
        payload["world_size"] = len(ranks) + 1
        payload["ranks"] = ranks
    payload["digest"] = content_digest(payload)
    return payload


# --- migrations ----------------------------------------------------------------------------


def _from_version_1(payload: dict[str, Any]) -> dict[str, Any]:
    """Version 1's reflected trainer state under version 2's explicit names."""
    old = payload["trainer"]
    if old["optimizers"]:
        raise ValueError("its trainer.optimizers is not empty, which version 1 never wrote")
    trainer = {
        **old["modules"],
        **old["generators"],
        "counters": old["counters"],
        "env": old["env"],
    }
    return {**payload, "version": 2, "trainer": trainer}


# version -> the function that turns a payload of that version into one of the next
MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _from_version_1}
OLDEST = min(MIGRATIONS)


def migrate(path: Path, payload: dict[str, Any]) -> dict[str, Any]:
    """`payload` (verified, of version OLDEST..VERSION) as version VERSION, its digest remade."""
    version = payload["version"]
    if version == VERSION:
        return payload
    try:
        while version < VERSION:
            payload = MIGRATIONS[version](payload)
            version = payload["version"]
    except KeyError as error:
        raise CheckpointError(
            f"{path}: a version {version} checkpoint without its {error} "
            "part; delete it to resume from an older one"
        ) from None
    except (ValueError, TypeError) as error:
        raise CheckpointError(
            f"{path}: not a version {version} checkpoint as operant wrote "
            f"them ({error}); delete it to resume from an older one"
        ) from None
    payload["digest"] = content_digest(payload)
    return payload


# --- reading -------------------------------------------------------------------------------


def _read(path: Path) -> Any:
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no such checkpoint") from None
    except PermissionError as error:
        raise CheckpointError(f"{path}: cannot be read ({error.strerror})") from None
    except IsADirectoryError:
        raise CheckpointError(f"{path}: is a directory, not a checkpoint") from None
    except Exception as error:  # any failure to parse an untrusted file means it is unusable
        raise DamagedCheckpointError(
            path, f"is corrupt or not a checkpoint ({first_line(error, limit=160)})"
        ) from None


def load(path: Path) -> dict[str, Any]:
    """Read, verify and migrate a checkpoint: its content as version VERSION. CheckpointError
    (one line) on any problem."""
    from operant.shared import metrics_layout

    payload = _read(path)
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(f"{path}: is not an Operant checkpoint")
    version = payload.get("version")
    if not isinstance(version, int) or not OLDEST <= version <= VERSION:
        newer = isinstance(version, int) and version > VERSION
        raise CheckpointError(
            f"{path}: checkpoint format {version!r}, this operant reads {VERSION}"
            + (
                "; upgrade operant to resume it"
                if newer
                else "; resume it with the operant version that wrote it"
            )
        )
    layout = tuple(payload.get("metrics_layout", ()))
    if not layout or layout[0] != metrics_layout.VERSION_MAJOR:
        raise CheckpointError(
            f"{path}: written for metrics layout {'.'.join(map(str, layout)) or '?'}, this "
            f"operant writes {metrics_layout.VERSION_MAJOR}.{metrics_layout.VERSION_MINOR}; resume "
            "it with the operant version that wrote it"
        )
    if payload.get("digest") != content_digest(payload):
        raise DamagedCheckpointError(path, "is corrupt (its content does not match its digest)")
    return migrate(path, payload)

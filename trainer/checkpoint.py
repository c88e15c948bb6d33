"""Checkpoints: everything a run needs to continue exactly where it stopped, written so that
a crash at any moment leaves the previous checkpoint whole.

A checkpoint is one file, `runs/<run_id>/checkpoints/ckpt-<update, 9 digits>.pt`, made with
`torch.save` from tensors and plain containers only, so `torch.load(weights_only=True)` reads
it without unpickling arbitrary objects. It holds:

- `format`, `version`: what this is (a reader refuses other formats and newer versions);
- `metrics_layout`: the metrics-file layout version (major, minor) of the writer, because a
  resumed run continues the same metrics history;
- `config`: the run's configuration (a plain dict), checked against the resuming config;
- `trainer`: the trainer's own state (`trainer_state`): every `nn.Module` attribute (the
  policy, and the observation/reward normalisers when configured) and optimizer by their
  state dicts, every `torch.Generator` attribute by its state, the counters (global step,
  update, episodes, elapsed seconds, when the target was reached) and the envs' state;
- `rng`: the process-wide generators: Python's `random`, numpy's legacy global, torch's CPU
  generator and, where CUDA is initialised, every CUDA device's;
- `progress_bytes`: the length of `progress.jsonl` when the checkpoint was taken (a resumed
  run cuts off the records of updates it redoes);
- `digest`: SHA-256 over all of the above (dtypes, shapes and bytes of every tensor), because
  `torch.load` does not check the zip archive's CRCs: a flipped bit would otherwise load.

The learning-rate schedule is a function of the update counter (config.ppo.anneal_lr), and
the optimizer's param groups carry the last rate, so both come back with the counters.

Writing (`Checkpointer.save`): the file is written under a temporary name in the same
directory (`O_EXCL`), fsynced, renamed onto its final name with `os.replace`, and the
directory fsynced; then the pointer `checkpoints/latest` (the file's name, one line) is
replaced the same way, last; then checkpoints beyond the newest `keep` are deleted. A
SIGKILL or power loss at any point leaves every `ckpt-*.pt` file whole and `latest` naming
one of them. Leftover temporary files are deleted when the next trainer of the run starts.

Env state: a `resumable` env (operant.envs.contract.BatchEnv) is captured through its
`state_dict()` (arrays or tensors under stable names, saved with their dtype names) and put
back with `load_state_dict()`, after the saved names, dtypes and shapes are checked against the
env's. An env that is not resumable (the `reference` implementation: Gymnasium's own envs, whose
state is arbitrary Python) is not captured: a resumed run re-seeds its envs, so episodes in
flight restart and the run is not bit-identical to an uninterrupted one.
"""

from __future__ import annotations

import hashlib
import math
import os
import random
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import torch
from torch import nn

from operant.trainer.resume import ResumeError

FORMAT = "operant-checkpoint"
VERSION = 1
POINTER = "latest"
_FILE = re.compile(r"^ckpt-(\d{9,})\.pt$")
_TEMPORARY = re.compile(r"^\.(ckpt-\d{9,}\.pt|latest)\.\d+\.tmp$")

# Config keys a resumed run may change: they steer how long and how visibly it trains, not
# what its state means. Everything else must equal the checkpoint's.
RESUMABLE_CHANGES = ("train.total_steps", "train.target_return", "train.log_every",
                     "train.publish_metrics", "train.runs_dir", "train.run_id",
                     "train.torch_threads", "checkpoint.")

class CheckpointError(ResumeError):
    """A checkpoint that cannot be used: missing, unreadable, corrupt, foreign, or written for
    another configuration. The message is one line naming the file and what to do."""


def file_name(update: int) -> str:
    return f"ckpt-{update:09d}.pt"


def update_of(path: Path) -> int | None:
    """The update number in a checkpoint's file name, or None if it is not one."""
    match = _FILE.match(path.name)
    return int(match.group(1)) if match else None


# --- env state ---------------------------------------------------------------------------

def _env_arrays(env: Any) -> dict[str, Any] | None:
    """The live arrays (numpy or torch) that hold `env`'s state (the BatchEnv contract's
    state_dict); None when the env cannot capture its state."""
    if not getattr(env, "resumable", False):
        return None
    return dict(env.state_dict())


def _to_tensor(value: Any) -> tuple[torch.Tensor, str]:
    """(a CPU tensor with the same bytes, the original dtype's name)."""
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True), str(value.dtype)
    array = np.asarray(value)
    dtype = str(array.dtype)
    if array.dtype == np.uint64:  # torch has no full uint64 support: keep the bits as int64
        array = array.view(np.int64)
    return torch.from_numpy(np.array(array, copy=True)), dtype


def capture_env_state(env: Any) -> dict[str, Any]:
    arrays = _env_arrays(env)
    impl = str(getattr(env, "impl", "unknown"))
    if arrays is None:
        return {"impl": impl, "exact": False, "arrays": {}, "dtypes": {}}
    tensors, dtypes = {}, {}
    for name, value in arrays.items():
        tensors[name], dtypes[name] = _to_tensor(value)
    return {"impl": impl, "exact": True, "arrays": tensors, "dtypes": dtypes}


def restore_env_state(env: Any, state: dict[str, Any], reseed: int) -> None:
    """Put a captured state back into `env` in place; an env whose state was not captured is
    reset with seed `reseed` instead."""
    if not state.get("exact"):
        env.reset(seed=reseed)
        return
    saved, dtypes = state["arrays"], state["dtypes"]
    targets = _env_arrays(env) or {}
    if set(saved) != set(targets):
        raise CheckpointError(f"the checkpoint's env state ({', '.join(sorted(saved))}) does "
                              f"not fit this env ({', '.join(sorted(targets)) or 'no state'})")
    restored: dict[str, Any] = {}
    for name, target in targets.items():
        tensor = saved[name]
        if isinstance(target, torch.Tensor):
            if str(target.dtype) != dtypes[name] or tuple(target.shape) != tuple(tensor.shape):
                raise _env_mismatch(name, dtypes[name], tensor.shape, target.dtype, target.shape)
            value: Any = tensor.to(target.device)
        else:
            target = np.asarray(target)
            if str(target.dtype) != dtypes[name] or target.shape != tuple(tensor.shape):
                raise _env_mismatch(name, dtypes[name], tensor.shape, target.dtype, target.shape)
            value = tensor.numpy().view(target.dtype)
        restored[name] = value
    env.load_state_dict(restored)


def _env_mismatch(name, saved_dtype, saved_shape, dtype, shape) -> CheckpointError:
    return CheckpointError(
        f"the checkpoint's env state {name!r} is {saved_dtype} {tuple(saved_shape)}, this env's "
        f"is {dtype} {tuple(shape)}: it was written for another env configuration")


# --- the trainer's state -----------------------------------------------------------------

def _attributes(trainer: Any, kind: type) -> dict[str, Any]:
    return {name: value for name, value in vars(trainer).items() if isinstance(value, kind)}


def trainer_state(trainer: Any) -> dict[str, Any]:
    """The trainer's state as tensors and plain containers (see the module docstring)."""
    return {
        "modules": {name: module.state_dict()
                    for name, module in _attributes(trainer, nn.Module).items()},
        "optimizers": {name: optimizer.state_dict()
                       for name, optimizer in _attributes(trainer, torch.optim.Optimizer).items()},
        "generators": {name: generator.get_state()
                       for name, generator in _attributes(trainer, torch.Generator).items()},
        "counters": {
            "global_step": trainer.global_step,
            "update": trainer.update,
            "episodes": trainer.episodes,
            "elapsed_s": trainer.elapsed_s(),
            "solved_at": trainer.solved_at,
        },
        "env": capture_env_state(trainer.env),
    }


def load_trainer_state(trainer: Any, state: dict[str, Any]) -> None:
    """Restore `trainer_state` output into a trainer built from a compatible config."""
    for kind, key in ((nn.Module, "modules"), (torch.optim.Optimizer, "optimizers"),
                      (torch.Generator, "generators")):
        live, saved = _attributes(trainer, kind), state[key]
        if set(live) != set(saved):
            raise CheckpointError(
                f"the checkpoint holds {key} {sorted(saved)}, this trainer has {sorted(live)}: "
                "it was written for another configuration")
    try:
        for name, module in _attributes(trainer, nn.Module).items():
            module.load_state_dict(state["modules"][name])
        for name, optimizer in _attributes(trainer, torch.optim.Optimizer).items():
            optimizer.load_state_dict(state["optimizers"][name])
        for name, generator in _attributes(trainer, torch.Generator).items():
            generator.set_state(state["generators"][name])
    except (RuntimeError, ValueError, KeyError) as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
        raise CheckpointError(f"the checkpoint does not fit this trainer: {first_line}") from None
    counters = state["counters"]
    trainer.global_step = int(counters["global_step"])
    trainer.update = int(counters["update"])
    trainer.episodes = int(counters["episodes"])
    trainer.solved_at = counters["solved_at"]
    trainer.elapsed_offset_s = float(counters["elapsed_s"])
    seed = trainer.config.train.seed
    restore_env_state(trainer.env, state["env"], reseed=(seed + 7919 * trainer.update) % 2**32)


# --- process-wide generators ---------------------------------------------------------------

def capture_global_rng() -> dict[str, Any]:
    version, internal, gauss = random.getstate()
    algorithm, keys, position, has_gauss, cached = np.random.get_state(legacy=True)
    rng: dict[str, Any] = {
        "python": {"version": version, "state": torch.tensor(internal, dtype=torch.int64),
                   "gauss": gauss},
        "numpy": {"algorithm": algorithm, "keys": torch.from_numpy(keys.astype(np.int64)),
                  "pos": int(position), "has_gauss": int(has_gauss), "cached": float(cached)},
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        rng["cuda"] = torch.cuda.get_rng_state_all()
    return rng


def restore_global_rng(rng: dict[str, Any]) -> None:
    python = rng["python"]
    random.setstate((python["version"], tuple(int(v) for v in python["state"].tolist()),
                     python["gauss"]))
    numpy_state = rng["numpy"]
    np.random.set_state((numpy_state["algorithm"], numpy_state["keys"].numpy().astype(np.uint32),
                         numpy_state["pos"], numpy_state["has_gauss"], numpy_state["cached"]))
    torch.set_rng_state(rng["torch"])
    cuda = rng.get("cuda")
    if cuda and torch.cuda.is_available() and torch.cuda.device_count() == len(cuda):
        torch.cuda.set_rng_state_all(cuda)


# --- the file ------------------------------------------------------------------------------

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
    digest = hashlib.sha256()
    _feed(digest, {key: value for key, value in payload.items() if key != "digest"})
    return digest.hexdigest()


def build_payload(trainer: Any, config_dict: dict[str, Any], progress_bytes: int) -> dict[str, Any]:
    from operant.shared import metrics_layout

    payload = {
        "format": FORMAT,
        "version": VERSION,
        "metrics_layout": (metrics_layout.VERSION_MAJOR, metrics_layout.VERSION_MINOR),
        "created_at": time.time(),
        "config": config_dict,
        "trainer": trainer.state_dict(),
        "rng": capture_global_rng(),
        "progress_bytes": int(progress_bytes),
    }
    payload["digest"] = content_digest(payload)
    return payload


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _BeatingWriter:
    """A file wrapper that reports progress on every write, for the watchdog."""

    def __init__(self, handle: Any, beat: Callable[[], None]):
        self.handle, self.beat = handle, beat

    def write(self, data: bytes) -> int:
        self.beat()
        return self.handle.write(data)

    def flush(self) -> None:
        self.handle.flush()


def write_atomic(path: Path, write: Callable[[Any], None], beat: Callable[[], None]) -> None:
    """Create `path` whole or not at all: temporary file in the same directory, fsync,
    rename, fsync the directory."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)  # left by an earlier process that had our pid
    try:
        with open(tmp, "xb") as handle:
            write(_BeatingWriter(handle, beat))
            handle.flush()
            beat()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            tmp.unlink()
        except FileNotFoundError:
            pass
        raise
    beat()
    _fsync_directory(path.parent)


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
        raise CheckpointError(f"{pointer}: does not name a checkpoint ({name[:80]!r}); point it "
                              "at one of the ckpt-*.pt files beside it, or delete it")
    path = directory / name
    if not path.exists():
        raise CheckpointError(f"{pointer}: names {name}, which does not exist; point it at one "
                              "of the ckpt-*.pt files beside it, or delete it")
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


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    line = text.splitlines()[0] if text else type(error).__name__
    return line if len(line) <= 160 else line[:157] + "..."


def load(path: Path) -> dict[str, Any]:
    """Read and verify a checkpoint; CheckpointError (one line) on any problem."""
    from operant.shared import metrics_layout

    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no such checkpoint") from None
    except PermissionError as error:
        raise CheckpointError(f"{path}: cannot be read ({error.strerror})") from None
    except IsADirectoryError:
        raise CheckpointError(f"{path}: is a directory, not a checkpoint") from None
    except Exception as error:  # any failure to parse an untrusted file means it is unusable
        raise CheckpointError(f"{path}: is corrupt or not a checkpoint ({_first_line(error)}); "
                              "delete it to resume from an older one") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(f"{path}: is not an Operant checkpoint")
    version = payload.get("version")
    if not isinstance(version, int) or version != VERSION:
        newer = isinstance(version, int) and version > VERSION
        raise CheckpointError(
            f"{path}: checkpoint format {version!r}, this operant reads {VERSION}"
            + ("; upgrade operant to resume it" if newer
               else "; resume it with the operant version that wrote it"))
    layout = tuple(payload.get("metrics_layout", ()))
    if not layout or layout[0] != metrics_layout.VERSION_MAJOR:
        raise CheckpointError(
            f"{path}: written for metrics layout {'.'.join(map(str, layout)) or '?'}, this "
            f"operant writes {metrics_layout.VERSION_MAJOR}.{metrics_layout.VERSION_MINOR}; resume "
            "it with the operant version that wrote it")
    if payload.get("digest") != content_digest(payload):
        raise CheckpointError(f"{path}: is corrupt (its content does not match its digest); "
                              "delete it to resume from an older one")
    return payload


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
    from operant.trainer.config import Config, to_dict

    try:
        saved_config = msgspec.convert(saved, Config)
    except msgspec.ValidationError as error:
        raise CheckpointError(f"{path}: its config does not fit this operant ({error}); resume it "
                              "with the operant version that wrote it") from None
    before, after = _flatten(to_dict(saved_config)), _flatten(to_dict(config))
    for key in sorted(before.keys() | after.keys()):
        if key.startswith(RESUMABLE_CHANGES):
            continue
        if before.get(key) != after.get(key) and not _both_nan(before.get(key), after.get(key)):
            raise CheckpointError(
                f"{path.name} was written with {key} = {before.get(key)!r}, but the config says "
                f"{after.get(key)!r}; resume with the run's own config, or train under a new run id")


def _both_nan(a: Any, b: Any) -> bool:
    return isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)


class Checkpointer:
    """Writes a run's checkpoints, decides when the periodic ones are due, prunes old ones."""

    def __init__(self, directory: Path, every_updates: int | None, every_seconds: float | None,
                 keep: int, beat: Callable[[], None] = lambda: None):
        self.directory = directory
        self.every_updates, self.every_seconds, self.keep = every_updates, every_seconds, keep
        self.beat = beat
        self.last_update: int | None = None
        """Update of the newest checkpoint written (or resumed from) by this process."""
        self.last_path: Path | None = None
        self.last_duration_s = 0.0
        self._last_time = time.monotonic()
        directory.mkdir(parents=True, exist_ok=True)

    def remove_leftovers(self, newer_than: int | None = None) -> None:
        """Delete temporary files of writers that died, and, when resuming from update
        `newer_than`, checkpoints past it: their updates are redone."""
        for path in self.directory.iterdir():
            update = update_of(path)
            if _TEMPORARY.match(path.name) or (
                    newer_than is not None and update is not None and update > newer_than):
                path.unlink(missing_ok=True)
        _fsync_directory(self.directory)

    def resumed_from(self, path: Path, update: int) -> None:
        self.last_update, self.last_path = update, path
        self._last_time = time.monotonic()

    def due(self, update: int) -> bool:
        """Whether a periodic checkpoint is due at the boundary after `update`."""
        if update == (self.last_update or 0):
            return False
        if self.every_updates is not None and update % self.every_updates == 0:
            return True
        return (self.every_seconds is not None
                and time.monotonic() - self._last_time >= self.every_seconds)

    def save(self, trainer: Any, config_dict: dict[str, Any], progress_bytes: int) -> Path:
        """Write the checkpoint of the trainer's current update, then point `latest` at it."""
        started = time.monotonic()
        self.beat()
        payload = build_payload(trainer, config_dict, progress_bytes)
        path = self.directory / file_name(trainer.update)
        write_atomic(path, lambda handle: torch.save(payload, handle), self.beat)
        write_atomic(self.directory / POINTER,
                     lambda handle: handle.write(f"{path.name}\n".encode()), self.beat)
        self._prune(path)
        self.last_update, self.last_path = trainer.update, path
        self._last_time = time.monotonic()
        self.last_duration_s = self._last_time - started
        return path

    def _prune(self, newest: Path) -> None:
        files = [path for path in checkpoint_files(self.directory) if path != newest]
        excess = files[:max(0, len(files) - (self.keep - 1))]
        for path in excess:
            self.beat()
            path.unlink(missing_ok=True)
        if excess:
            _fsync_directory(self.directory)

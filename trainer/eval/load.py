"""What `operant eval` evaluates, named as the user names it: a run (its id, `latest`, its
directory: its last policy, or `--best`), a model file (`model.pt`, `best.pt`) or a checkpoint
(a run's `checkpoints/latest` pointer: the checkpoint it names), each checked against its
digest; every refusal an EvalInputError of one line (operant.trainer.eval.evaluate runs what this
loads)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MODEL_FILE = "model.pt"
BEST_FILE = "best.pt"


class EvalInputError(Exception):
    """Input that names no usable policy; the message is one line saying what to do."""


@dataclass
class LoadedPolicy:
    """A policy to evaluate, whichever file it came from."""

    path: Path
    kind: str
    """model (model.pt, best.pt) or checkpoint."""
    config: dict[str, Any]
    policy: dict[str, Any]
    """The policy's state dict."""
    obs_normalizer: dict[str, Any] | None
    global_step: int | None
    update: int | None = None
    """The update it is from (model.pt holds it since the grid's agent rows made the step
    count alone ambiguous)."""


def load_policy_file(path: Path) -> LoadedPolicy:
    """A model file or a checkpoint, told apart by content, not by name."""
    from operant.trainer.checkpoint import file_format

    payload = _torch_file(path)
    if isinstance(payload, dict) and payload.get("format") == file_format.FORMAT:
        try:
            payload = file_format.load(path)  # again, with its version and digest checked
        except file_format.CheckpointError as error:
            raise EvalInputError(str(error)) from None
        state = payload["trainer"]
        return LoadedPolicy(
            path,
            "checkpoint",
            payload["config"],
            state["policy"],
            state.get("obs_normalizer"),
            int(state["counters"]["global_step"]),
        )
    return _model(path, payload)


def _torch_file(path: Path) -> Any:
    """What torch.save wrote into `path` (tensors and plain values only); EvalInputError, said
    why, for anything else."""
    import torch

    try:
        with warnings.catch_warnings():
            # torch warns about a foreign pickle before refusing it: the refusal says it all.
            warnings.simplefilter("ignore")
            return torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise EvalInputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise EvalInputError(
            f"{path} is a directory but not a run's (it has no run.json): give a run id, a "
            "run directory, or a model or checkpoint file"
        ) from None
    except Exception as error:  # any failure to parse an untrusted file: it is not ours
        import zipfile

        why = (
            "a torch file holding objects other than tensors and plain values"
            if zipfile.is_zipfile(path) and "weights_only" in str(error)
            else "not a file torch.save wrote"
        )
        raise EvalInputError(
            f"{path} is not an operant model or checkpoint ({why}); give model.pt, best.pt or "
            "a checkpoint (checkpoints/ckpt-*.pt)"
        ) from None


def _model(path: Path, payload: Any) -> LoadedPolicy:
    """A model file's (model.pt, best.pt) policy, its digest checked where it has one."""
    from operant.trainer.checkpoint.file_format import content_digest

    if not (
        isinstance(payload, dict)
        and isinstance(payload.get("policy"), dict)
        and isinstance(payload.get("config"), dict)
    ):
        raise EvalInputError(
            f"{path} is not an operant model or checkpoint (it holds no policy and config)"
        )
    if "digest" in payload and payload["digest"] != content_digest(payload):
        # (a file written before model.pt had a digest is taken as it is)
        raise EvalInputError(
            f"{path} is corrupt (its content does not match its digest); evaluate another "
            "model (best.pt, model.pt) or a checkpoint of the run"
        )
    step, update = payload.get("global_step"), payload.get("update")
    return LoadedPolicy(
        path,
        "model",
        payload["config"],
        payload["policy"],
        payload.get("obs_normalizer"),
        int(step) if step is not None else None,
        int(update) if update is not None else None,
    )


def _batch_size(config: dict[str, Any]) -> int:
    from operant.trainer.config import EnvConfig, PPOConfig

    env, ppo = config.get("env", {}), config.get("ppo", {})
    return int(env.get("num_envs", EnvConfig().num_envs)) * int(
        ppo.get("num_steps", PPOConfig().num_steps)
    )


def load_run_policy(run_dir: Path, best: bool) -> LoadedPolicy:
    """A run's best policy, or its last: model.pt or the newest checkpoint, whichever holds
    the later update (model.pt when they hold the same)."""
    from operant.shared import runs
    from operant.trainer.checkpoint import store as checkpoint

    if best:
        if not (run_dir / BEST_FILE).is_file():
            raise EvalInputError(
                f"run {run_dir.name!r} has no {BEST_FILE}; leave out --best "
                "to evaluate its last policy"
            )
        return load_policy_file(run_dir / BEST_FILE)
    checkpoints = checkpoint.checkpoint_files(run_dir / runs.CHECKPOINT_DIR)
    newest = checkpoints[-1] if checkpoints else None
    if not (run_dir / MODEL_FILE).is_file():
        if newest is None:
            raise EvalInputError(
                f"{run_dir} holds no {MODEL_FILE} and no checkpoint: a run writes a checkpoint "
                "when it is stopped, on SIGUSR1, every checkpoint.every_seconds, and "
                f"{MODEL_FILE} when it finishes"
            )
        return load_policy_file(newest)
    model = load_policy_file(run_dir / MODEL_FILE)
    if newest is None or model.global_step is None:
        return model
    model_update = model.update
    if model_update is None:  # written before model.pt held its update: one row per env
        model_update = model.global_step // _batch_size(model.config)
    newest_update = checkpoint.update_of(newest)  # a checkpoint file's name: never None here
    if newest_update is not None and newest_update > model_update:
        return load_policy_file(newest)
    return model


def _followed(path: Path) -> Path:
    """The checkpoint a run's `checkpoints/latest` pointer names, for that file; any other
    path as it is."""
    from operant.shared import runs
    from operant.trainer.checkpoint import store as checkpoint
    from operant.trainer.checkpoint.file_format import CheckpointError

    if path.name != checkpoint.POINTER or path.parent.name != runs.CHECKPOINT_DIR:
        return path
    try:
        named = checkpoint.read_pointer(path.parent)
    except CheckpointError as error:
        raise EvalInputError(str(error)) from None
    return named if named is not None else path


def resolve(target: str, runs_dir: str | None, best: bool) -> LoadedPolicy:
    """What `operant eval TARGET` evaluates (see the module docstring)."""
    from operant.shared import runs

    path = Path(target).expanduser()
    if path.is_dir():
        run_dir = path.parent if path.name == runs.CHECKPOINT_DIR else path
        return load_run_policy(run_dir, best)
    if path.exists():
        if best:
            raise EvalInputError(
                f"--best picks a run's {BEST_FILE}: name the run (its id, "
                f"'latest' or its directory), not the file {path}"
            )
        return load_policy_file(_followed(path))
    if "/" in target or target.endswith(".pt"):
        raise EvalInputError(f"{path}: no such file")
    try:
        run_dir = runs.resolve_run(runs.runs_root(runs_dir), target)
    except runs.RunNotFoundError as error:
        raise EvalInputError(str(error)) from None
    return load_run_policy(run_dir, best)

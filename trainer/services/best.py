"""The run's verdict and its best policy: whether (and when) it solved its env, and `best.pt`.

`TrackBest` is a session service (operant.trainer.services.protocol). After every update it
compares the record's mean return of the last 100 episodes (counted once 100 episodes have
finished, as "solved" is) with

- the target: `train.target_return`, else the env's registered reward threshold (Gymnasium's
  `reward_threshold`: 475 for CartPole-v1); the first update at or above it is when the run
  solved, named in the summary's verdict;
- the best mean so far: a new best takes a copy of the policy's tensors (and the observation
  normaliser's) at once, as the next update changes them, and `best.pt` is written from that
  copy, beside model.pt and in its format (operant eval --best reads it).

When best.pt is written: the improvement's copy is cheap (one tensor copy per parameter) but
a file is a serialisation, an fsync and a rename, so the file is written at most once every
BEST_WRITE_INTERVAL_S seconds while the mean keeps improving, and once more when the run ends
(finished, stopped, or failed: after a NaN the best policy is what is worth keeping). An
update that improves nothing costs one comparison. A trainer killed outright (SIGKILL, power
loss) loses at most that interval's improvements; best.pt itself is always whole (written
through operant.shared.atomic). A resumed run reads the best it had from its best.pt, so a
worse policy never replaces it.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from operant.shared.record import SOLVE_WINDOW
from operant.trainer.run.errors import describe_storage_error, is_storage_error, storage_errors
from operant.trainer.run.run_dir_watch import RunDirLost
from operant.trainer.services.protocol import Outcome, Service

BEST_FILE = "best.pt"
"""Episodes in the mean that a best and a solve are judged by (the usual "last 100")."""
BEST_WRITE_INTERVAL_S = 10.0


def env_target(config: Any) -> float | None:
    """What "solved" means for this run: train.target_return, else the env's registered
    reward threshold; None when neither exists."""
    if config.train.target_return is not None:
        return float(config.train.target_return)
    import importlib

    import gymnasium

    # "package.module:Id" (an env registered by its module's import): Gymnasium's spec() does
    # not import the module, as make() does, so the threshold was lost
    module, _, env_id = config.env.id.rpartition(":")
    try:
        if module:
            importlib.import_module(module)
        threshold = gymnasium.spec(env_id.removeprefix("operant/")).reward_threshold
    except (gymnasium.error.Error, ImportError):
        return None
    return float(threshold) if threshold is not None else None


class TrackBest(Service):
    """The verdict (solved at which step and second, against which target) and best.pt."""

    def __init__(self, trainer: Any, run_dir: Path, history: Any = None):
        self.trainer, self.path, self.history = trainer, run_dir / BEST_FILE, history
        self.target = env_target(trainer.config)
        self.best_return: float | None = None
        self.best_step: int | None = None
        self.solved_at_s: float | None = None
        self.solved_at_step: int | None = None
        self.solved_return: float | None = None
        self._pending: dict[str, Any] | None = None
        """The best policy's copy, not yet in best.pt."""
        self._written_at = -BEST_WRITE_INTERVAL_S

    def on_start(self) -> None:
        previous = _read_best(self.path)
        if previous is not None:
            self.best_return, self.best_step = previous
        for record in getattr(self.history, "records", ()):  # a resumed run's own past
            self._judge_solve(record)

    def on_update(self, record: Any) -> None:
        mean = record.episode_return_mean
        if mean is None or record.episodes < SOLVE_WINDOW:
            return
        if self.solved_at_s is None:
            self._judge_solve(record)
        if self.best_return is None or mean > self.best_return:
            self.best_return, self.best_step = mean, record.global_step
            self._pending = self._snapshot()
        if (
            self._pending is not None
            and time.monotonic() - self._written_at >= BEST_WRITE_INTERVAL_S
        ):
            self.write()

    def _judge_solve(self, record: Any) -> None:
        mean = record.episode_return_mean
        if (
            self.target is not None
            and self.solved_at_s is None
            and mean is not None
            and record.episodes >= SOLVE_WINDOW
            and mean >= self.target
        ):
            self.solved_at_s, self.solved_at_step = record.elapsed_s, record.global_step
            self.solved_return = mean

    def _snapshot(self) -> dict[str, Any]:
        """best.pt's content for the policy as it is now (model.pt's format, plus the mean
        return it is the best for)."""
        from operant.trainer.loop.train import with_digest

        trainer = self.trainer
        model = trainer.model_payload()
        model["policy"] = {
            name: tensor.detach().clone() for name, tensor in model["policy"].items()
        }
        for key in ("obs_normalizer", "reward_normalizer"):
            if key in model:
                model[key] = {
                    name: value.clone() if hasattr(value, "clone") else value
                    for name, value in model[key].items()
                }
        model["episode_return_mean"] = self.best_return
        return with_digest(model)

    def write(self) -> None:
        """best.pt from the pending copy; a disk that refuses it is one warning line (the
        next improvement or the run's end tries again)."""
        import torch

        from operant.shared import atomic

        model, self._pending = self._pending, None
        self._written_at = time.monotonic()
        try:
            with storage_errors():
                atomic.write_with(self.path, lambda handle: torch.save(model, handle))
        except OSError as error:
            if not is_storage_error(error):
                raise
            self._pending = model
            print(
                f"operant-train: warning: {self.path} not written: "
                f"{describe_storage_error(error, self.path.parent)}",
                file=sys.stderr,
            )

    def on_stop(self, outcome: Outcome) -> None:
        if isinstance(outcome.error, RunDirLost):
            return  # nowhere to write it: its line says what became of the run
        if self._pending is not None and outcome.kind in ("finished", "stopped", "failed"):
            self.write()

    def verdict(self) -> str | None:
        """One line: solved when and how, or not solved with the best mean; None without a
        target."""
        if self.target is None:
            return None
        if self.solved_at_s is not None:
            return (
                f"solved at {self.solved_at_s:.2f} s (step {self.solved_at_step:,}): mean "
                f"return of the last {SOLVE_WINDOW} episodes {self.solved_return:.1f} >= "
                f"target {self.target:g}"
            )
        if self.best_return is None:
            return (
                f"not solved: fewer than {SOLVE_WINDOW} episodes finished (target {self.target:g})"
            )
        return f"not solved: best mean return {self.best_return:.1f} < target {self.target:g}"

    def summary_fields(self) -> dict[str, Any]:
        """The verdict and the best as operant.shared.record.RunSummary's fields."""
        written = self.best_return is not None and self.path.exists()
        return {
            "target_return": self.target,
            "solved": None if self.target is None else self.solved_at_s is not None,
            "solved_at_s": self.solved_at_s,
            "solved_at_step": self.solved_at_step,
            "best_return_mean": self.best_return,
            "best_at_step": self.best_step,
            "best_model": str(self.path) if written else None,
        }

    def best_line(self) -> str | None:
        """Where the best policy is; None before 100 episodes have finished."""
        if self.best_return is None or not self.path.exists():
            return None
        return f"best mean return {self.best_return:.1f} at step {self.best_step:,} -> {self.path}"


def _read_best(path: Path) -> tuple[float, int] | None:
    """(mean return, step) of a best.pt a previous process wrote; None if there is none."""
    import torch

    from operant.trainer.checkpoint.file_format import content_digest

    try:
        model = torch.load(path, map_location="cpu", weights_only=True)
        if "digest" in model and model["digest"] != content_digest(model):
            return None  # damaged: the next best replaces it
        return float(model["episode_return_mean"]), int(model["global_step"])
    except FileNotFoundError:
        return None
    except (OSError, KeyError, TypeError, ValueError, RuntimeError):
        return None  # unreadable: the next best replaces it

"""The trainer's explicit state: what `Trainer.state_dict()` holds, under which names, and how
`Trainer.load_state_dict()` checks and restores it; and the process-wide generators, which a
checkpoint carries beside it.

`Trainer.state_dict()` is a dict of tensors and plain containers under these names, each
read from the trainer attribute of the same name:

- `policy`: the policy's `state_dict()`;
- `optimizer`: FlatAdam's `state_dict()` (first and second moments, step count);
- `obs_normalizer`, `reward_normalizer`: their running statistics, present exactly when the
  config turns them on (normalize.obs, normalize.reward);
- `generator` (action sampling, on the trainer's device) and `cpu_generator` (minibatch
  shuffles): `torch.Generator.get_state()`;
- `counters`: `global_step`, `update`, `episodes`, `elapsed_s` (seconds trained across
  resumes), `solved_at` (seconds at which train.target_return was reached, or None);
- `env`: the env's state through the BatchEnv contract (`resumable`, `state_dict()`,
  `load_state_dict()`): `impl`, `exact` (whether it was captured), `arrays` (CPU tensors
  with the bytes of the env's arrays; uint64 ones viewed as int64, which torch lacks) and
  `dtypes` (each array's original dtype name). An env that is not resumable (Gymnasium's own
  envs keep arbitrary Python state) is not captured: a resumed run re-seeds it, so its
  episodes in flight restart and the run is not bit-identical to an uninterrupted one.

Nothing else is state: the learning rate is a function of the update counter and the config
(ppo.anneal_lr), and the rollout storage is refilled before it is read.

`load_trainer_state` refuses, with one CheckpointError line, a state whose names are not
exactly these, or whose tensors do not fit the trainer built from the resuming config.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch

from operant.trainer.checkpoint.file_format import CheckpointError
from operant.trainer.run.errors import first_line, load_error_line

if TYPE_CHECKING:
    from numpy.typing import NDArray

MODULES = ("policy", "optimizer")
OPTIONAL_MODULES = ("obs_normalizer", "reward_normalizer")
GENERATORS = ("generator", "cpu_generator")
COUNTERS = ("global_step", "update", "episodes", "elapsed_s", "solved_at")
ENV = "env"


def _modules(trainer: Any) -> dict[str, torch.nn.Module]:
    """The trainer's modules with state, by name: the configured normalisers only."""
    named = {name: getattr(trainer, name) for name in MODULES}
    named.update(
        (name, module)
        for name in OPTIONAL_MODULES
        if (module := getattr(trainer, name)) is not None
    )
    return named


def state_names(trainer: Any) -> set[str]:
    """The names `trainer`'s state dict holds (they depend on its config)."""
    return {*_modules(trainer), *GENERATORS, "counters", ENV}


def trainer_state_dict(trainer: Any) -> dict[str, Any]:
    """`Trainer.state_dict()` (see the module docstring)."""
    state: dict[str, Any] = {
        name: module.state_dict() for name, module in _modules(trainer).items()
    }
    state.update((name, getattr(trainer, name).get_state()) for name in GENERATORS)
    state["counters"] = {
        "global_step": trainer.global_step,
        "update": trainer.update,
        "episodes": trainer.episodes,
        "elapsed_s": trainer.elapsed_s(),
        "solved_at": trainer.solved_at,
    }
    state[ENV] = capture_env_state(trainer.env)
    return state


def _check_names(what: str, given: Any, expected: set[str]) -> None:
    if not isinstance(given, dict):
        raise CheckpointError(f"the checkpoint's {what} is not a dict of named state")
    missing, extra = sorted(expected - set(given)), sorted(set(given) - expected)
    if missing or extra:
        parts = ([f"lacks {', '.join(missing)}"] if missing else []) + (
            [f"has {', '.join(extra)} which this trainer does not"] if extra else []
        )
        raise CheckpointError(
            f"the checkpoint's {what} {' and '.join(parts)}: it was written "
            "for another configuration"
        )


def load_trainer_state_dict(trainer: Any, state: dict[str, Any]) -> None:
    """`Trainer.load_state_dict(state)`: check the names, then restore every part in place."""
    _check_names("trainer state", state, state_names(trainer))
    _check_names("counters", state["counters"], set(COUNTERS))
    try:
        for name, module in _modules(trainer).items():
            module.load_state_dict(state[name])
        counters = state["counters"]
        trainer.update = int(counters["update"])
        for name in GENERATORS:
            _restore_generator(trainer, name, state[name])
        trainer.global_step = int(counters["global_step"])
        trainer.episodes = int(counters["episodes"])
        trainer.solved_at = counters["solved_at"]
        trainer.elapsed_offset_s = float(counters["elapsed_s"])
    except (RuntimeError, ValueError, TypeError) as error:
        raise CheckpointError(
            f"the checkpoint does not fit this trainer: {load_error_line(error)}"
        ) from None
    seed = trainer.config.train.seed
    restore_env_state(trainer.env, state[ENV], reseed=(seed + 7919 * trainer.update) % 2**32)


def _restore_generator(trainer: Any, name: str, saved: torch.Tensor) -> None:
    """Put a generator's state back; a state of another device type (a run that trained on a
    GPU resumed on a CPU, or the reverse: train.device may change on resume) cannot be, so
    the generator is re-seeded from the rank's seed and the update instead, and
    `trainer.reseeded` names it."""
    generator = getattr(trainer, name)
    if saved.numel() == generator.get_state().numel():
        generator.set_state(saved)
        return
    generator.manual_seed((trainer.rank_seed + 7919 * trainer.update) % 2**63)
    trainer.reseeded = (*trainer.reseeded, name)


# --- env state -----------------------------------------------------------------------------


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
    """The `env` part of the trainer's state: a copy of the env's state_dict()."""
    impl = str(env.impl)
    if not env.resumable:
        return {"impl": impl, "exact": False, "arrays": {}, "dtypes": {}}
    tensors, dtypes = {}, {}
    for name, value in env.state_dict().items():
        tensors[name], dtypes[name] = _to_tensor(value)
    return {"impl": impl, "exact": True, "arrays": tensors, "dtypes": dtypes}


def restore_env_state(env: Any, state: dict[str, Any], reseed: int) -> None:
    """Put a captured state back into `env` in place; an env whose state was not captured is
    reset with seed `reseed` instead."""
    if not state.get("exact"):
        env.reset(seed=reseed)
        return
    saved, dtypes = state["arrays"], state["dtypes"]
    targets = dict(env.state_dict()) if env.resumable else {}
    if set(saved) != set(targets):
        raise CheckpointError(
            f"the checkpoint's env state ({', '.join(sorted(saved))}) does "
            f"not fit this env ({', '.join(sorted(targets)) or 'no state'})"
        )
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
    try:
        env.load_state_dict(restored)
    except ValueError as error:
        raise CheckpointError(
            f"the checkpoint's env state does not fit this env: {first_line(error)}"
        ) from None


def _env_mismatch(name, saved_dtype, saved_shape, dtype, shape) -> CheckpointError:
    return CheckpointError(
        f"the checkpoint's env state {name!r} is {saved_dtype} {tuple(saved_shape)}, this env's "
        f"is {dtype} {tuple(shape)}: it was written for another env configuration"
    )


# --- process-wide generators ---------------------------------------------------------------


def capture_global_rng() -> dict[str, Any]:
    """Python's `random`, numpy's legacy global generator, torch's CPU generator and, where
    CUDA is initialised, every CUDA device's, as tensors and plain values."""
    version, internal, gauss = random.getstate()
    # The legacy global generator is always an MT19937: its state is the tuple, never a dict.
    state = cast(
        "tuple[str, NDArray[np.uint32], int, int, float]", np.random.get_state(legacy=True)
    )
    algorithm, keys, position, has_gauss, cached = state
    rng: dict[str, Any] = {
        "python": {
            "version": version,
            "state": torch.tensor(internal, dtype=torch.int64),
            "gauss": gauss,
        },
        "numpy": {
            "algorithm": algorithm,
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(position),
            "has_gauss": int(has_gauss),
            "cached": float(cached),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        rng["cuda"] = torch.cuda.get_rng_state_all()
    return rng


def restore_global_rng(rng: dict[str, Any]) -> None:
    """Undo `capture_global_rng` (CUDA's only on a machine with as many devices)."""
    python = rng["python"]
    random.setstate(
        (python["version"], tuple(int(v) for v in python["state"].tolist()), python["gauss"])
    )
    numpy_state = rng["numpy"]
    np.random.set_state(
        (
            numpy_state["algorithm"],
            numpy_state["keys"].numpy().astype(np.uint32),
            numpy_state["pos"],
            numpy_state["has_gauss"],
            numpy_state["cached"],
        )
    )
    torch.set_rng_state(rng["torch"])
    cuda = rng.get("cuda")
    if cuda and torch.cuda.is_available() and torch.cuda.device_count() == len(cuda):
        torch.cuda.set_rng_state_all(cuda)

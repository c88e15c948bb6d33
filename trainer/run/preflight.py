"""What this machine must offer a config before a run starts: its device, the packages its env
needs, and the memory it will allocate. Checked when the run is planned, before anything is
created (no run directory, no metrics file, no allocation), by operant-train, `operant train`
(before it launches anything) and `operant bench`.

Each refusal is an `UnavailableError`, a ConfigError: bad input, one line that says what to
install or change, exit status 2 (a supervisor must not restart into it: the same start fails
the same way).
"""

from __future__ import annotations

import ctypes
import dataclasses
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import psutil

from operant.trainer.config import Config, ConfigError, build_env
from operant.trainer.run.errors import first_line


class UnavailableError(ConfigError):
    """The config asks for what this machine does not have: a device, a package, memory."""


@dataclass(frozen=True)
class EnvShape:
    """One row's observation and action, and rows per env: what an env's memory is made of."""

    obs_spec: Any
    act_spec: Any
    agents_per_env: int
    env_bytes: int | None = None
    """A Python env's own memory, measured (`measure_env_bytes`); None for the others, whose
    state is the kernel's arrays."""


def check_device(device: str) -> None:
    """Refuse a train.device this torch cannot use (a CPU-only build asked for cuda, a GPU
    index that does not exist, a name torch does not know)."""
    if device == "cpu":
        return  # without importing torch: every build has a CPU
    import torch

    try:
        parsed = torch.device(device)
    except RuntimeError:
        raise UnavailableError(
            f"train.device = {device!r} is not a torch device; use cpu, cuda, cuda:N or mps"
        ) from None
    if parsed.type == "cuda":
        if torch.version.cuda is None and not torch.cuda.is_available():
            raise UnavailableError(
                f"train.device = {device!r}, but this torch ({torch.__version__}) is a "
                "CPU-only build; install a CUDA build of torch (pytorch.org's selector, e.g. "
                "pip install torch --index-url https://download.pytorch.org/whl/cu128) or set "
                'train.device = "cpu"'
            )
        if not torch.cuda.is_available():
            raise UnavailableError(
                f"train.device = {device!r}, but torch sees no CUDA GPU (no GPU, no driver, or "
                'CUDA_VISIBLE_DEVICES hides it); set train.device = "cpu"'
            )
        count = torch.cuda.device_count()
        if parsed.index is not None and parsed.index >= count:
            raise UnavailableError(
                f"train.device = {device!r}, but this machine has {count} "
                f"CUDA GPU(s) (cuda:0 to cuda:{count - 1})"
            )
        return
    if parsed.type == "mps" and not torch.backends.mps.is_available():
        raise UnavailableError(
            f"train.device = {device!r}, but MPS is not available here "
            "(Apple silicon with a torch built for it); set "
            'train.device = "cpu"'
        )
    try:
        torch.empty(1, device=parsed)
    except RuntimeError as error:
        raise UnavailableError(
            f"train.device = {device!r} is not usable here "
            f'({first_line(error)}); set train.device = "cpu"'
        ) from None


def probe_env(config: Config, impl: str) -> EnvShape:
    """Build the config's env once with one copy (build_env, as the trainer will), to read its
    specs and to find a package it needs that is missing (Gymnasium's DependencyNotInstalled:
    box2d, mujoco, ...)."""
    import gymnasium

    def build() -> Any:
        return build_env(config, 1, impl=impl, device=config.train.device)

    try:
        env = build()
    except (gymnasium.error.DependencyNotInstalled, ImportError) as error:
        raise UnavailableError(
            f"env.id = {config.env.id!r} needs a package that is not installed: {first_line(error)}"
        ) from None
    try:
        shape = EnvShape(env.obs_spec, env.act_spec, env.layout.agents_per_env)
        if env.impl != "reference":
            return shape
        warmed = _reset_quietly(env)
    finally:
        env.close()
    if not warmed:
        return shape
    return dataclasses.replace(shape, env_bytes=measure_env_bytes(build))


def _reset_quietly(env: Any) -> bool:
    """Reset `env` (its imports and caches paid before a measurement); False where it raises:
    it then fails where it fails without the measurement (in its worker, or as the trainer
    builds it), with that failure's words."""
    try:
        env.reset(seed=0)
        return True
    except Exception as error:
        _unless_hung(error)
        return False


def measure_env_bytes(build: Callable[[], Any]) -> int | None:
    """The memory one more env takes, built and reset after the probe's (closed: the two
    never hold memory at once, so an env of more than half the machine's memory is refused,
    not OOM-killed, by this check): a Python env is an object graph of its own, 3.6 KiB for
    CartPole and about 2 MB for an Atari emulator, which the estimate had counted as 4 KiB.
    The larger of the resident growth (C and C++ allocations: an emulator's) after the C
    heap's free memory went back to the system, and what tracemalloc saw Python and numpy
    allocate (which a heap with free memory serves without growing). The env takes one step
    too (`_step_once`): memory made on a first step (a renderer, a lazy buffer) is its own.
    None where the env raises (as `_reset_quietly`)."""
    process = psutil.Process()
    _trim_heap()
    tracing = tracemalloc.is_tracing()
    if not tracing:
        tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before, traced_before = process.memory_info().rss, tracemalloc.get_traced_memory()[0]
        env = build()
        try:
            env.reset(seed=0)
            _step_once(env)
            resident = process.memory_info().rss - before
            traced = tracemalloc.get_traced_memory()[0] - traced_before
            return max(0, resident, traced)
        finally:
            env.close()
    except Exception as error:
        _unless_hung(error)
        return None
    finally:
        if not tracing:
            tracemalloc.stop()


def _step_once(env: Any) -> None:
    """One step of `env` with a valid action: the first discrete one, or the point of the
    action box nearest 0."""
    spec = env.act_spec
    if not spec.discrete:
        env.actions[:] = np.clip(0.0, spec.low, spec.high)
    env.step_bound()


def _unless_hung(error: Exception) -> None:
    """Raise `error` again where it is an env that hung past a stop's grace (it must end the
    start, not pass for an env that merely could not be measured)."""
    from operant.envs.reference.step_deadline import EnvStepHung

    if isinstance(error.__cause__, EnvStepHung):
        raise error


def _trim_heap() -> None:
    """glibc's malloc_trim(0): free heap memory back to the system, so that what the next
    allocations take shows in the resident size; nothing where there is no glibc."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass


def check_workers(config: Any, impl: str) -> None:
    """Refuse env.workers > 1 for an env that does not step in Python (native, torch, a
    family): a ConfigError, before any env or worker is made."""
    if config.env.workers == 1:
        return
    from operant.envs.registry import workers_refusal

    refusal = workers_refusal(config.env.id, config.env.impl, impl, config.env.workers)
    if refusal is not None:
        raise ConfigError(refusal)


def check_launch(config: Any, impl: str, nproc_per_node: int) -> None:
    """What the launcher of K ranks a node refuses before torchrun starts, from the config
    alone (no env is built: each rank's preflight checks its own share's env and memory):
    env workers, env.overlap, the device, and nccl's GPU a rank."""
    from operant.envs.registry import overlap_refusal
    from operant.trainer.distributed.group import backend_problem, choose_backend

    check_workers(config, impl)
    refusal = overlap_refusal(config.env.id) if config.env.overlap else None
    if refusal is not None:
        raise ConfigError(refusal)
    check_device(config.train.device)
    backend = choose_backend(config.train.dist_backend, config.train.device)
    problem = backend_problem(backend, nproc_per_node - 1)
    if problem is not None:
        raise UnavailableError(problem)


def check(config: Any, impl: str) -> EnvShape:
    """Everything above for a training config: env workers, device, env, memory. Returns the
    env's shape (its agents per env decide the batch: RunPlan.settle)."""
    from operant.trainer.run import memory

    check_workers(config, impl)
    check_device(config.train.device)
    shape = probe_env(config, impl)
    refusal = memory.check(
        config,
        impl,
        shape.obs_spec,
        shape.act_spec,
        shape.agents_per_env,
        env_bytes=shape.env_bytes,
    )
    if refusal is not None:
        raise UnavailableError(refusal)
    return shape

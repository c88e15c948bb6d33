"""The one place that maps env ids to implementations: Operant's own envs, families registered
at run time, and Gymnasium's envs.

Operant's own envs are the entries of `ENVS` (a Gymnasium id, its kernel in cext/ and its torch
class in operant.envs.torch). Each has up to three implementations (`env.impl`):

- `native`: the Cython batch kernel (operant.cext), numpy buffers, CPU (operant.envs.native.vector;
  `overlap=True` steps it in two halves, one on a native thread: operant.envs.native.overlap);
- `torch`: the same dynamics as batched tensor ops on any torch device (operant.envs.torch);
- `reference`: Gymnasium's own env through its vector API: any installed Gymnasium id
  (operant.envs.reference.vector);
- `auto`: native when the kernel is built, else reference. The chosen implementation is the
  env's `impl` attribute, for the trainer to log.

A *family* is any other implementation of the env contract (operant.envs.contract.BatchEnv):
pixel games, many-agent worlds, a user's own. `register_family(env_id, make, impl=...)`
makes `env_id` trainable without touching the loop. A config or `make_env` call may name an
env as `"package.module:Id"`, as Gymnasium does: the module is imported first, and its import
registers the family (or Gymnasium env) `Id`. The `operant/` prefix is accepted and dropped.

Spaces, episode limits and reward thresholds of Operant's own envs are Gymnasium's (read from
its spec and env class), so they cannot drift from the environments they mirror.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import gymnasium
from gymnasium import spaces
from gymnasium.envs.registration import EnvSpec, load_env_creator

IMPLS = ("auto", "native", "torch", "reference")


class EnvError(ValueError):
    """A user asked for an env or implementation that does not exist; message says what does."""


class ModuleNotHere(Exception):
    """Marks an error whose cause is a user's module (an env's `module:Id`, a policy's
    `module:Name`) that is neither on sys.path nor in the current folder: where the run
    that named it was started is then worth saying (operant.shared.runs.where_started)."""

    module_not_here = True


class EnvModuleNotHere(EnvError, ModuleNotHere):
    """An env id's `module` that cannot be found."""


class EnvFailedError(RuntimeError):
    """A user's Python env raised while it was built, reset or stepped; the message names the
    env and the exception, which is its `__cause__` (its traceback is the user's to read).
    Like an env worker's failure (operant.envs.reference.workers.EnvWorkerError), it ends a
    trainer's run as failed with one line, after that traceback
    (operant.trainer.services.protocol)."""

    fails_the_run = True
    culprit = "env"
    """Whose code failed: the console says how to go on 'once the env works'."""


class InvalidActionError(ValueError):
    """Actions passed to `step` had the wrong shape, dtype or value."""


def _kernel(module: str, name: str) -> Callable[..., Any] | None:
    """The kernel class, or None when the extension is not built (then `auto` falls back)."""
    try:
        return getattr(importlib.import_module(f"operant.cext.{module}"), name)
    except ImportError:
        return None


@dataclass(frozen=True)
class EnvEntry:
    """An environment Operant implements itself, under its Gymnasium id."""

    id: str
    native_kernel: tuple[str, str] | None = None
    """(module in operant.cext, class) of the Cython kernel."""
    torch_env: str | None = None
    """Class in operant.envs.torch with the same dynamics as tensor ops."""

    @property
    def spec(self) -> EnvSpec:
        return gymnasium.spec(self.id)

    @property
    def max_episode_steps(self) -> int:
        # Gymnasium registers every env here with its time limit (EnvSpec allows none)
        return cast(int, self.spec.max_episode_steps)

    @property
    def reward_threshold(self) -> float | None:
        return self.spec.reward_threshold

    def spaces(self) -> tuple[spaces.Space, spaces.Space]:
        """Fresh copies of Gymnasium's single-env observation and action spaces."""
        # Gymnasium registers its own envs by a "module:Class" string (EnvSpec allows a callable)
        env = load_env_creator(cast(str, self.spec.entry_point))()
        try:
            return env.observation_space, env.action_space
        finally:
            env.close()

    @property
    def native(self) -> Callable[..., Any] | None:
        return _kernel(*self.native_kernel) if self.native_kernel else None

    @property
    def torch(self) -> Callable[..., Any] | None:
        """The torch env class (imports torch; call only when the torch impl is wanted)."""
        if self.torch_env is None:
            return None
        from operant.envs import torch as torch_family

        return getattr(torch_family, self.torch_env)


ENVS: dict[str, EnvEntry] = {
    entry.id: entry
    for entry in (
        EnvEntry("CartPole-v1", ("cartpole", "CartPoleKernel"), "TorchCartPole"),
        EnvEntry("MountainCar-v0", ("mountain_car", "MountainCarKernel"), "TorchMountainCar"),
        EnvEntry(
            "MountainCarContinuous-v0",
            ("mountain_car_continuous", "MountainCarContinuousKernel"),
            "TorchMountainCarContinuous",
        ),
        EnvEntry("Pendulum-v1", ("pendulum", "PendulumKernel"), "TorchPendulum"),
        EnvEntry("Acrobot-v1", ("acrobot", "AcrobotKernel"), "TorchAcrobot"),
    )
}


@dataclass(frozen=True)
class Family:
    """An env family registered at run time (`register_family`): its factory and the
    implementation it provides (what `auto` picks), and the factories of further
    implementations registered under the same id (`others`, by impl)."""

    id: str
    make: Callable[..., Any]
    impl: str
    others: dict[str, Callable[..., Any]] = field(default_factory=dict)

    @property
    def impls(self) -> tuple[str, ...]:
        return (self.impl, *self.others)

    def maker(self, impl: str) -> Callable[..., Any]:
        """The factory of implementation `impl` ("auto": the first registered)."""
        return self.make if impl in ("auto", self.impl) else self.others[impl]


FAMILIES: dict[str, Family] = {}


def register_family(env_id: str, make: Callable[..., Any], *, impl: str = "native") -> None:
    """Make `env_id` trainable without touching the loop: `make_env(env_id, N, ...)` returns
    `make(N, copy=..., **kwargs)`, an implementation of operant.envs.contract.BatchEnv.
    A config names a family registered by a module as `"package.module:Id"` (as Gymnasium
    does): the module is imported first, and its import registers the family."""
    if impl not in IMPLS or impl == "auto":
        raise ValueError(f"a family's impl must be one of native, torch, reference; got {impl!r}")
    existing = FAMILIES.get(env_id)
    if existing is not None and impl != existing.impl:
        # a second implementation of the same family (MinAtar's games: native and reference)
        existing.others[impl] = make
        return
    FAMILIES[env_id] = Family(env_id, make, impl)


def _key(env_id: str) -> str:
    """The registry key of `env_id`: without the `operant/` namespace, and after importing
    the module of a `"package.module:Id"` id (whose import registers its families)."""
    if ":" in env_id:
        module, _, env_id = env_id.partition(":")
        try:
            import_env_module(module)
        except ImportError as error:
            missing = isinstance(error, ModuleNotFoundError) and error.name == module
            raise (EnvModuleNotHere if missing else EnvError)(
                f"env id {module}:{env_id}: cannot import {module!r} ({error}); install the "
                "package that provides it, or start from the folder that holds it (or name "
                "that folder in PYTHONPATH)"
            ) from None
    return env_id.removeprefix("operant/")


def import_env_module(module: str) -> None:
    """Import the module of a `"package.module:Id"` env id. One that is nowhere on sys.path is
    looked for in the current folder too, as `python -m` and uvicorn look for theirs (a console
    script's sys.path starts with its own folder, not the current one); the folder then stays
    on sys.path, which env workers inherit."""
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as error:
        here = os.getcwd()
        if error.name != module.partition(".")[0] or here in sys.path or "" in sys.path:
            raise
        sys.path.insert(0, here)
        try:
            importlib.import_module(module)
        except BaseException:
            sys.path.remove(here)
            raise


def shadowed(module: str) -> str:
    """Why `module:Name` found no Name where the current folder holds a file of the module's
    name that was not the one imported: another module of that name comes first on sys.path
    (the standard library's `test`, `code` or `types`, a package installed under that name).
    A clause to end an error line with, or ""."""
    top = module.partition(".")[0]
    here = os.path.realpath(os.getcwd())
    mine = [name for name in (f"{top}.py", top) if os.path.exists(os.path.join(here, name))]
    if not mine:
        return ""
    origin = getattr(sys.modules.get(top), "__file__", None)
    if origin is not None and os.path.realpath(origin).startswith(here + os.sep):
        return ""
    where = f"from {origin}" if origin else "from Python itself (a built-in module)"
    return (
        f"; {top!r} was imported {where}, not from ./{mine[0]}, which a module of that name "
        "earlier on sys.path hides: rename your file"
    )


def _implemented() -> str:
    """Every id operant implements itself: the classic-control envs and the families."""
    return ", ".join([*ENVS, *FAMILIES])


def lookup(env_id: str) -> EnvEntry:
    """The entry for `env_id` (with or without the `operant/` namespace)."""
    key = env_id.removeprefix("operant/")
    try:
        return ENVS[key]
    except KeyError:
        raise EnvError(
            f"unknown env id {env_id!r}; operant implements: {_implemented()} "
            f'(any Gymnasium id trains with env.impl = "reference")'
        ) from None


@functools.cache
def _gymnasium_refusal(env_id: str) -> str | None:
    """Why Gymnasium has no env `env_id` (its own words: they name the current version of a
    deprecated id), or None when it has one."""
    try:
        gymnasium.spec(env_id)
    except gymnasium.error.Error as error:
        return str(error)
    return None


def resolve_impl(env_id: str, impl: str) -> str:
    """Which implementation `impl` means for `env_id`: "native", "torch" or "reference".

    Raises EnvError, naming what was asked and what exists, for an unknown impl, an id that
    neither Operant nor Gymnasium knows, or an implementation this env does not have.
    """
    if impl not in IMPLS:
        raise EnvError(f"unknown env impl {impl!r}; choose one of: {', '.join(IMPLS)}")
    key = _key(env_id)
    family = FAMILIES.get(key)
    if family is not None:
        if impl != "auto" and impl not in family.impls:
            if not family.others:
                raise EnvError(
                    f"{key} has only the {family.impl} implementation; use env.impl = "
                    f'"{family.impl}" or "auto"'
                )
            raise EnvError(
                f"{key} has no {impl} implementation; use env.impl = one of "
                f"{', '.join(family.impls)} or auto"
            )
        return family.impl if impl == "auto" else impl
    entry = ENVS.get(key)
    if impl in ("reference", "auto") and entry is None:
        refusal = _gymnasium_refusal(key)
        if refusal is not None:
            own = ""
            # not a bad version: an id, or a namespace (ALE/...), that no module registered
            if ":" not in env_id and ("doesn't exist" in refusal or "Namespace" in refusal):
                own = (
                    " (an env your own module registers: name the module too, as "
                    f"'package.module:{key}')"
                )
            if ":" in env_id:
                own = shadowed(env_id.partition(":")[0])
            raise EnvError(
                f"unknown env id {env_id!r}: operant implements {_implemented()}, "
                f"and Gymnasium says: {refusal.rstrip('.') if own[:1] == ';' else refusal}{own}"
            )
        return "reference"
    if impl == "reference":
        return impl
    if entry is None:  # (impl is native or torch: auto and reference returned above)
        if _gymnasium_refusal(key) is None:
            raise EnvError(
                f"{key} has no {impl} implementation (operant implements "
                f'{_implemented()}); use env.impl = "reference" to train it '
                "through Gymnasium"
            )
        entry = lookup(env_id)  # raises: the id is unknown
    if impl == "auto":
        return "native" if entry.native is not None else "reference"
    if impl == "native" and entry.native is None:
        raise EnvError(
            f"{key} has no native kernel in this build (operant.cext."
            f"{entry.native_kernel[0] if entry.native_kernel else '?'} did not "
            'import); rebuild, or use env.impl = "torch" or "reference"'
        )
    if impl == "torch" and entry.torch_env is None:
        raise EnvError(f'{key} has no torch implementation; use env.impl = "native" or "reference"')
    return impl


def make_env(
    env_id: str,
    num_envs: int,
    impl: str = "auto",
    copy: bool = True,
    device: Any = None,
    overlap: bool = False,
    options: dict[str, Any] | None = None,
    workers: int = 1,
    frame_stack: int = 1,
    info_mode: str = "stats",
    **kwargs,
):
    """A vector env for `env_id` with the chosen implementation (its `impl` attribute says
    which), its observations the last `frame_stack` stacked (operant.envs.face.frame_stack; 1, the
    default, is the env itself) and `step()`'s info as `info_mode` says
    (operant.envs.face.info_mode: "stats", the default, is the env itself; "full"; "none").
    `device` is for impl "torch" (default CPU); native and reference envs live on the CPU and
    refuse any other device. `overlap` makes a native env stepped in two halves, either on a
    native thread (operant.envs.native.overlap: the overlapped rollout's). `workers` > 1 steps a
    reference env in that many processes (operant.envs.reference.workers); any other implementation
    refuses it. `options` are the env's own keywords (config env.options): a family's, or, with
    impl "reference", Gymnasium's env's (`g` for Pendulum), as are keywords of this call that
    are not the reference env's own; native and torch kernels refuse them. A refused one is an
    EnvError naming those the env takes."""
    from operant.envs.face.frame_stack import check_frame_stack, stack_env
    from operant.envs.face.info_mode import with_info_mode

    refusal = overlap_refusal(env_id) if overlap else None
    if refusal is not None:  # first: dropping the frame stack would not make it work
        raise EnvError(refusal)
    if check_frame_stack(frame_stack) > 1 and overlap:
        raise EnvError(
            f"env.frame_stack = {frame_stack} and env.overlap = true do not combine (the "
            "overlapped rollout steps the kernel's halves itself): drop one"
        )
    from operant.envs.face.vector_spec import vector_spec

    env = _make_env(env_id, num_envs, impl, copy, device, overlap, options, workers, kwargs)
    if getattr(env, "spec", None) is None:
        env.spec = vector_spec(_key(env_id), env, num_envs)
    return with_info_mode(stack_env(env, frame_stack), info_mode)


def overlap_refusal(env_id: str) -> str | None:
    """Why `env.overlap = true` cannot split this env's steps, in one line; None when it can
    (a family's kernel steps its envs in one call of its own)."""
    key = _key(env_id)
    if key in FAMILIES:
        return f"env.overlap = true is for the native classic-control kernels, not {key}"
    return None


def _make_env(
    env_id: str,
    num_envs: int,
    impl: str,
    copy: bool,
    device: Any,
    overlap: bool,
    options: dict[str, Any] | None,
    workers: int,
    kwargs: dict[str, Any],
):
    from operant.envs.face.keywords import check_keywords, gymnasium_keywords, split_keywords

    chosen = resolve_impl(env_id, impl)
    key = _key(env_id)
    if workers != 1:
        refusal = workers_refusal(env_id, impl, chosen, workers)
        if refusal is not None:
            raise EnvError(refusal)
    if key in FAMILIES:  # (overlap on a family: refused by make_env, before the frame stack)
        if device is not None:
            kwargs["device"] = device
        return _make_family(FAMILIES[key], chosen, num_envs, copy, options or {}, kwargs)
    if options and chosen != "reference":
        raise EnvError(
            f"env.options: {key}'s {chosen} implementation takes no options (got "
            f"{', '.join(sorted(options))}); Gymnasium's env takes its own keywords with "
            'env.impl = "reference", a family such as Grid-v0 its own: else remove [env.options]'
        )
    if overlap:
        if chosen != "native":
            raise EnvError(
                f"env.overlap = true needs the native kernels, and env.impl = "
                f'"{impl}" resolved to {chosen!r} (is the extension built?)'
            )
        from operant.envs.native.overlap import SplitNativeVectorEnv
        from operant.envs.native.vector import NativeVectorEnv

        check_keywords((SplitNativeVectorEnv, NativeVectorEnv), kwargs, f"{key} (native)")
        return SplitNativeVectorEnv(lookup(key), num_envs, copy=copy, **kwargs)
    if chosen == "torch":
        return _make_torch_env(key, num_envs, device, copy, kwargs)
    if device is not None and str(device) != "cpu":
        raise EnvError(
            f'device={device!r} needs env.impl = "torch"; the {chosen} '
            f"implementation of {key} runs on the CPU"
        )
    if chosen == "native":
        from operant.envs.native.vector import NativeVectorEnv

        check_keywords(NativeVectorEnv, kwargs, f"{key} (native)")
        return NativeVectorEnv(lookup(key), num_envs, copy=copy, **kwargs)
    if workers != 1:
        from operant.envs.reference.workers import WorkerVectorEnv

        own, env_kwargs = split_keywords(WorkerVectorEnv, kwargs, options)
        env_kwargs = gymnasium_keywords(env_id, env_kwargs)
        return WorkerVectorEnv(env_id, num_envs, workers, copy=copy, env_kwargs=env_kwargs, **own)
    from operant.envs.reference.vector import ReferenceVectorEnv

    own, env_kwargs = split_keywords(ReferenceVectorEnv, kwargs, options)
    env_kwargs = gymnasium_keywords(key, env_kwargs)
    return ReferenceVectorEnv(key, num_envs, copy=copy, env_kwargs=env_kwargs, **own)


def _make_torch_env(
    key: str, num_envs: int, device: Any, copy: bool, kwargs: dict[str, Any]
) -> Any:
    """Operant's torch env for `key`, which resolve_impl chose "torch" for: its entry names a
    torch env class."""
    from operant.envs.face.keywords import check_keywords

    entry = lookup(key)
    torch_class = cast("Callable[..., Any]", entry.torch)
    check_keywords(torch_class, kwargs, f"{key} (torch)")
    return torch_class(entry, num_envs, device=device, copy=copy, **kwargs)


def workers_refusal(env_id: str, impl: str, chosen: str, workers: int) -> str | None:
    """Why `workers` processes cannot step `env_id` as `impl` (resolved to `chosen`), in one
    line; None when they can. Workers step Gymnasium's Python envs (the reference impl)."""
    key = _key(env_id)
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        return f"env.workers must be a positive integer, got {workers!r}"
    if workers == 1 or (chosen == "reference" and key not in FAMILIES):
        return None
    if chosen == "reference":
        return (
            f"env.workers = {workers} steps Gymnasium's own envs in worker processes; {key}'s "
            "reference implementation steps in the trainer's process: set env.workers = 1"
        )
    what = f'env.impl = "{impl}"' + (f" (resolved to {chosen})" if impl != chosen else "")
    return (
        f'env.workers = {workers} is for Python envs (env.impl = "reference"); {key} '
        f"with {what} steps in the trainer's process: "
        f'set env.impl = "reference" or env.workers = 1'
    )


def _make_family(
    family: Family,
    impl: str,
    num_envs: int,
    copy: bool,
    options: dict[str, Any],
    kwargs: dict[str, Any],
) -> Any:
    """A registered family's env (implementation `impl`); its refusal of one of `options`
    (TypeError, ValueError) becomes an EnvError that names env.options."""
    make = family.maker(impl)
    if not options:
        return make(num_envs, copy=copy, **kwargs)
    try:
        return make(num_envs, copy=copy, **kwargs, **options)
    except (TypeError, ValueError) as error:
        if isinstance(error, EnvError):
            raise
        raise EnvError(f"env.options for {family.id}: {error}") from None


def gymnasium_vector_entry_point(
    num_envs: int = 1, *, env_id: str, impl: str = "auto", copy: bool = True, **kwargs
):
    """What `gymnasium.make_vec("operant/<id>", vectorization_mode="vector_entry_point")` calls.
    Every keyword reaches the env's constructor: `impl`, `copy`, `device`, `max_episode_steps`,
    `autoreset_mode` (AutoresetMode.SAME_STEP, the default, or NEXT_STEP, or their string
    values) and `render_mode` ("rgb_array", "human")."""
    return make_env(env_id, num_envs, impl=impl, copy=copy, **kwargs)


def check_action_batch(
    shape: tuple[int, ...],
    is_integer: bool,
    is_floating: bool,
    expected_shape: tuple[int, ...],
    space: spaces.Space,
    dtype: Any,
) -> None:
    """Refuse a batch of actions by its shape and dtype alone (no value is read).

    Discrete spaces take integers; Box spaces take floating point (cast to float32). `dtype`
    (numpy's or torch's) is named only in a refusal: `str()` of a numpy dtype takes about 6 us,
    which every Gymnasium `step()` paid when the callers formatted it beforehand (as much as
    a 1,024-env CartPole kernel step).
    """
    if tuple(shape) != tuple(expected_shape):
        raise InvalidActionError(
            f"actions must have shape {tuple(expected_shape)} (one per env), got {tuple(shape)}"
        )
    if isinstance(space, spaces.Discrete):
        if not is_integer:
            raise InvalidActionError(
                f"actions for {space} must be integers, got dtype {_dtype_name(dtype)}"
            )
    elif not is_floating:
        raise InvalidActionError(
            f"actions for {space} must be floating point, got dtype {_dtype_name(dtype)}"
        )


def _dtype_name(dtype: Any) -> str:
    """A numpy or torch dtype's name: int64, float32 (torch's without its "torch." prefix)."""
    return str(dtype).removeprefix("torch.")


def invalid_action_message(space: spaces.Space, env_index: int, action: Any) -> str:
    """The error for a refused action value: what it was, which env, and why."""
    if isinstance(space, spaces.Discrete):
        return f"action {action!r} for env {env_index} is outside the action space {space}"
    return (
        f"action {action!r} for env {env_index} is not finite (NaN or infinity); {space} "
        "takes finite values (out-of-range ones are clipped as in Gymnasium)"
    )

"""An env's keywords, sorted: those its implementation takes (a native or torch kernel's,
the reference env's own) and those that go to Gymnasium's env itself (`g` for Pendulum,
`sutton_barto_reward` for CartPole, or a user's env's), each checked against what takes it, so
that a keyword nothing takes is one line naming what does, before anything is built."""

from __future__ import annotations

import inspect
from typing import Any

import gymnasium
from gymnasium.envs.registration import load_env_creator

from operant.envs.registry import ENVS, EnvError, import_env_module


def check_keywords(factories: Any, kwargs: dict[str, Any], what: str) -> None:
    """A keyword none of `factories` takes (a class, or a class and the one its **keywords go
    to) is refused in one line listing those they do (rather than Python's TypeError naming
    the class)."""
    taken = dict.fromkeys(
        name
        for factory in (factories if isinstance(factories, tuple) else (factories,))
        for name, parameter in inspect.signature(factory).parameters.items()
        if name not in ("self", "entry", "num_envs", "copy", "device")
        and parameter.kind is not inspect.Parameter.VAR_KEYWORD
    )
    unknown = sorted(set(kwargs) - set(taken))
    if unknown:
        key = what.partition(" ")[0]
        hint = (
            '; Gymnasium\'s env takes its own keywords with impl="reference"' if key in ENVS else ""
        )
        raise EnvError(
            f"{what} has no option {unknown[0]!r}; its options: {', '.join(taken)}{hint}"
        )


def split_keywords(
    factory: Any, kwargs: dict[str, Any], options: dict[str, Any] | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """`kwargs` parted into the reference env's own (`factory`'s parameters, render_mode
    among them) and the keywords of Gymnasium's env, to which `options` (env.options) add."""
    if "env_kwargs" in kwargs:
        raise EnvError("env_kwargs: give the env's keywords as keywords (or as env.options)")
    params = inspect.signature(factory).parameters
    own = {name: value for name, value in kwargs.items() if name in params}
    env_kwargs = {name: value for name, value in kwargs.items() if name not in params}
    if "render_mode" in env_kwargs:  # only the one-process reference env renders
        raise EnvError("render_mode: env workers do not render; use env.workers = 1")
    return own, {**(options or {}), **env_kwargs}


def gymnasium_keywords(env_id: str, env_kwargs: dict[str, Any]) -> dict[str, Any]:
    """`env_kwargs`, once Gymnasium's env `env_id` is known to take each (its constructor's
    keywords; one that takes **kwargs takes any): one it does not is refused in one line
    naming those it does, before any env is built (a TypeError from inside gymnasium.make
    otherwise). An id Gymnasium does not know is left for the env's own refusal."""
    if not env_kwargs:
        return env_kwargs
    module, _, key = env_id.rpartition(":")
    if module:
        import_env_module(module)
    try:
        spec = gymnasium.spec(key.removeprefix("operant/"))
    except gymnasium.error.Error:
        return env_kwargs
    entry = spec.entry_point
    creator: Any = load_env_creator(entry) if isinstance(entry, str) else entry
    if creator is None:
        return env_kwargs
    try:
        params = inspect.signature(creator).parameters
    except (TypeError, ValueError):  # a builtin or C callable: nothing to read
        return env_kwargs
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return env_kwargs
    taken = [
        name
        for name, p in params.items()
        if name not in ("self", "render_mode")
        and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    ]
    unknown = sorted(set(env_kwargs) - set(taken))
    if unknown:
        raise EnvError(
            f"{spec.id} (Gymnasium's {getattr(creator, '__qualname__', creator)}) takes no "
            f"keyword {unknown[0]!r}; it takes: {', '.join(taken) or 'none'}"
        )
    return env_kwargs

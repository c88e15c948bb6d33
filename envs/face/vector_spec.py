"""The `spec` of a vector env from make_env: what `gymnasium.make_vec` gives its vector envs,
the id's registered EnvSpec with the vector env's own num_envs and episode limit, so that
`env.spec.id`, `env.spec.max_episode_steps` (and SB3's `get_attr("spec")`) read as they do
for Gymnasium's envs. None for an id Gymnasium has no spec for (a family registered only
with Operant)."""

from __future__ import annotations

import dataclasses
from typing import Any

import gymnasium
from gymnasium.envs.registration import EnvSpec


def vector_spec(key: str, env: Any, num_envs: int) -> EnvSpec | None:
    """The spec of `env`, made by make_env(key, num_envs) (`key` an id without `operant/`)."""
    for name in (key, f"operant/{key}"):
        try:
            spec = gymnasium.spec(name)
        except gymnasium.error.Error:
            continue
        limit = getattr(env, "max_episode_steps", spec.max_episode_steps)
        return dataclasses.replace(
            spec, max_episode_steps=limit, kwargs={**spec.kwargs, "num_envs": num_envs}
        )
    return None


def single_spec(spec: EnvSpec | None) -> EnvSpec | None:
    """The spec of one env of a vector env with `spec`: what `gymnasium.make` gives an env
    (its kwargs without the vector's num_envs)."""
    if spec is None:
        return None
    kwargs = {name: value for name, value in spec.kwargs.items() if name != "num_envs"}
    return dataclasses.replace(spec, kwargs=kwargs)

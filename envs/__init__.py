"""Operant's environments as a library: the env contract (`operant.envs.contract`), the
families that implement it, their registry, and their Gymnasium registration under `operant/`.

Importing this package registers every env with Gymnasium, so that
`gymnasium.make_vec("operant/CartPole-v1", num_envs=N, vectorization_mode="vector_entry_point")`
returns Operant's vector env (pass `impl=` to choose the implementation), and
`gymnasium.make("operant/<id>")` one env (Gymnasium's own class for the classic-control ids,
`operant.envs.minatar.env.MinAtarEnv` for MinAtar's games). It imports numpy and
Gymnasium, never torch: the torch family (`operant.envs.torch`) is imported when an env with
`impl="torch"` is made.
"""

import functools

import gymnasium

from operant.envs.contract import EpisodeStats
from operant.envs.grid.vector import make_grid
from operant.envs.minatar.vector import GAME_IDS as _MINATAR_IDS
from operant.envs.minatar.vector import maker as _minatar_maker
from operant.envs.registry import (
    ENVS,
    EnvEntry,
    EnvError,
    EnvFailedError,
    InvalidActionError,
    gymnasium_vector_entry_point,
    lookup,
    make_env,
    register_family,
    resolve_impl,
)

__all__ = [
    "ENVS",
    "EnvEntry",
    "EnvError",
    "EnvFailedError",
    "EpisodeStats",
    "InvalidActionError",
    "lookup",
    "make_env",
    "register_family",
    "resolve_impl",
]

register_family("Grid-v0", make_grid)
for _env_id in _MINATAR_IDS:
    register_family(_env_id, _minatar_maker(_env_id, "native"))
    register_family(_env_id, _minatar_maker(_env_id, "reference"), impl="reference")

for _env_id, _entry in ENVS.items():
    _full_id = f"operant/{_env_id}"
    if _full_id not in gymnasium.registry:
        # The single-env entry point is Gymnasium's own class (so make() and the sync/async
        # vector modes work too); the vector entry point is ours.
        gymnasium.register(
            id=_full_id,
            entry_point=gymnasium.spec(_env_id).entry_point,
            vector_entry_point=functools.partial(gymnasium_vector_entry_point, env_id=_env_id),
            max_episode_steps=_entry.max_episode_steps,
            reward_threshold=_entry.reward_threshold,
        )

if "operant/Grid-v0" not in gymnasium.registry:
    # Many agents per env: there is no single-env class, only the vector entry point
    # (`gymnasium.make_vec("operant/Grid-v0", num_envs=N, vectorization_mode="vector_entry_point",
    # agents=K, ...)`: N worlds, N x K rows).
    # `gymnasium.make` gets one line saying so instead of Gymnasium's "registered but
    # entry_point is not specified".
    gymnasium.register(
        id="operant/Grid-v0",
        entry_point="operant.envs.grid.vector:no_single_env",
        # through make_env, as the other ids: `impl=` and `frame_stack=` are taken here too
        vector_entry_point=functools.partial(gymnasium_vector_entry_point, env_id="Grid-v0"),
    )

for _env_id in _MINATAR_IDS:
    if f"operant/{_env_id}" not in gymnasium.registry:
        # MinAtar's games, `impl="native"` (default) or "reference" (the minatar package): the
        # vector entry point, and `gymnasium.make` a single env over a one-row vector env
        # (operant.envs.minatar.env). Not `MinAtar/...`: that namespace is the minatar
        # package's. `env_id` in the spec's kwargs reaches both entry points (make_vec passes
        # a spec's kwargs to a vector entry point too), with the same value.
        gymnasium.register(
            id=f"operant/{_env_id}",
            entry_point="operant.envs.minatar.env:MinAtarEnv",
            vector_entry_point=functools.partial(gymnasium_vector_entry_point, env_id=_env_id),
            kwargs={"env_id": _env_id},
        )

"""Gymnasium's own environments behind the same buffer interface as the native kernels.

Any installed Gymnasium env id trains this way (`env.impl = "reference"`). It is the slow
path and the parity oracle: the episode statistics that kernels reduce in C are reduced here
with numpy, once per step. Its Box observations become rows as operant.envs.reference.obs_rows says
(images channels first in their own dtype, the rest flattened to float32).

Its Gymnasium face is Gymnasium's own: `autoreset_mode` (SAME_STEP by default, or NEXT_STEP)
is handed to the SyncVectorEnv inside, whose sub-envs' Python state cannot be held back for a
step as the kernels' arrays are (operant.envs.face.autoreset); the buffers, `step_bound()` and the
episode statistics then follow that mode (statistics count no reset step). `reset(seed=...)`
takes an int (env i gets seed + i, Gymnasium's rule) or a list of per-env seeds (env i gets
seed[i], so it plays as env 0 of `reset(seed=seed[i])`), checked as every family checks them
(operant.envs.face.seeding); `render_mode` is Gymnasium's too. `step_timeout_s` interrupts a step
that takes longer (operant.envs.reference.step_deadline; the env's failure, EnvFailedError).
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from operant.envs.contract import FLAT_BOX_HINT, ActSpec, RowLayout
from operant.envs.face.autoreset import autoreset_mode as parse_autoreset_mode
from operant.envs.face.autoreset import with_autoreset_mode
from operant.envs.face.episodes import AccountedPythonEnv, EpisodeAccounting
from operant.envs.face.render import check_render_mode, init_headless_display
from operant.envs.face.seeding import check_seed, seed_np_random
from operant.envs.native.vector import NumpyFace, allocate_buffers, load_actions, step_outputs
from operant.envs.reference.obs_rows import obs_rows
from operant.envs.reference.step_deadline import EnvStepHung, check_step_timeout, env_step
from operant.envs.registry import EnvError, EnvFailedError

RECENT_CAPACITY = 1024


class ReferenceVectorEnv(AccountedPythonEnv, NumpyFace):
    """Gymnasium's SyncVectorEnv, in SAME_STEP autoreset mode unless told otherwise (Gymnasium's
    own vectorised classes, such as CartPoleVectorEnv, only autoreset NEXT_STEP), exposing
    `actions`/`obs`/... buffers and `step_bound()`."""

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}
    impl = "reference"
    resumable = False  # Gymnasium's envs keep arbitrary Python state: a resume re-seeds them

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        copy: bool = True,
        max_episode_steps: int | None = None,
        autoreset_mode: AutoresetMode | str = AutoresetMode.SAME_STEP,
        render_mode: str | None = None,
        step_timeout_s: float | None = None,
        env_kwargs: dict[str, Any] | None = None,
    ):
        """`env_kwargs`: keywords of Gymnasium's env (`g=9.81` for Pendulum), passed to
        gymnasium.make_vec (operant.envs.registry checks them against the env first)."""
        self.step_timeout_s = check_step_timeout(step_timeout_s)
        try:
            spec = gymnasium.spec(env_id)
        except gymnasium.error.Error as error:
            raise EnvError(f'unknown env id {env_id!r} for env.impl "reference": {error}') from None
        self.autoreset_mode = parse_autoreset_mode(autoreset_mode)
        check_render_mode(render_mode)
        kwargs: dict[str, Any] = dict(env_kwargs or {})
        if max_episode_steps is not None:
            kwargs["max_episode_steps"] = max_episode_steps
        if render_mode is not None:
            kwargs["render_mode"] = render_mode
        self.env_id = env_id
        self.inner = self._make_inner(spec.id, num_envs, kwargs)
        self.render_mode = render_mode
        if render_mode == "rgb_array":
            init_headless_display()
        self.metadata = with_autoreset_mode(
            {
                **type(self).metadata,
                **{
                    key: value
                    for key, value in self.inner.metadata.items()
                    if key.startswith("render")
                },
            },
            self.autoreset_mode,
        )
        self.num_envs = num_envs
        self.copy = copy
        self._take_spaces(env_id, num_envs)
        self.layout = RowLayout(num_envs)
        self.episodes = EpisodeAccounting(self.layout, RECENT_CAPACITY)
        self._resetting = np.zeros(num_envs, dtype=np.bool_)
        """NEXT_STEP: the envs whose next step is a reset (not part of any episode)."""

    def _make_inner(self, spec_id: str, num_envs: int, kwargs: dict[str, Any]) -> Any:
        """Gymnasium's sync vector env of `num_envs` envs, in this env's autoreset mode. A
        missing package or a refused option is raised as it is; anything else the env raises,
        or a stop while it is built, is EnvFailedError."""
        try:
            with env_step(None, "construction"):  # only a stop's grace: no step timeout
                return gymnasium.make_vec(
                    spec_id,
                    num_envs=num_envs,
                    vectorization_mode="sync",
                    vector_kwargs={"autoreset_mode": self.autoreset_mode},
                    **kwargs,
                )
        except (gymnasium.error.DependencyNotInstalled, ImportError, EnvError):
            raise  # a missing package (preflight names it) or a refused option: not a failure
        except Exception as error:
            raise self._failed("built", error) from error
        except EnvStepHung as hung:
            raise EnvFailedError(f"the env {self.env_id} was {hung}") from hung

    def _take_spaces(self, env_id: str, num_envs: int) -> None:
        """The batch's spaces and specs from the inner env's, and the buffers they size; an
        EnvError for observations that are not a Box or actions no policy here acts in."""
        self.single_action_space = self.inner.single_action_space
        self.action_space = self.inner.action_space
        declared = self.inner.single_observation_space
        if not isinstance(declared, spaces.Box):
            raise EnvError(f"{env_id} has {declared} observations; {FLAT_BOX_HINT}")
        self.obs_rows = obs_rows(declared, self.single_action_space)
        self.obs_spec = self.obs_rows.spec
        self.single_observation_space = self.obs_rows.space
        self.observation_space = batch_space(self.obs_rows.space, num_envs)
        allocate_buffers(self, num_envs, self.obs_spec)
        try:
            self.act_spec = ActSpec.from_space(self.single_action_space)
        except TypeError as error:  # a space no policy here acts in: one line, not a traceback
            raise EnvError(f"{env_id}: {error}") from None

    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ):
        seed = check_seed(seed, self.num_envs)
        seed_np_random(self, seed)
        try:
            with env_step(self.step_timeout_s, "reset"):
                obs, info = self.inner.reset(seed=seed, options=options)
        except Exception as error:
            raise self._failed("reset", error) from error
        except EnvStepHung as hung:
            raise EnvFailedError(f"the env {self.env_id} was {hung}") from hung
        self._resetting[:] = False
        self.obs[:] = self.obs_rows.rows(obs, self.num_envs)
        self.episodes.reset_episodes()
        return (self.obs.copy() if self.copy else self.obs), info

    def step(self, actions):
        load_actions(self, actions)
        info = self._step()
        return step_outputs(self, info)

    def step_bound(self) -> None:
        self._step()

    def _step(self) -> dict[str, Any]:
        actions = (
            self.actions
            if not self.discrete
            else self.actions.astype(self.single_action_space.dtype)
        )
        try:
            with env_step(self.step_timeout_s):
                obs, rewards, terminated, truncated, info = self.inner.step(actions)
        except Exception as error:
            raise self._failed("stepped", error) from error
        except EnvStepHung as hung:
            raise EnvFailedError(f"the env {self.env_id} was {hung}") from hung
        self.obs[:] = self.obs_rows.rows(obs, self.num_envs)
        self.rewards[:] = rewards
        self.terminated[:] = terminated
        self.truncated[:] = truncated
        self.episodes.record(rewards, terminated, truncated, counted=~self._resetting)
        done = terminated | truncated
        if self.autoreset_mode == AutoresetMode.NEXT_STEP:
            self._resetting[:] = done
            self.final_obs[done] = self.obs[done]
        elif done.any():
            mask = info.get("_final_obs", done)
            final = info.get("final_obs")
            for i in np.flatnonzero(mask):
                self.final_obs[i] = self.obs_rows.row(final[i])
                # the info's too, as step() returns its observations (in the row's layout)
                final[i] = self.final_obs[i].copy()
        return info

    def _failed(self, doing: str, error: Exception) -> EnvFailedError:
        """What the user's env raised, as the env's failure (not operant's), naming the env;
        raised `from` its exception."""
        return EnvFailedError(
            f"the env {self.env_id} raised while it was {doing}: {type(error).__name__}: {error}"
        )

    # A list, as operant.envs.face.render's (VectorEnv's annotation says a tuple)
    def render(self) -> list[Any] | None:  # type: ignore[override]
        """Gymnasium's frames, one per env ("rgb_array"); None in "human" mode."""
        frames = self.inner.render()
        return None if frames is None else list(frames)

    def close_extras(self, **kwargs) -> None:
        self.inner.close()

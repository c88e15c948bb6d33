"""MinAtar's games (Young & Tian 2019) as an env family: `operant/MinAtar-<Game>-v1`.

Two implementations of operant.envs.contract.BatchEnv, each a Gymnasium `VectorEnv` in SAME_STEP
autoreset mode (or NEXT_STEP: `autoreset_mode=AutoresetMode.NEXT_STEP`,
operant.envs.face.autoreset's
face over the kernel, the reference env's own loop):

- `native`: `MinAtarVectorEnv`, the C kernel operant.cext.minatar (MinAtar's rules statement by
  statement, checked against the `minatar` package by operant.envs.minatar.parity);
- `reference`: `ReferenceMinAtarEnv` (operant.envs.minatar.reference), the `minatar` package
  itself (one `minatar.Environment` per env, stepped in a Python loop), the oracle; it needs
  the optional extra (`pip install "operant-rl[minatar]"`).

Observations are uint8 (C, 10, 10), channels first, 0 or 1: MinAtar's (10, 10, C) bool state
transposed, so a torch conv reads the buffer as it is (`torch.from_numpy(env.obs)` is NCHW,
no permute copy), and uint8 rather than bool because torch converts uint8 to float in one
kernel while a bool tensor needs a cast through another dtype on some paths; the bytes are the
same. Actions index the game's minimal action set (MinAtar's `-v1` Gymnasium ids do the same;
`full_action_set=True` gives all six). Options (`env.options` in a config, keywords here):
`sticky_action_prob` (MinAtar's default 0.1), `difficulty_ramping` (default True),
`max_episode_steps` (default none: MinAtar's games have no time limit; Freeway ends itself
after 2,500 frames), `full_action_set`. docs/envs.md ("MinAtar") has the games and channels.
`render_mode="rgb_array"`: `render()` returns one uint8 (10, 10, 3) frame per env, the
observation the last `reset`/`step` returned drawn as MinAtar's display draws it
(operant.envs.minatar.env.rgb_frame).
"""

from __future__ import annotations

import secrets
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from operant.envs.contract import (
    ActSpec,
    EpisodeStats,
    NotCopyable,
    ObsSpec,
    RowLayout,
    clear_stats,
    refuse_reset_options,
    restore_state,
)
from operant.envs.face.autoreset import (
    HELD_LENGTH,
    Held,
    NextStepFace,
    next_step_state,
    step_next_step_face,
    with_autoreset_mode,
)
from operant.envs.face.autoreset import autoreset_mode as parse_autoreset_mode
from operant.envs.face.seeding import check_seed, per_env_streams, seed_np_random
from operant.envs.minatar.options import (
    MA_LAST_ACTION,
    OPTIONS,
    RENDERING,
    Settings,
    check_options,
    check_render_scale,
)
from operant.envs.native.fresh import FreshArrays
from operant.envs.native.slots import SlotBinding
from operant.envs.native.vector import (
    NumpyFace,
    allocate_buffers,
    load_actions,
    recent_from_ring,
    step_outputs,
)
from operant.envs.registry import EnvError, InvalidActionError, invalid_action_message

GAME_IDS = {
    "MinAtar-Asterix-v1": "asterix",
    "MinAtar-Breakout-v1": "breakout",
    "MinAtar-Freeway-v1": "freeway",
    "MinAtar-Seaquest-v1": "seaquest",
    "MinAtar-SpaceInvaders-v1": "space_invaders",
}
"""Operant's ids (registered as `operant/<id>`) -> the game's name in operant.cext.minatar and
in the minatar package (`minatar.environments.<name>`). The `minatar` package registers its
own as `MinAtar/<Game>-v0` (full action set) and `MinAtar/<Game>-v1` (minimal): another
namespace, so the two never collide."""

RECENT_CAPACITY = 1024


def _layout(game: str) -> dict[str, Any]:
    from operant.cext.minatar import GAMES

    return GAMES[game]


class _MinAtarFace(NumpyFace):
    """What both implementations declare: spaces, specs, buffers."""

    metadata = {
        "autoreset_mode": AutoresetMode.SAME_STEP,
        "render_modes": ["rgb_array"],
        "render_fps": 30,
    }

    def _declare(self, game: str, num_envs: int, copy: bool, settings: Settings) -> int:
        """Check `settings` and declare what they make; returns the checked time limit."""
        limit = check_options(
            num_envs,
            settings.sticky_action_prob,
            settings.max_episode_steps,
            difficulty_ramping=settings.difficulty_ramping,
            full_action_set=settings.full_action_set,
        )
        num_envs = int(num_envs)
        full_action_set, render_mode = settings.full_action_set, settings.render_mode
        max_episode_steps = settings.max_episode_steps
        self.autoreset_mode = parse_autoreset_mode(settings.autoreset_mode)
        self.metadata = with_autoreset_mode(type(self).metadata, self.autoreset_mode)
        if render_mode not in (None, "rgb_array"):
            raise EnvError(
                f"render_mode {render_mode!r}: MinAtar's games draw 'rgb_array' frames (or None)"
            )
        self.render_mode = render_mode
        self.render_scale = check_render_scale(settings.render_scale)
        """Pixels a side per grid square of `render()`'s frames (10 s x 10 s: a video of
        10 x 10 pixels is too small to watch)."""
        self.time_limit = max_episode_steps
        """The truncation horizon asked for; None: none (MinAtar's games have no time limit)."""
        layout = _layout(game)
        self.game = game
        self.channels: tuple[str, ...] = layout["channels"]
        self.action_set: tuple[int, ...] = (
            tuple(range(6)) if full_action_set else layout["minimal_actions"]
        )
        shape = (len(self.channels), 10, 10)
        self.num_envs = num_envs
        self.copy = copy
        self.spec = None
        self.single_observation_space = spaces.Box(0, 1, shape, np.uint8)
        self.single_action_space = spaces.Discrete(len(self.action_set))
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.obs_spec = ObsSpec(shape, np.dtype(np.uint8))
        self.act_spec = ActSpec((), np.dtype(np.int64), len(self.action_set))
        self.layout = RowLayout(num_envs)
        allocate_buffers(self, num_envs, self.obs_spec)
        self._shown: np.ndarray = self.obs
        return limit

    def _showing(self, result: tuple[Any, ...]) -> tuple[Any, ...]:
        """A reset's or step's result, its observations kept for `render()` when it draws
        (kept otherwise, a copy=True step's array would count as held:
        operant.envs.native.fresh)."""
        if self.render_mode is not None:
            self._shown = result[0]
        return result

    def _rendered_step(self, acted: Any, terminal: Any, shown_obs: Any) -> None:
        """NEXT_STEP's face calls this after a step (operant.envs.face.render's hook); a MinAtar
        frame is the observation the step returns, which `_showing` keeps."""

    # A list, as operant.envs.face.render's (VectorEnv's annotation says a tuple)
    def render(self) -> list[np.ndarray] | None:  # type: ignore[override]
        if self.render_mode is None:
            return None
        from operant.envs.minatar.env import rgb_frame

        return [rgb_frame(frame, self.render_scale) for frame in self._shown]

    def _load_actions(self, actions: Any) -> None:
        load_actions(self, actions)

    def step(self, actions: Any) -> tuple[Any, ...]:
        self._load_actions(actions)
        self.step_bound()
        info: dict[str, Any] = {}
        done = self.terminated | self.truncated
        if done.any():
            info["final_obs"] = self.final_obs.copy() if self.copy else self.final_obs
            info["_final_obs"] = done
            info["final_info"], info["_final_info"] = {}, done
        return self._showing(step_outputs(self, info))

    def step_bound(self) -> None:
        raise NotImplementedError


class MinAtarVectorEnv(NotCopyable, SlotBinding, _MinAtarFace):
    """`num_envs` envs of one MinAtar game stepped by operant.cext.minatar's kernel."""

    keeps_obs_rows = True
    """minatar.h's steps write the observation rows by difference (they read the previous
    step's row), so the kernel's own observation buffer stays put: the rollout copies
    MinAtar's observations and a frame stack copies them into its ring (SlotBinding); the
    rewards, flags and final observations are still bound to the storage rows."""

    impl = "native"
    resumable = True

    def __init__(self, game: str, num_envs: int, copy: bool = True, **settings: Any):
        """`settings`: Settings' keywords (MinAtar's options, autoreset and rendering)."""
        from operant.cext.minatar import MinAtarKernel

        options = Settings(**settings)
        limit = self._declare(game, num_envs, copy, options)  # checks num_envs first
        num_envs = self.num_envs
        self.kernel = MinAtarKernel(
            game,
            num_envs,
            self.actions,
            self.obs,
            self.rewards,
            self.terminated,
            self.truncated,
            self.final_obs,
            sticky_action_prob=float(options.sticky_action_prob),
            difficulty_ramping=bool(options.difficulty_ramping),
            action_set=self.action_set,
            max_episode_steps=limit,
        )
        self.kernels = (self.kernel,)
        # copy=True's outputs (_step_copied); final observations only in the rows of envs that
        # ended, so a new array starts as zeros
        self._fresh_obs = FreshArrays(self.obs.shape, np.uint8)
        self._fresh_final = FreshArrays(self.obs.shape, np.uint8, zeroed=True)
        self._seeded = False
        self.sticky_action_prob = float(options.sticky_action_prob)
        self.difficulty_ramping = bool(options.difficulty_ramping)
        kernel, n = self.kernel, num_envs
        self._next_step = (
            NextStepFace(
                self,
                [
                    Held(kernel.scalars, 1, 0, n),
                    Held(kernel.maps, 1, 0, n),
                    Held(kernel.slots, 1, 0, n),
                    Held(kernel.rng_state, 0, 0, n),
                    Held(kernel.episode_return, 0, 0, n),
                    Held(kernel.episode_length, 0, 0, n, HELD_LENGTH),
                ],
            )
            if self.autoreset_mode == AutoresetMode.NEXT_STEP
            else None
        )

    def bind_packed(self, ring: np.ndarray | None) -> None:
        """A frame stack's ring of packed frames (operant.envs.face.frame_stack): each step also
        writes its observation rows as bits into the slot the stack aims the kernel at
        (`kernel.packed_target()`), while the rows are still in cache. None unbinds it."""
        self.kernel.bind_packed(ring)

    def shadow_check(self, steps: int) -> dict[str, Any]:
        """`operant bench env_only --validate`: a kernel like this one (same game, sticky
        actions, ramping and number of envs), checked at every one of `steps` steps against
        the minatar package (operant.envs.minatar.parity.check_game). Needs the extra."""
        from operant.envs.minatar.parity import check_game
        from operant.envs.minatar.reference import minatar_environment_class

        minatar_environment_class()

        report = check_game(
            self.game,
            self.num_envs,
            steps,
            sticky_action_prob=self.sticky_action_prob,
            difficulty_ramping=self.difficulty_ramping,
        )
        ok = report.mismatches == 0
        verdict = "matches MinAtar" if ok else f"MISMATCH: {report.first[0]}"
        return {
            "impl": "minatar",
            "ok": ok,
            "compared": report.states,
            "drew": report.drawing,
            "episodes_ended": report.terminal,
            "mismatches": report.mismatches,
            "first": report.first,
            "summary": f"{report.states:,} env-steps against the minatar package "
            f"({report.drawing:,} drew, {report.terminal:,} episodes ended): {verdict}",
            "disagreement": f"the {self.game} kernel disagrees with the minatar package",
        }

    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ):
        """Reset every env: an int seed re-seeds env i's stream from (seed, i), a list env i's
        from (seed[i], 0) (operant.envs.face.seeding); no seed on the first reset draws one from the
        OS, later resets without one continue the streams."""
        refuse_reset_options(options, "a MinAtar game")
        seed = check_seed(seed, self.num_envs)
        seed_np_random(self, seed)
        # A seeded env starts as a new one does, its sticky "previous action" 0 (noop) too:
        # MinAtar keeps it across episodes, and did across a re-seed, so `reset(seed=s)`
        # played differently after some play (Breakout: 4 seeds in 20).
        if isinstance(seed, int):
            self.kernel.scalars[MA_LAST_ACTION] = 0
        if isinstance(seed, list):
            streams = per_env_streams(seed, None if self._seeded else secrets.randbits(64))
            for row, stream in enumerate(streams):
                if stream is not None:
                    self.kernel.rng_state[row] = stream
                    self.kernel.scalars[MA_LAST_ACTION, row] = 0
            seed = None
        elif seed is None and not self._seeded:
            seed = secrets.randbits(64)
        self.kernel.reset(seed)
        self._seeded = True
        obs = self.obs if self._next_step is None else self._next_step.reset()
        return self._showing(((obs.copy() if self.copy else obs), {}))

    def step(self, actions: Any) -> tuple[Any, ...]:
        if self._next_step is not None:
            self._load_actions(actions)
            return self._showing(step_next_step_face(self))
        if self.copy:
            return self._showing(self._step_copied(actions))
        return super().step(actions)

    def _step_copied(self, actions: Any) -> tuple[Any, ...]:
        """copy=True's SAME_STEP step: after stepping, the kernel copies the observation rows
        (one memcpy), and the terminal rows of the envs that ended, into arrays nothing else
        holds (operant.envs.native.fresh); a copy of the whole final_obs buffer would be a second
        frame copy on most steps at N = 1,024."""
        self._load_actions(actions)
        obs, final_obs = self._fresh_obs.take(), self._fresh_final.take()
        episodes = self.kernel.recent_head  # every episode the kernel ends counts here
        ended_before = episodes[0]
        self._refuse(self.kernel.step_copy(obs, final_obs))
        terminated, truncated = self.terminated.copy(), self.truncated.copy()
        info: dict[str, Any] = {}
        if episodes[0] != ended_before:  # no reduction over the flags to learn it (2 us)
            done = terminated | truncated
            info["final_obs"], info["_final_obs"] = final_obs, done
            info["final_info"], info["_final_info"] = {}, done
        return obs, self.rewards.copy(), terminated, truncated, info

    def step_bound(self) -> None:
        """Step with the actions already in `self.actions`; outputs land in the buffers."""
        self._refuse(self.kernel.step())

    def _refuse(self, bad: int) -> None:
        """InvalidActionError for env `bad`'s action (a kernel's step returned it, having moved
        no env); nothing for -1."""
        if bad >= 0:
            raise InvalidActionError(
                invalid_action_message(self.single_action_space, bad, int(self._action_rows()[bad]))
            )

    def _kernel_rows(self) -> tuple[tuple[int, int], ...]:
        return ((0, self.num_envs),)

    def drain_episode_stats(self) -> EpisodeStats:
        stats = self.kernel.stats
        result = EpisodeStats.from_record(stats)
        clear_stats(stats)
        return result

    def recent_returns(self, count: int) -> np.ndarray:
        return recent_from_ring(self.kernel.recent_returns, int(self.kernel.recent_head[0]), count)

    def state_dict(self) -> dict[str, Any]:
        """The kernel's state arrays (`kernel.<name>`, `stats` as its 8 float64 words) and the
        observation buffer."""
        from operant.cext.minatar import STATE

        state = {f"kernel.{name}": getattr(self.kernel, name) for name in STATE}
        state["kernel.stats"] = state["kernel.stats"].view(np.float64)
        state["obs"] = self.obs
        return {**state, **next_step_state(self._next_step)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        restore_state(state, self.state_dict())
        self._seeded = True

    def close_extras(self, **kwargs: Any) -> None:
        pass


def maker(env_id: str, impl: str) -> Any:
    """The factory `register_family` gets for `env_id`'s implementation `impl`."""
    from operant.envs.minatar.reference import ReferenceMinAtarEnv

    game = GAME_IDS[env_id]
    cls = MinAtarVectorEnv if impl == "native" else ReferenceMinAtarEnv

    def make(num_envs: int, copy: bool = True, **kwargs: Any) -> Any:
        device = kwargs.pop("device", None)
        if device is not None and str(device) != "cpu":
            raise EnvError(f"device={device!r}: {env_id} runs on the CPU (its {impl} impl)")
        unknown = sorted(set(kwargs) - set(OPTIONS) - {"autoreset_mode", *RENDERING})
        if unknown:
            raise EnvError(f"{env_id} has no option {unknown[0]!r}; options: {', '.join(OPTIONS)}")
        return cls(game, num_envs, copy=copy, **kwargs)

    make.__doc__ = f"`make_env({env_id!r}, N, impl={impl!r})`: {cls.__name__}({game!r}, N)."
    return make

"""What every torch env shares (`env.impl = "torch"`): `TorchVectorEnv`, an implementation of
operant.envs.contract.BatchEnv as batched torch tensor ops on any device.

The same dynamics as the native kernels and Gymnasium, written over a batch of N envs so that on
a GPU the observations, rewards and flags never leave the device. Each env (one module of
operant.envs.torch per env) subclasses `TorchVectorEnv` and adds three pieces:
`_initial_state` (from uniform draws), `_observe`, and `_dynamics` (one step of every env).

Contract, the same as the native kernels':
- State is float64 on the device, shaped (state_dim, N); observations are float32 (N, obs_dim).
- Per-env randomness is SplitMix64 evaluated in int64 tensor ops (wrapping arithmetic, logical
  shifts emulated with masks), seeded from (seed, env index) exactly as kernel_common.h does:
  with the same seed the torch and native envs start, and restart, from bit-identical states.
- Autoreset is Gymnasium's SAME_STEP mode, done with `torch.where`: an env that ends shows the
  ending's reward and flags, and its terminal observation in `final_obs`, while `obs` already
  holds its next episode's first observation. `final_obs` rows of envs that did not end hold
  their current observation.
- Episode returns and lengths are reduced on the device into `stats` (float64 (8,): the words
  of one EPISODE_STATS_DTYPE record, addressed by field name) and a ring of recent episodes;
  the trainer reads them once per update (`drain_episode_stats()`, `recent_returns(k)`),
  which is where the host syncs are.
- `step_bound()` and `step()` never synchronise with the device: no `.item()`, no Python
  branch on a tensor's value, no per-env Python, no boolean-mask indexing.

Actions: `self.actions` is int64 (N,) for discrete spaces, float32 (N, act_dim) for Box spaces.
Invalid values (outside a Discrete space; NaN or infinite in a Box space, where out-of-range
values are clipped by the env as in Gymnasium) raise InvalidActionError naming the env and the
value. Checking a value needs the host, so `action_checks` chooses when: "every_step" refuses the
step before anything moves (the default on the CPU, where reading a tensor costs nothing);
"deferred" (the default on accelerators) records the first invalid action on the device, steps
with it replaced by a valid one (clamped, or 0.0 for a non-finite value), and raises at the next
`check_actions()`, `drain_episode_stats()`, `recent_returns()` or `reset()`.

Gymnasium's vector API (`reset`, `step`) takes actions as tensors on any device, numpy arrays or
lists, and returns torch tensors on the env's device: clones with `copy=True` (the default, as
in Gymnasium), the live buffers with `copy=False`. `info` always holds "final_obs" and its mask
"_final_obs", and "final_info" ({}) with "_final_info" (whether any env ended is a tensor value,
so it is not tested on the host).
`autoreset_mode=AutoresetMode.NEXT_STEP` makes `step()` Gymnasium's NEXT_STEP mode
(operant.envs.face.autoreset; `info` is then empty), `reset(seed=[...])` takes per-env seeds
(operant.envs.face.seeding), and `render_mode` draws with Gymnasium's renderer
(operant.envs.face.render).

Where float results can differ from Gymnasium in the last bit: torch's sin/cos (SLEEF on CPU,
CUDA's libdevice) are within 1 ulp of libm rather than equal to it, and `x ** 2` is x * x rather
than libm's pow. Observations still agree to float32 precision, except in the chaotic Acrobot,
whose trajectories separate after a few dozen steps from any 1-ulp difference (so do Gymnasium's
own under a different libm); the parity tests check it one step at a time from Gymnasium's
state. The MountainCarContinuous mix of float32 and float64 arithmetic is reproduced exactly (see
cext/envs/classic/mountain_car_continuous.pyx).
"""

from __future__ import annotations

import math
import secrets
from typing import Any, cast

import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from operant.envs.contract import (
    EPISODE_STATS_DTYPE,
    ActSpec,
    EpisodeStats,
    ObsSpec,
    RowLayout,
    cleared_stats,
    positive_count,
    refuse_reset_options,
    restore_state,
    time_limit,
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
from operant.envs.face.render import RenderFace
from operant.envs.face.seeding import (
    INDEX_STRIDE,
    check_seed,
    per_env_streams,
    seed_np_random,
    stream_base,
)
from operant.envs.registry import (
    EnvEntry,
    EnvError,
    InvalidActionError,
    check_action_batch,
    invalid_action_message,
)

RECENT_CAPACITY = 1024
ACTION_CHECKS = ("auto", "every_step", "deferred")

_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB


def _i64(value: int) -> int:
    """The int64 with the same 64 bits as unsigned `value` (torch's int64 arithmetic wraps)."""
    value &= _MASK64
    return value - (1 << 64) if value >= 1 << 63 else value


def _shift_right(z: torch.Tensor, shift: int) -> torch.Tensor:
    """Logical (unsigned) right shift of int64 bits; torch's >> is arithmetic."""
    return (z >> shift) & ((1 << (64 - shift)) - 1)


def _mix(z: torch.Tensor) -> torch.Tensor:
    """SplitMix64's output function on int64 bits (kernel_common.h, op_rng_next)."""
    z = (z ^ _shift_right(z, 30)) * _i64(_MIX1)
    z = (z ^ _shift_right(z, 27)) * _i64(_MIX2)
    return z ^ _shift_right(z, 31)


def usable_device(device: torch.device | str | None) -> torch.device:
    """`device` (default the CPU) once torch can put a tensor on it; EnvError in one line
    otherwise (torch's own is an AssertionError on a CPU-only build)."""
    if device is None:
        return torch.device("cpu")
    try:
        chosen = torch.device(device)
        torch.empty(1, device=chosen)
    except (RuntimeError, AssertionError) as error:
        text = str(error).strip().splitlines()
        raise EnvError(
            f"device={str(device)!r} is not usable here ({text[0] if text else 'no such device'}"
            '); use device="cpu", or install a torch built for that device'
        ) from None
    return chosen


def seed_streams(seed: int, num_envs: int, device: torch.device) -> torch.Tensor:
    """Every env's SplitMix64 state for `seed`, bit for bit kernel_common.h's op_rng_seed."""
    index = torch.arange(num_envs, dtype=torch.int64, device=device)
    return _mix(index * _i64(INDEX_STRIDE) + _i64(stream_base(seed)))


# Where each statistic lives in `stats`, by field name. The reduction updates the return and
# length fields as one (quantity, reduction) block: that needs them adjacent, in this order.
_NAMES = cast("tuple[str, ...]", EPISODE_STATS_DTYPE.names)  # a structured dtype: names are set
_FIELD = {name: index for index, name in enumerate(_NAMES)}
_EPISODES = _FIELD["episodes"]
_QUANTITIES, _REDUCTIONS = ("return", "length"), ("sum", "min", "max")
_BLOCK = [
    _FIELD[f"{quantity}_{reduction}"] for quantity in _QUANTITIES for reduction in _REDUCTIONS
]
if list(range(_BLOCK[0], _BLOCK[0] + len(_BLOCK))) != _BLOCK:
    raise ImportError("EPISODE_STATS_DTYPE's return and length fields are not one block")
_QUANTITY_BLOCK = slice(_BLOCK[0], _BLOCK[0] + len(_BLOCK))
_SUM, _MIN, _MAX = (_REDUCTIONS.index(name) for name in ("sum", "min", "max"))

# The tensors that make up a torch env's state (its checkpoint), under these names.
STATE_TENSORS = (
    "state",
    "rng_state",
    "episode_return",
    "episode_length",
    "stats",
    "_ring_returns",
    "_ring_lengths",
    "_ring_head",
    "_invalid_env",
    "_invalid_value",
    "obs",
)


class TorchVectorEnv(RenderFace, VectorEnv):
    """N copies of one environment as tensor ops on `device`; subclasses give the dynamics."""

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}
    impl = "torch"
    resumable = True
    actions: torch.Tensor
    """int64 (N,) for a Discrete space, float32 (N, act_dim) for a Box (RenderFace declares
    it as Any: a numpy family's is an array)."""
    state_dim: int
    reset_bounds: tuple[tuple[float, float], ...]
    """(low, high) of each uniform draw a reset makes, in the native kernel's order."""

    def __init__(
        self,
        entry: EnvEntry,
        num_envs: int,
        device: torch.device | str | None = None,
        copy: bool = True,
        max_episode_steps: int | None = None,
        action_checks: str = "auto",
        autoreset_mode: AutoresetMode | str = AutoresetMode.SAME_STEP,
        render_mode: str | None = None,
    ):
        num_envs = positive_count("num_envs", num_envs)
        if action_checks not in ACTION_CHECKS:
            raise ValueError(f"action_checks must be one of {ACTION_CHECKS}, got {action_checks!r}")
        self.entry = entry
        self.num_envs = num_envs
        self.copy = copy
        self.device = usable_device(device)
        if action_checks == "auto":
            action_checks = "every_step" if self.device.type == "cpu" else "deferred"
        self.action_checks = action_checks
        self.single_observation_space, self.single_action_space = entry.spaces()
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.obs_spec = ObsSpec.from_space(self.single_observation_space)
        self.act_spec = ActSpec.from_space(self.single_action_space)
        self.layout = RowLayout(num_envs)
        self.spec = None
        self.max_episode_steps = time_limit(max_episode_steps, entry.max_episode_steps)
        self.discrete = isinstance(self.single_action_space, spaces.Discrete)
        options = {"device": self.device}
        self._allocate_buffers(num_envs, options)
        self._init_reset_constants(options)
        self._seeded = False
        self.autoreset_mode = parse_autoreset_mode(autoreset_mode)
        self.metadata = with_autoreset_mode(type(self).metadata, self.autoreset_mode)
        self._next_step = (
            None
            if self.autoreset_mode == AutoresetMode.SAME_STEP
            else NextStepFace(
                self,
                [
                    Held(self.state, 1, 0, num_envs),
                    Held(self.rng_state, 0, 0, num_envs),
                    Held(self.episode_return, 0, 0, num_envs),
                    Held(self.episode_length, 0, 0, num_envs, HELD_LENGTH),
                ],
            )
        )
        self._init_render(entry.id, render_mode)

    def _allocate_buffers(self, num_envs: int, options: dict[str, Any]) -> None:
        """Allocate the batch buffers: actions, step outputs, state, episode and stats rings."""
        obs_dim = self.obs_spec.shape[0]
        if self.discrete:
            self.actions = torch.zeros(num_envs, dtype=torch.int64, **options)
        else:
            self.actions = torch.zeros(
                (num_envs, *self.act_spec.shape), dtype=torch.float32, **options
            )
        self.obs = torch.zeros((num_envs, obs_dim), dtype=torch.float32, **options)
        self.rewards = torch.zeros(num_envs, dtype=torch.float32, **options)
        self.terminated = torch.zeros(num_envs, dtype=torch.bool, **options)
        self.truncated = torch.zeros(num_envs, dtype=torch.bool, **options)
        self.final_obs = torch.zeros((num_envs, obs_dim), dtype=torch.float32, **options)
        self.state = torch.zeros((self.state_dim, num_envs), dtype=torch.float64, **options)
        self.rng_state = torch.zeros(num_envs, dtype=torch.int64, **options)
        self.episode_return = torch.zeros(num_envs, dtype=torch.float64, **options)
        self.episode_length = torch.zeros(num_envs, dtype=torch.int64, **options)
        self.stats = torch.zeros(len(_FIELD), dtype=torch.float64, **options)
        self._clear_stats()
        # One spare slot past the ring takes the writes of envs that did not end this step.
        self._ring_returns = torch.zeros(RECENT_CAPACITY + 1, dtype=torch.float64, **options)
        self._ring_lengths = torch.zeros(RECENT_CAPACITY + 1, dtype=torch.float64, **options)
        self._ring_head = torch.zeros((), dtype=torch.int64, **options)
        self._invalid_env = torch.full((), -1, dtype=torch.int64, **options)
        self._invalid_value = torch.zeros(
            self.actions[0].shape, dtype=self.actions.dtype, **options
        )

    def _init_reset_constants(self, options: dict[str, Any]) -> None:
        """Build the RNG stream offsets and the reset bounds' low/span the reset draws use."""
        draws = len(self.reset_bounds)
        self._draw_offsets = torch.tensor(
            [_i64((k + 1) * _GOLDEN) for k in range(draws)], dtype=torch.int64, **options
        ).unsqueeze(1)
        self._stream_advance = _i64(draws * _GOLDEN)
        self._reset_low = torch.tensor(
            [low for low, _ in self.reset_bounds], dtype=torch.float64, **options
        ).unsqueeze(1)
        self._reset_span = torch.tensor(
            [high - low for low, high in self.reset_bounds], dtype=torch.float64, **options
        ).unsqueeze(1)

    # --- what each env defines ---------------------------------------------------------------
    def _initial_state(self, draws: torch.Tensor) -> torch.Tensor:
        """(state_dim, N) initial states from the reset's uniform draws (len(reset_bounds), N)."""
        return draws

    def _observe(self, state: torch.Tensor) -> torch.Tensor:
        """(N, obs_dim) float32 observations of (state_dim, N) states."""
        return state.T.to(torch.float32)

    def _dynamics(
        self, state: torch.Tensor, actions: torch.Tensor, first_step: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One step of every env: (next state, float64 reward, terminated). `first_step` marks
        envs whose state is still the one reset drew."""
        raise NotImplementedError

    # --- Gymnasium's vector API --------------------------------------------------------------

    @property
    def time_limit(self) -> int | None:
        """operant.envs.contract.DeclaresTimeLimit: the episode step limit."""
        return self.max_episode_steps

    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ):
        """Reset every env, seeding as the native kernels do (operant.envs.face.seeding): env i's
        stream from (seed, i) for an int, from (seed[i], 0) for a list (kept where None); no
        seed on the first reset seeds from the OS's entropy; later resets continue."""
        refuse_reset_options(
            options,
            f"the torch {self.entry.id}",
            "; impl=\"reference\" (Gymnasium's own env) takes Gymnasium's options",
        )
        self.check_actions()
        seed = check_seed(seed, self.num_envs)
        seed_np_random(self, seed)
        if isinstance(seed, list):
            streams = per_env_streams(seed, None if self._seeded else secrets.randbits(64))
            rows = [row for row, stream in enumerate(streams) if stream is not None]
            self.rng_state[rows] = torch.tensor(
                [_i64(stream) for stream in streams if stream is not None],
                dtype=torch.int64,
                device=self.device,
            )
        elif seed is not None:
            self.rng_state.copy_(seed_streams(seed, self.num_envs, self.device))
        elif not self._seeded:
            self.rng_state.copy_(seed_streams(secrets.randbits(64), self.num_envs, self.device))
        self._seeded = True
        draws, advanced = self._draw()
        self.state.copy_(self._initial_state(draws))
        self.rng_state.copy_(advanced)
        self.episode_return.zero_()
        self.episode_length.zero_()
        self.rewards.zero_()
        self.terminated.zero_()
        self.truncated.zero_()
        self.obs.copy_(self._observe(self.state))
        obs = self.obs if self._next_step is None else self._next_step.reset()
        if self.render_mode is not None:
            self._rendered_reset()
        return (obs.clone() if self.copy else obs), {}

    def step(self, actions):
        """Gymnasium's step: returns (obs, rewards, terminated, truncated, info) as tensors."""
        self._load_actions(actions)
        if self._next_step is not None:
            return step_next_step_face(self)
        self.step_bound()
        done = self.terminated | self.truncated
        info = {
            "final_obs": self.final_obs,
            "_final_obs": done,
            "final_info": {},
            "_final_info": done,
        }
        if self.render_mode is not None:
            self._rendered_step(~done, torch.zeros_like(done), None)
        if self.copy:
            info["final_obs"] = self.final_obs.clone()
            return (
                self.obs.clone(),
                self.rewards.clone(),
                self.terminated.clone(),
                self.truncated.clone(),
                info,
            )
        return self.obs, self.rewards, self.terminated, self.truncated, info

    def step_bound(self) -> None:
        """Step with the actions already in `self.actions`; outputs land in the buffers."""
        actions = self.actions
        valid = self._valid(actions)
        if self.action_checks == "every_step":
            self._raise_on_invalid(valid)
        else:
            self._remember_invalid(valid)
            actions = self._replace_invalid(actions, valid)
        state, reward, terminated = self._dynamics(self.state, actions, self.episode_length == 0)
        self.episode_return += reward
        self.episode_length += 1
        truncated = self.episode_length >= self.max_episode_steps
        done = terminated | truncated
        self.rewards.copy_(reward)
        self.terminated.copy_(terminated)
        self.truncated.copy_(truncated)
        self.final_obs.copy_(self._observe(state))
        self._record_episodes(done)
        draws, advanced = self._draw()
        self.state.copy_(torch.where(done, self._initial_state(draws), state))
        self.rng_state.copy_(torch.where(done, advanced, self.rng_state))
        self.episode_return.masked_fill_(done, 0.0)
        self.episode_length.masked_fill_(done, 0)
        self.obs.copy_(self._observe(self.state))

    def close_extras(self, **kwargs) -> None:
        self._close_render()

    def _render_states(self) -> np.ndarray:
        return self.state.cpu().numpy()

    # --- explicit state (BatchEnv contract) -------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The live tensors that hold this env's state, under stable names."""
        tensors = {name: getattr(self, name) for name in STATE_TENSORS}
        return {**tensors, **next_step_state(self._next_step)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Copy tensors with state_dict()'s names, dtypes and shapes in place (on any device; a
        ValueError names the first that is missing, extra or different, and then nothing is
        copied); later resets without a seed continue the restored streams."""
        restore_state(state, self.state_dict())
        self._seeded = True

    # --- statistics, read once per update (host syncs live here) ----------------------------
    def drain_episode_stats(self) -> EpisodeStats:
        """Finished-episode statistics since the last drain, then clear them."""
        self.check_actions()
        record = EpisodeStats.from_record(self.stats.cpu().numpy())
        self._clear_stats()
        return record

    def recent_returns(self, count: int) -> np.ndarray:
        """Returns of the last `count` finished episodes (fewer if fewer have finished)."""
        self.check_actions()
        head = int(self._ring_head)
        count = max(0, min(count, head, RECENT_CAPACITY))
        slots = torch.arange(head - count, head, device=self.device) % RECENT_CAPACITY
        return self._ring_returns[slots].cpu().numpy()

    def check_actions(self) -> None:
        """Raise InvalidActionError if a deferred check saw an invalid action since the last
        check (then clear it)."""
        if self.action_checks != "deferred":
            return
        env_index = int(self._invalid_env)
        if env_index >= 0:
            value = self._invalid_value.cpu().tolist()
            self._invalid_env.fill_(-1)
            raise InvalidActionError(
                invalid_action_message(self.single_action_space, env_index, value)
                + " (seen by a step since the last check; it was stepped as a valid action)"
            )

    # --- internals ---------------------------------------------------------------------------
    def _clear_stats(self) -> None:
        # The contract's cleared record: minima +inf and maxima -inf, so the first episode
        # sets them.
        self.stats.copy_(torch.from_numpy(cleared_stats().reshape(1).view(np.float64)))

    def _draw(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Every env's next reset draws (uniform in reset_bounds) and its stream after them."""
        z = self.rng_state.unsqueeze(0) + self._draw_offsets
        unit = _shift_right(_mix(z), 11).to(torch.float64) * 2.0**-53
        return self._reset_low + unit * self._reset_span, self.rng_state + self._stream_advance

    def _record_episodes(self, done: torch.Tensor) -> None:
        """Reduce the episodes that ended this step into `stats` and the recent-episode ring."""
        values = torch.stack((self.episode_return, self.episode_length.to(torch.float64)))
        # rows: _QUANTITIES (return, length); columns: _REDUCTIONS (sum, min, max)
        per_quantity = self.stats[_QUANTITY_BLOCK].view(len(_QUANTITIES), len(_REDUCTIONS))
        per_quantity[:, _SUM] += torch.where(done, values, 0.0).sum(dim=1)
        per_quantity[:, _MIN] = torch.minimum(
            per_quantity[:, _MIN], torch.where(done, values, math.inf).amin(dim=1)
        )
        per_quantity[:, _MAX] = torch.maximum(
            per_quantity[:, _MAX], torch.where(done, values, -math.inf).amax(dim=1)
        )
        rank = torch.cumsum(done, 0) - 1
        total = rank[-1] + 1
        self.stats[_EPISODES] += total
        # Envs that ended take consecutive slots in env order (as in the kernels); when more
        # than the ring holds end at once, only the last RECENT_CAPACITY are kept.
        keep = done & (rank >= total - RECENT_CAPACITY)
        slot = torch.where(keep, (self._ring_head + rank) % RECENT_CAPACITY, RECENT_CAPACITY)
        self._ring_returns.index_put_((slot,), values[0])
        self._ring_lengths.index_put_((slot,), values[1])
        self._ring_head += total

    def _valid(self, actions: torch.Tensor) -> torch.Tensor:
        if self.discrete:
            return (actions >= 0) & (actions < self.act_spec.num_actions)
        return torch.isfinite(actions).all(dim=1)

    def _raise_on_invalid(self, valid: torch.Tensor) -> None:
        if not bool(valid.all()):
            env_index = int(torch.argmin(valid.to(torch.uint8)))
            raise InvalidActionError(
                invalid_action_message(
                    self.single_action_space, env_index, self.actions[env_index].cpu().tolist()
                )
            )

    def _remember_invalid(self, valid: torch.Tensor) -> None:
        # index_select with a one-element index tensor stays on the device (indexing with a
        # 0-d tensor may read it on the host).
        first_invalid = torch.argmin(valid.to(torch.uint8)).view(1)
        new = (self._invalid_env < 0) & ~valid.index_select(0, first_invalid)[0]
        self._invalid_env.copy_(torch.where(new, first_invalid[0], self._invalid_env))
        self._invalid_value.copy_(
            torch.where(new, self.actions.index_select(0, first_invalid)[0], self._invalid_value)
        )

    def _replace_invalid(self, actions: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        if self.discrete:
            return actions.clamp(0, self.act_spec.num_actions - 1)
        return torch.where(torch.isfinite(actions), actions, 0.0)

    def _load_actions(self, actions) -> None:
        if not isinstance(actions, torch.Tensor):
            try:
                array = np.asarray(actions)
            except (TypeError, ValueError) as error:
                raise InvalidActionError(
                    f"actions must be an array, got {type(actions).__name__}: {error}"
                ) from None
            if array.dtype.kind not in "biuf":
                raise InvalidActionError(f"actions must be numbers, got dtype {array.dtype}")
            actions = torch.from_numpy(array)
        dtype = actions.dtype
        check_action_batch(
            actions.shape,
            not dtype.is_floating_point and not dtype.is_complex and dtype != torch.bool,
            dtype.is_floating_point,
            self.actions.shape,
            self.single_action_space,
            dtype,
        )
        self.actions.copy_(actions)

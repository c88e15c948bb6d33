"""Gymnasium's two autoreset modes on the Gymnasium face (`step()`) of the native, overlap and
torch families, over their one SAME_STEP core.

Every family's core (`step_bound()`, the trainer's path) autoresets SAME_STEP, and it stays
so. An env made with `autoreset_mode=AutoresetMode.NEXT_STEP` (or the string "NextStep")
changes what `step()` returns, exactly as Gymnasium's NEXT_STEP vector envs do:

- the step that ends env i's episode returns its terminal observation (in `obs`; there is no
  `info["final_obs"]`), with that step's reward and flags;
- the next `step()` ignores env i's action, and returns the first observation of its next
  episode, reward 0, terminated = truncated = False;
- the step after that moves env i from that first observation.

How, over the SAME_STEP core: when env i ends, the core has already reset it, so its next
episode's first observation is in the core's `obs` and the terminal one in `final_obs`. The
face returns `final_obs` for it (`NextStepFace.outputs`). On the next call env i is
*pending*: its rows of the core's per-env state (`hold` arrays: state, RNG stream, episode
return and length, observation) are saved, the core steps every env (env i with action 0,
valid in every space, and its episode length held far from the time limit), and env i's rows
are put back, so that step never happened for it. Its random stream is put back too, so the
episodes an env plays are the same in both modes, seed for seed; only when they are reported
differs. The core's episode statistics see only real episodes: a held env cannot reach its
time limit, and none of Operant's envs can terminate on the first step from a reset state.

No allocation per step (numpy): the face's buffers, the saved rows and the masks are
allocated once; with `copy=False` `step()` returns the face's own buffers (the core's stay
the trainer's), and actions already of the buffer's dtype (int64, or float32 for Box
spaces) are copied in without a conversion. The torch face does the same with masked tensor
ops and never synchronises with the device.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode

HELD_LENGTH = -(2**62)
"""The episode length a held env steps with: no step brings it to a time limit."""


def autoreset_mode(value: Any) -> AutoresetMode:
    """The mode named by `value`: an AutoresetMode, or its string value ("NextStep",
    "SameStep"), case and separators aside. Raises a one-line ValueError for anything else
    (DISABLED included: Operant's envs always autoreset)."""
    mode: AutoresetMode | None
    if isinstance(value, AutoresetMode):
        mode = value
    else:
        key = str(value).replace("_", "").replace("-", "").lower()
        mode = {m.value.lower(): m for m in AutoresetMode}.get(key)
    if mode in (AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP):
        return mode
    raise ValueError(
        f"autoreset_mode must be AutoresetMode.NEXT_STEP or SAME_STEP (or "
        f'"NextStep" / "SameStep"), got {value!r}'
    )


def with_autoreset_mode(metadata: dict[str, Any], mode: AutoresetMode) -> dict[str, Any]:
    """An env's own metadata: its class's, with `autoreset_mode` set to `mode`."""
    return {**metadata, "autoreset_mode": mode}


@dataclass
class Held:
    """One per-env array of the core that an ignored step must not change: `rows_axis` is
    the axis that runs over envs `lo:hi` of the batch (the array's own rows), and
    `during_step`, when set, is written into the held rows for the ignored step."""

    array: Any
    rows_axis: int
    lo: int
    hi: int
    during_step: int | None = None


def _rows_mask(mask: Any, held: Held) -> Any:
    """`mask[lo:hi]` shaped to broadcast along `held.array`'s rows axis."""
    shape = [1] * held.array.ndim
    shape[held.rows_axis] = held.hi - held.lo
    return mask[held.lo : held.hi].reshape(shape)


class NextStepFace:
    """The NEXT_STEP face of one env: the outputs `step()` returns, and which envs are due
    a reset. `env` has the core's buffers (obs, final_obs, rewards, terminated, truncated,
    actions) as numpy arrays or torch tensors; `held` lists the core's per-env state."""

    def __init__(self, env: Any, held: list[Held]):
        self.env = env
        self.torch = not isinstance(env.obs, np.ndarray)
        zeros = (lambda like: like.clone().zero_()) if self.torch else np.zeros_like
        self.obs = zeros(env.obs)
        self.rewards = zeros(env.rewards)
        self.terminated = zeros(env.terminated)
        self.truncated = zeros(env.truncated)
        self.pending = zeros(env.terminated)
        """Envs whose episode ended on the last step: the next step resets them."""
        self.was_pending = zeros(env.terminated)
        """Envs the last step reset (their action ignored)."""
        self._ended = zeros(env.terminated)
        self._held = [
            (item, zeros(item.array), _rows_mask(self.pending, item))
            for item in held + [Held(env.obs, 0, 0, env.num_envs)]
        ]
        n = env.num_envs
        self._obs_rows = self._ended.reshape(n, *([1] * (env.obs.ndim - 1)))
        self._action_rows = self.pending.reshape(n, *([1] * (env.actions.ndim - 1)))

    # -- masked copies, numpy or torch --------------------------------------------------------
    def _put(self, target: Any, source: Any, mask: Any) -> None:
        """target[mask] = source[mask] (source may be a number), in place."""
        if self.torch:
            import torch

            target.copy_(torch.where(mask, source, target))
        else:
            np.copyto(target, source, where=mask)

    def _copy(self, target: Any, source: Any) -> None:
        if self.torch:
            target.copy_(source)
        else:
            np.copyto(target, source)

    def _and_not(self, out: Any, a: Any, b: Any) -> None:
        """out = a & ~b for booleans (a > b, without a temporary in numpy)."""
        if self.torch:
            out.copy_(a & ~b)
        else:
            np.greater(a, b, out=out)

    # -- the face ------------------------------------------------------------------------------
    def reset(self) -> Any:
        """After the core's reset: nothing pending; returns the face's observations."""
        self._copy(self.obs, self.env.obs)
        for buffer in (
            self.rewards,
            self.terminated,
            self.truncated,
            self.pending,
            self.was_pending,
            self._ended,
        ):
            if self.torch:
                buffer.zero_()
            else:
                buffer.fill(0)
        return self.obs

    def step(self) -> None:
        """Step the core with the actions already in `env.actions`, as NEXT_STEP: pending
        envs are reset instead (their action ignored); the outputs land in this face's
        buffers."""
        env = self.env
        # On the host a pending-free step (most of them) skips the copies; on a device the
        # test would be a sync, so the copies always run.
        self._copy(self.was_pending, self.pending)
        hold = True if self.torch else bool(self.pending.any())
        if hold:
            self._put(env.actions, 0, self._action_rows)
            for item, saved, mask in self._held:
                self._copy(saved, item.array)
                if item.during_step is not None:
                    self._put(item.array, item.during_step, mask)
        try:
            env.step_bound()
        finally:
            # A refused step (an invalid action: no env moved) puts the held rows back too,
            # else a pending env kept its held length and played past its time limit.
            if hold:
                for item, saved, mask in self._held:
                    self._put(item.array, saved, mask)
        if self.torch:
            self._ended.copy_(env.terminated | env.truncated)
        else:
            np.logical_or(env.terminated, env.truncated, out=self._ended)
        self._and_not(self._ended, self._ended, self.pending)
        self._copy(self.obs, env.obs)
        self._put(self.obs, env.final_obs, self._obs_rows)
        self._copy(self.rewards, env.rewards)
        self._put(self.rewards, 0.0, self.pending)
        self._and_not(self.terminated, env.terminated, self.pending)
        self._and_not(self.truncated, env.truncated, self.pending)
        self._copy(self.pending, self._ended)

    def outputs(self, copy: bool) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """What `step()` returns: the face's buffers, or copies of them."""
        buffers = (self.obs, self.rewards, self.terminated, self.truncated)
        if copy:
            buffers = tuple(b.clone() if self.torch else b.copy() for b in buffers)
        return (*buffers, {})


def next_step_state(face: NextStepFace | None) -> dict[str, Any]:
    """What a NEXT_STEP face adds to its env's state_dict (live buffers, so load_state_dict
    copies into them): which envs the next step resets, their episode having ended on the
    last, and the observations the last step returned (terminal ones where episodes ended).
    Without them a restored env stepped an ended env on instead of resetting it. {} without
    a face (SAME_STEP)."""
    if face is None:
        return {}
    return {"next_step.pending": face.pending, "next_step.obs": face.obs}


def step_next_step_face(env: Any) -> tuple[Any, ...]:
    """Gymnasium's step of an env made with NEXT_STEP autoreset: its face steps (the actions
    are loaded already), the frames follow when it renders, and the face's outputs return."""
    face = env._next_step
    face.step()
    if env.render_mode is not None:
        env._rendered_step(~face.was_pending, face.pending, face.obs)
    return face.outputs(env.copy)

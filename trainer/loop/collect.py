"""Collectors: how one rollout fills the storage, as a strategy the Trainer composes.

A collector acts with the policy on rows of the env's buffers, steps the env, and stores
each step's outcome; `collect()` fills a whole `RolloutStorage` and returns V(observation
after the last step). Both strategies draw the same samples in the same order, so they fill
the storage bit for bit alike:

- `PlainCollector`: every row at once, step after step;
- `OverlappedCollector`: the rows in two halves, each stepped on the env's own thread while
  the policy works on the other (an env that steps in halves, operant.envs.contract.StepsInHalves:
  envs/native/overlap.py).

Where the env can rebind its kernels' buffers (`bind_slots`, operant.envs.native.slots.SlotBinding)
and the storage lives in host memory, nothing is copied per step (`bound`): the kernel writes
step t's rewards and flags into the storage's row t and the observation it leads to into row
t + 1 (the last step's into the env's own buffer, which the next rollout copies into row 0,
once), and reads its discrete actions from the row the policy sampled into. The flags become
`dones` once per rollout. Other envs (workers, torch, Python, frame stacks) are copied from
their buffers each step, as before; both ways fill the storage with the same values.

Phases are timed once, in the shared helpers (`_act`: forward and store; `_wait_and_store`:
env and store), into the trainer's `PhaseTimer` totals.

The truncation bootstrap of a rollout in host memory is deferred to the rollout's end
(`BatchedBootstrap`). A time limit is not a terminal state: a truncated episode's reward takes
gamma * V(final observation). Each step's final observations are kept in the storage's
`final_obs_steps` (a bound env's kernel writes them there itself; otherwise the collector
copies them on steps that truncate), and after the rollout every step on which some row
truncated is valued: the value network over all of that step's rows, gamma * V added to its
truncated rows' rewards. That is the per-step pass's arithmetic exactly, moved out of the step:
the same rows in the same positions of a batch of the same shape (a matrix product's rounding
can depend on its shape and on where a row falls in the BLAS's blocks, never on the other rows'
values), so a run with the torch update still reproduces main's records bit for bit
(tests/test_compat_main.py). A batch of the truncated rows alone, gathered, measured cheaper
when many rows truncate at once, but changed torch's values in their last bits; the native MLP
(operant.trainer.loop.fused), whose rows are each summed in one order wherever they fall,
values the truncated rows alone. Each row's value is the network's at the rollout's parameters
on the observation that step produced (normalised with that step's statistics, where
configured).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import torch

from operant.cext.rollout_rows import rollout_dones
from operant.envs.contract import BindsSlots, StepsInHalves
from operant.trainer.loop.storage import RolloutStorage


class RowSlice(NamedTuple):
    """Rows the policy acts on together: their index into the storage, and views of the env's
    observations, the env's actions and the clip scratch (None for discrete actions); per
    step t, `step_obs[t]` (the storage's observation rows) and `outs[t]` (the storage's
    action, log-probability and value rows the policy samples into)."""

    rows: slice
    env_obs: torch.Tensor
    env_actions: torch.Tensor
    clipped: torch.Tensor | None
    step_obs: tuple[torch.Tensor, ...]
    outs: tuple[tuple[torch.Tensor, torch.Tensor, torch.Tensor], ...]


def row_slice(
    storage: RolloutStorage,
    rows: slice,
    env_obs: torch.Tensor,
    env_actions: torch.Tensor,
    clipped: torch.Tensor | None,
) -> RowSlice:
    """`rows`' RowSlice, its per-step views made once (indexing a tensor costs a microsecond)."""
    steps = range(storage.num_steps)
    return RowSlice(
        rows,
        env_obs,
        env_actions,
        clipped,
        tuple(storage.obs[t, rows] for t in steps),
        tuple(
            (storage.actions[t, rows], storage.logprobs[t, rows], storage.values[t, rows])
            for t in steps
        ),
    )


def _always() -> bool:
    return True


def _ignore(obs_slot: int, step_slot: int) -> None:
    pass


def as_tensor(buffer: Any) -> torch.Tensor:
    """An env buffer as a tensor sharing its memory (numpy buffers) or itself (torch envs)."""
    return buffer if isinstance(buffer, torch.Tensor) else torch.from_numpy(buffer)


def bindable(env: Any, storage: RolloutStorage) -> bool:
    """Whether `env`'s kernels can write into `storage` directly: an env that binds slots
    (operant.envs.contract.BindsSlots; a layer that only forwards attributes does not) and
    can here (`binds_slots`, where that depends on what it wraps), numpy buffers, and the
    storage in host memory with the env's dtypes."""
    return (
        isinstance(env.obs, np.ndarray)
        and storage.obs.device.type == "cpu"
        and storage.obs.dtype == torch.from_numpy(env.obs[:0]).dtype
        and storage.terminated_steps.device.type == "cpu"
        and isinstance(env, BindsSlots)
        and env.binds_slots
    )


class Collector:
    """What both strategies share: acting on rows, and one step's outcome into the storage.

    `observe` turns an env observation buffer into what the policy sees (on its device,
    normalised if configured); `reward_normalizer` is None or called on each step's rewards.
    """

    def __init__(
        self,
        env: Any,
        storage: RolloutStorage,
        policy: Any,
        observe: Callable[..., torch.Tensor],
        reward_normalizer: Any,
        generator: torch.Generator,
        totals: dict[str, int],
        gamma: float,
    ):
        self.env, self.storage, self.policy = env, storage, policy
        self.observe, self.reward_normalizer = observe, reward_normalizer
        self.generator, self.totals, self.gamma = generator, totals, gamma
        self._env_views(env, storage)
        self.everything = row_slice(
            storage, slice(None), self.env_obs, self.env_actions, storage.clipped_actions
        )
        self.bound = bindable(env, storage)
        # A kernel that keeps its observation rows by difference writes its own buffer,
        # copied into the storage each step as for an unbound env.
        self.obs_bound = self.bound and env.binds_obs
        self._step_views(storage)
        # Truncated rows' values: batched over the rollout where everything is in host memory.
        self.bootstrap = (
            BatchedBootstrap(storage, policy)
            if batchable(storage, self.env_final_obs, self.env_truncated)
            else None
        )
        if self.bound:
            self._bind_env()
        self._flag_table(storage)
        self._plan_stores(reward_normalizer)
        if self.bound:
            self._bound_views(storage)

    def _env_views(self, env: Any, storage: RolloutStorage) -> None:
        """The env's buffers seen as tensors: the same memory the kernel writes (no copies);
        a Box's bounds, which the env sees its unbounded samples clipped to."""
        self.env_obs = as_tensor(env.obs)
        self.env_actions = as_tensor(env.actions)
        self.env_rewards = as_tensor(env.rewards)
        self.env_terminated = as_tensor(env.terminated)
        self.env_truncated = as_tensor(env.truncated)
        self.env_final_obs = as_tensor(env.final_obs)
        act_spec = env.act_spec
        device = storage.values.device
        if not act_spec.discrete:
            self.action_low = torch.as_tensor(act_spec.low, device=device)
            self.action_high = torch.as_tensor(act_spec.high, device=device)

    def _step_views(self, storage: RolloutStorage) -> None:
        """Each step's rows of the storage, taken once: where step t's observations go (the
        slot a bound kernel writes, -1 for a copy), its rewards, flags and final
        observations."""
        last = storage.num_steps - 1
        self.obs_slots = tuple(
            t + 1 if t < last and self.obs_bound else -1 for t in range(last + 1)
        )
        steps = range(storage.num_steps)
        self.step_rewards = tuple(storage.rewards[t] for t in steps)
        self.step_dones = tuple(storage.dones[t] for t in steps)
        self.step_terminated = tuple(storage.terminated_steps[t] for t in steps)
        self.step_truncated = tuple(storage.truncated_steps[t] for t in steps)
        self.step_final = tuple(storage.final_obs_steps[t] for t in steps)

    def _flag_table(self, storage: RolloutStorage) -> None:
        """Where step t's truncated flags are, as uint8 (slots, rows) and a slot, in host
        memory; no slots where they are on a device."""
        if self.bound:
            self.flag_table = storage.truncated_steps.numpy().view(np.uint8)
            self.flag_slots: tuple[int, ...] = tuple(range(storage.num_steps))
        elif self.env_truncated.device.type == "cpu":
            self.flag_table = self.env_truncated.numpy().view(np.uint8)[None]
            self.flag_slots = (0,) * storage.num_steps
        else:
            self.flag_slots = ()

    def _plan_stores(self, reward_normalizer: Any) -> None:
        """What a step stores: the final observations the collector writes into
        `final_obs_steps[t]` on a step that truncates (None where a bound kernel writes them
        itself and the policy sees them as they are), and whether anything is stored at all
        (a bound env with discrete actions and nothing normalised: nothing per step)."""
        self.final_source = (
            None
            if self.bootstrap is None
            or (self.bound and self.observe(self.env_final_obs) is self.env_final_obs)
            else self.env_final_obs
        )
        self.some_truncated = self._truncation_checks()
        self.acts_in_place = self.bound and self.env.act_spec.discrete
        self.nothing_to_store = (
            self.bound
            and reward_normalizer is None
            and self.bootstrap is not None
            and self.final_source is None
        )

    def _bind_env(self) -> None:
        """Bind the env's kernels to the storage: observations to `obs`, rewards and flags to
        their rows, discrete actions to `actions` (a Box's are clipped into the env's own),
        final observations to `final_obs_steps` for the batched bootstrap."""
        storage = self.storage
        self.env.bind_slots(
            obs=storage.obs.numpy() if self.obs_bound else None,
            rewards=storage.rewards.numpy(),
            terminated=storage.terminated_steps.numpy(),
            truncated=storage.truncated_steps.numpy(),
            actions=storage.actions.numpy() if self.env.act_spec.discrete else None,
            final_obs=None if self.bootstrap is None else storage.final_obs_steps.numpy(),
        )

    def _bound_views(self, storage: RolloutStorage) -> None:
        """numpy views for the once-a-rollout work of a bound env (numpy's calls cost less
        than torch's at these sizes, and compute the same: copies and a logical or)."""
        self.first_obs = storage.obs[0].numpy()
        self.flag_arrays = tuple(
            flags.view(-1).numpy().view(np.uint8)
            for flags in (storage.terminated_steps, storage.truncated_steps)
        )
        self.dones_array = storage.dones.view(-1).numpy()
        self.steps_truncating = np.zeros(storage.num_steps, np.uint8)

    def collect(self) -> torch.Tensor:
        """Fill the rollout storage; returns V(obs after the last step)."""
        raise NotImplementedError

    def _start(self) -> tuple[Callable[[], bool], ...]:
        """Before a rollout's first step: a bound env's observation into the storage's row 0;
        returns `some_truncated`, per step."""
        if self.obs_bound:
            started = time.perf_counter_ns()
            np.copyto(self.first_obs, self.env.obs)
            self.totals["store"] += time.perf_counter_ns() - started
        return self.some_truncated

    def _finish(self) -> None:
        """After a rollout's last step: the batched bootstrap's values into the rewards (the
        value network's time counted as "forward"); a bound env's flags into `dones`, all
        steps at once (an env with a reward normaliser had them step by step), and the env's
        own buffers bound again, so its face and its checkpoint see what an unbound env would."""
        clock = time.perf_counter_ns
        started = clock()
        storage, bootstrap = self.storage, self.bootstrap
        truncations, steps = 1, None  # unknown: the bootstrap looks for itself
        if self.bound:
            # The dones a reward normaliser had step by step, the same values; the steps on
            # which some row truncated, found in the same pass.
            steps = self.steps_truncating
            truncations = rollout_dones(*self.flag_arrays, self.dones_array, steps)
            self.env.select_slots(-1, -1)
        valued = 0
        if bootstrap is not None and truncations:
            valued = bootstrap.value_ns
            bootstrap.finish(storage.rewards, self.gamma, steps)
            valued = bootstrap.value_ns - valued
        self.totals["forward"] += valued
        self.totals["store"] += clock() - started - valued

    def _truncation_checks(self) -> tuple[Callable[[], bool], ...]:
        """Per step, whether to bootstrap truncated episodes. Flags in host memory are asked
        through numpy, where asking costs nothing (and allocates nothing); on an accelerator
        always bootstrap, since asking would make the host wait for the device every step."""
        if self.flag_slots:
            return tuple(self.flag_table[slot].any for slot in self.flag_slots)
        return (_always,) * self.storage.num_steps

    def _act(self, t: int, part: RowSlice) -> None:
        """The policy on `part`'s rows at step t: sample into the storage, keep the
        observation, write the actions the envs will take (clipped to a Box's bounds)."""
        clock = time.perf_counter_ns
        bound, stored = self.bound, part.step_obs[t]
        started = clock()
        env_obs = stored if self.obs_bound else part.env_obs
        obs = self.observe(env_obs, update=True)
        actions = self.policy.act(obs, self.generator, out=part.outs[t])[0]
        forwarded = clock()
        self.totals["forward"] += forwarded - started
        if obs is stored and self.acts_in_place:
            return  # the kernel reads the sampled actions where the policy wrote them
        if obs is not stored:  # an unbound env's buffer, or the normaliser's workspace
            stored.copy_(obs)
        if part.clipped is not None:
            if bound:  # the env's own action buffer is the clip's output
                torch.clamp(actions, self.action_low, self.action_high, out=part.env_actions)
            else:
                torch.clamp(actions, self.action_low, self.action_high, out=part.clipped)
                part.env_actions.copy_(part.clipped)
        elif not bound:
            part.env_actions.copy_(actions)
        self.totals["store"] += clock() - forwarded

    def _wait_and_store(
        self, t: int, wait: Callable[[], None], some_truncated: tuple[Callable[[], bool], ...]
    ) -> None:
        """`wait()` for the env (timed as "env"), then store step t's outcome ("store")."""
        clock = time.perf_counter_ns
        waited_from = clock()
        wait()
        waited = clock()
        self.totals["env"] += waited - waited_from
        if self.nothing_to_store:
            return  # the kernel wrote the step's outcome into the storage itself
        self._after_step(t, some_truncated)
        self.totals["store"] += clock() - waited

    def _after_step(self, t: int, some_truncated: tuple[Callable[[], bool], ...]) -> None:
        """Step t's outcome into the storage: rewards (normalised if configured; a truncated
        episode's reward plus gamma * V(final observation), since a time limit is not a
        terminal state) and dones (a bound env's at the end of the rollout, unless the reward
        normaliser needs them now)."""
        storage, rewards, dones = self.storage, self.step_rewards[t], self.step_dones[t]
        if self.bound:
            truncated = self.step_truncated[t]
            if self.reward_normalizer is not None:
                torch.logical_or(self.step_terminated[t], truncated, out=storage.done_mask)
                dones.copy_(storage.done_mask)
        else:
            truncated = self.env_truncated
            rewards.copy_(self.env_rewards)
            torch.logical_or(self.env_terminated, truncated, out=storage.done_mask)
            dones.copy_(storage.done_mask)
            if self.bootstrap is not None:
                self.step_truncated[t].copy_(truncated)
        if self.reward_normalizer is not None:
            rewards.copy_(self.reward_normalizer(rewards, dones))
        if self.bootstrap is not None:
            if self.final_source is not None and some_truncated[t]():
                self._keep_final(t)
        elif some_truncated[t]():
            final_value = self.policy.value(
                self.observe(self.env_final_obs), out=storage.final_values
            )
            storage.truncated.copy_(truncated)
            rewards.addcmul_(final_value, storage.truncated, value=self.gamma)

    def _keep_final(self, t: int) -> None:
        """Step t's final observations, as the policy sees them, into `final_obs_steps[t]`
        (a bound env's are there already: normalised in place)."""
        kept = self.step_final[t]
        obs = self.observe(kept if self.bound else self.final_source)
        if obs is not kept:
            kept.copy_(obs)

    def _selector(self, which: int) -> Callable[[int, int], None]:
        """For a bound env, the select(obs_slot, step_slot) of the kernel that steps half
        `which` (the only kernel's for an env of one); else a no-op."""
        if not self.bound:
            return _ignore
        selectors = self.env.slot_selectors()
        return selectors[0] if len(selectors) == 1 else selectors[which]

    def _next_value(self) -> torch.Tensor:
        return self.policy.value(self.observe(self.env_obs), out=self.storage.next_value)


class PlainCollector(Collector):
    """Every row acts, then the env steps them all, `num_steps` times."""

    @torch.inference_mode()
    def collect(self) -> torch.Tensor:
        some_truncated = self._start()
        step, select = self.env.step_bound, self._selector(0)
        last = self.storage.num_steps - 1
        for t in range(last + 1):
            self._act(t, self.everything)
            select(self.obs_slots[t], t)
            self._wait_and_store(t, step, some_truncated)
        self._finish()
        return self._next_value()


class OverlappedCollector(Collector):
    """The rows in two halves, A and B, each stepped on the env thread while the policy works
    on the other: A's step t runs during B's forward t, B's step t during A's forward t + 1.
    Step t's bookkeeping (rewards, dones, bootstrap) runs over all rows once both halves
    have taken it, exactly as in the plain collector."""

    def __init__(self, env: StepsInHalves, *args: Any, **kwargs: Any):
        if not isinstance(env, StepsInHalves):
            raise TypeError(
                f"the overlapped collector steps an env in halves (StepsInHalves); "
                f"{type(env).__name__} does not: make it with overlap=True"
            )
        super().__init__(env, *args, **kwargs)
        self.split = env
        clipped = self.storage.clipped_actions
        self.halves = tuple(
            row_slice(
                self.storage,
                slice(lo, hi),
                self.env_obs[lo:hi],
                self.env_actions[lo:hi],
                None if clipped is None else clipped[lo:hi],
            )
            for lo, hi in env.halves
        )

    @torch.inference_mode()
    def collect(self) -> torch.Tensor:
        some_truncated = self._start()
        env, totals, clock = self.split, self.totals, time.perf_counter_ns
        first, second = self.halves
        select_first, select_second = self._selector(0), self._selector(1)
        finish_second = self._finish_second
        last = self.storage.num_steps - 1
        for t in range(last + 1):
            obs_slot = self.obs_slots[t]
            self._act(t, first)
            if t > 0:
                self._wait_and_store(t - 1, finish_second, some_truncated)
            select_first(obs_slot, t)
            env.start_half(0)
            self._act(t, second)
            waited_from = clock()
            env.finish_half(0)
            select_second(obs_slot, t)
            env.start_half(1)
            totals["env"] += clock() - waited_from
        self._wait_and_store(last, finish_second, some_truncated)
        self._finish()
        return self._next_value()

    def _finish_second(self) -> None:
        self.split.finish_half(1)


def make_collector(overlap: bool, env: Any, *args: Any, **kwargs: Any) -> Collector:
    """The overlapped collector when `overlap` (env.overlap) and the env steps in halves
    (StepsInHalves: the env `overlap` made), else the plain one; `overlap` with an env that
    cannot is a TypeError, not a silent plain rollout."""
    if overlap:
        return OverlappedCollector(env, *args, **kwargs)
    return PlainCollector(env, *args, **kwargs)


# -- The truncation bootstrap, after the rollout --------------------------------------------------
def batchable(storage: RolloutStorage, final_obs: torch.Tensor, truncated: torch.Tensor) -> bool:
    """Whether the batched bootstrap applies: the storage, the env's final observations and
    its flags all in host memory."""
    return all(tensor.device.type == "cpu" for tensor in (storage.obs, final_obs, truncated))


class BatchedBootstrap:
    """Values, after a rollout, the final observations of the steps on which rows truncated."""

    def __init__(self, storage: RolloutStorage, policy: Any):
        self.policy = policy
        self.final_obs = storage.final_obs_steps
        self.final_values = storage.final_values_steps
        self.truncated = storage.truncated_steps
        self.mask = storage.truncated  # float (rows,): the flags addcmul multiplies by
        self._flags = storage.truncated_steps.numpy().view(np.uint8)
        # The native MLP values the truncated rows alone (its rows do not round by batch
        # shape); any other policy takes the full-width pass.
        self._value_where = getattr(policy, "value_where", lambda *args: False)
        self.value_ns = 0
        """ns spent in the value network (the collector counts it as "forward")."""

    def finish(self, rewards: torch.Tensor, gamma: float, steps: np.ndarray | None = None) -> None:
        """After a rollout: each step's truncated rows valued, gamma * V added to `rewards`.
        `steps` (uint8, one per step), where the caller knows them, marks the steps on which
        some row truncated; else each step's flags are looked through here."""
        marked = steps.tolist() if steps is not None else None
        rewards_rows = rewards.numpy() if rewards.device.type == "cpu" else None
        for t in range(self._flags.shape[0]):
            if not (marked[t] if marked is not None else self._flags[t].any()):
                continue
            started = time.perf_counter_ns()
            values = self.final_values[t]
            if rewards_rows is not None and self._value_where(
                self.final_obs[t], self._flags[t], values, rewards_rows[t], gamma
            ):
                # gamma * V added to the truncated rows' rewards in the same C call (where
                # torch's copy and addcmul cost several microseconds)
                self.value_ns += time.perf_counter_ns() - started
                continue
            self.policy.value(self.final_obs[t], out=values)
            self.value_ns += time.perf_counter_ns() - started
            self.mask.copy_(self.truncated[t])
            rewards[t].addcmul_(values, self.mask, value=gamma)

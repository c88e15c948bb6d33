"""A rollout without copies (operant.trainer.loop.collect, `bound`): the kernels write each step's
observations, rewards and flags straight into the rollout storage's rows and read their
discrete actions from the row the policy sampled into (cext/common/kernel_slots.pxd). Shown here:
a kernel bound to slots writes what an unbound twin writes into its own buffers, for every
native family; a bound rollout fills the storage bit for bit as the copying one does (plain,
overlapped, normalised, with truncation bootstraps); the policy reads the kernel's memory."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import operant.trainer.loop.collect as collect
from operant.envs import make_env
from operant.envs.registry import InvalidActionError
from operant.trainer.config import load_config
from operant.trainer.loop.train import Trainer

FAMILIES = [
    ("CartPole-v1", {}),
    ("Acrobot-v1", {}),
    ("MountainCar-v0", {}),
    ("Pendulum-v1", {}),
    ("MountainCarContinuous-v0", {}),
    *[
        (f"MinAtar-{game}-v1", {})
        for game in ("Breakout", "Freeway", "SpaceInvaders", "Asterix", "Seaquest")
    ],
]


def slots_like(buffer: np.ndarray, count: int, fill: int) -> np.ndarray:
    """`count` slots shaped like `buffer`, every byte `fill` (what the kernel must overwrite)."""
    slots = np.empty((count, *buffer.shape), dtype=buffer.dtype)
    slots.view(np.uint8)[...] = fill
    return slots


@pytest.mark.parametrize("env_id, kwargs", FAMILIES, ids=[family[0] for family in FAMILIES])
def test_a_kernel_bound_to_slots_writes_what_its_own_buffers_get(env_id, kwargs):
    steps, num_envs = 40, 8
    bound = make_env(env_id, num_envs, copy=False, max_episode_steps=7, **kwargs)
    twin = make_env(env_id, num_envs, copy=False, max_episode_steps=7, **kwargs)
    bound.reset(seed=3)
    twin.reset(seed=3)
    obs = slots_like(bound.obs, steps + 1, 0xAB)
    obs[0] = bound.obs
    outputs = {
        name: slots_like(getattr(bound, name), steps, 0xCD)
        for name in ("rewards", "terminated", "truncated")
    }
    for flags in ("terminated", "truncated"):
        outputs[flags].view(np.uint8)[...] = 1
    discrete = bound.act_spec.discrete
    actions = np.zeros((steps, *bound.actions.shape), bound.actions.dtype)
    generator = np.random.default_rng(0)
    for t in range(steps):
        actions[t] = (
            generator.integers(0, bound.act_spec.num_actions, num_envs)
            if discrete
            else generator.uniform(-1, 1, bound.actions.shape)
        )
    # A kernel that keeps its observation rows by difference (MinAtar) keeps its own
    # observation buffer; everything else moves to the slots.
    keeps_rows = bound.keeps_obs_rows
    bound.bind_slots(
        obs=None if keeps_rows else obs, actions=actions if discrete else None, **outputs
    )
    for t in range(steps):
        if not discrete:
            np.copyto(bound.actions, actions[t])
        bound.select_slots(t + 1, t)
        bound.step_bound()
        np.copyto(twin.actions, actions[t])
        twin.step_bound()
        np.testing.assert_array_equal(bound.obs if keeps_rows else obs[t + 1], twin.obs)
        for name, slots in outputs.items():
            np.testing.assert_array_equal(slots[t], getattr(twin, name), err_msg=name)
        np.testing.assert_array_equal(bound.final_obs, twin.final_obs)
    assert outputs["truncated"].any()  # autoresets happened while bound


def test_slots_are_checked_and_invalid_actions_named():
    env = make_env("CartPole-v1", 4, copy=False)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="slots for rewards must be"):
        env.bind_slots(rewards=np.zeros((3, 5), np.float32))
    with pytest.raises(ValueError, match="slots for obs must be"):
        env.bind_slots(obs=np.zeros((3, 4, 4), np.float64))
    actions = np.zeros((2, 4), np.int64)
    env.bind_slots(actions=actions)
    with pytest.raises(IndexError, match="past the bound arrays"):
        env.select_slots(-1, 2)
    actions[1, 2] = 7
    env.select_slots(-1, 1)
    with pytest.raises(InvalidActionError, match="7"):
        env.step_bound()
    env.select_slots(-1, 0)
    env.step_bound()


def rollouts(
    extra: list[str], bound: bool, monkeypatch, count: int = 2, batched: bool = True
) -> list[dict]:
    """The storage after each of `count` rollouts of a small CartPole trainer (`batched`:
    the truncation bootstrap of operant.trainer.loop.collect.BatchedBootstrap, else the per-step
    pass)."""
    config = load_config(
        None,
        [
            "env.id=CartPole-v1",
            "env.impl=native",
            "env.num_envs=16",
            "env.max_episode_steps=6",
            "ppo.num_steps=8",
            "train.seed=5",
            "train.total_steps=100_000",
            *extra,
        ],
    )
    with monkeypatch.context() as patch:
        if not bound:
            patch.setattr(collect, "bindable", lambda env, storage: False)
        if not batched:
            patch.setattr(collect, "batchable", lambda *tensors: False)
        trainer = Trainer(config)
    assert trainer.collector.bound is bound
    assert (trainer.collector.bootstrap is not None) is batched
    filled = []
    for _ in range(count):
        next_value = trainer.collect()
        storage = trainer.storage
        filled.append(
            {
                "next_value": next_value.clone(),
                **{
                    name: getattr(storage, name).clone()
                    for name in ("obs", "actions", "logprobs", "rewards", "dones", "values")
                },
                "env_obs": torch.from_numpy(trainer.env.obs.copy()),
            }
        )
    return filled


@pytest.mark.parametrize(
    "extra",
    [[], ["env.overlap=true"], ["normalize.obs=true", "normalize.reward=true"]],
    ids=["plain", "overlap", "normalised"],
)
def test_a_bound_rollout_fills_the_storage_as_the_copying_one(extra, monkeypatch):
    copied = rollouts(extra, False, monkeypatch)
    bound = rollouts(extra, True, monkeypatch)
    for before, after in zip(copied, bound):
        for name, tensor in before.items():
            assert torch.equal(tensor, after[name]), name
    assert bound[-1]["dones"].sum() > 0


def test_the_policy_reads_the_memory_the_kernel_wrote(monkeypatch):
    config = load_config(
        None, ["env.id=CartPole-v1", "env.num_envs=8", "ppo.num_steps=4", "env.impl=native"]
    )
    trainer = Trainer(config)
    storage, kernel = trainer.storage, trainer.env.kernel
    seen, written = [], []
    act = trainer.policy.act

    def spy(obs, generator, out=None):
        seen.append(obs.data_ptr())
        written.append(kernel.obs_address)  # where the previous step wrote its observations
        return act(obs, generator, out=out)

    monkeypatch.setattr(trainer.policy, "act", spy)
    trainer.collect()
    # The policy reads storage row t, which step t - 1 wrote (row 0: copied from the env's own
    # buffer, which the last step of a rollout writes); no observation buffer in between.
    assert seen == [storage.obs[t].data_ptr() for t in range(4)]
    assert written == [trainer.env.obs.ctypes.data, *seen[1:]]
    assert kernel.obs_address == trainer.env.obs.ctypes.data


def test_the_batched_bootstrap_adds_what_the_per_step_one_does(monkeypatch):
    """Truncated rows' gamma * V(final observation), valued in batches over the rollout,
    equals the per-step pass over every row (up to the network's batching: rtol 1e-6)."""
    per_step = rollouts([], True, monkeypatch, count=3, batched=False)
    batched = rollouts([], True, monkeypatch, count=3, batched=True)
    for before, after in zip(per_step, batched):
        torch.testing.assert_close(after["rewards"], before["rewards"], rtol=1e-6, atol=1e-6)
        assert torch.equal(after["dones"], before["dones"])
    assert (batched[-1]["rewards"] != 1.0).any()  # some rewards took a bootstrap


def test_rollout_dones_marks_the_steps_that_truncated():
    """The once-a-rollout pass: dones = terminated | truncated, the count of truncations, and
    the steps on which some row truncated (the bootstrap values those steps only)."""
    from operant.cext.rollout_rows import rollout_dones

    rng = np.random.default_rng(0)
    steps, rows = 16, 37
    terminated = (rng.random((steps, rows)) < 0.05).astype(np.uint8)
    truncated = np.zeros((steps, rows), np.uint8)
    truncated[[2, 7, 15], [0, 36, 5]] = 1
    dones = np.full(steps * rows, np.nan, np.float32)
    marked = np.full(steps, 9, np.uint8)
    count = rollout_dones(terminated.ravel(), truncated.ravel(), dones, marked)
    assert count == 3
    assert np.array_equal(dones, (terminated | truncated).ravel().astype(np.float32))
    assert marked.tolist() == [int(t in (2, 7, 15)) for t in range(steps)]
    with pytest.raises(ValueError, match="divide"):
        rollout_dones(terminated.ravel(), truncated.ravel(), dones, np.zeros(5, np.uint8))

"""compute_gae against a plain per-env, per-step reference implementation: both its paths,
the Cython kernel (CPU float32) and the torch loop (everything else)."""

import numpy as np
import pytest
import torch

from operant.cext.gae import gae as gae_kernel
from operant.trainer.loop.ppo import _compute_gae_torch, compute_gae


def reference_gae(rewards, values, dones, next_value, gamma, lam):
    steps, envs = rewards.shape
    advantages = np.zeros((steps, envs))
    for env in range(envs):
        running = 0.0
        for t in reversed(range(steps)):
            following = next_value[env] if t == steps - 1 else values[t + 1, env]
            not_done = 1.0 - dones[t, env]
            delta = rewards[t, env] + gamma * following * not_done - values[t, env]
            running = delta + gamma * lam * not_done * running
            advantages[t, env] = running
    return advantages, advantages + values


def test_matches_reference_with_episode_boundaries():
    rng = np.random.default_rng(0)
    steps, envs = 37, 9
    rewards = rng.normal(size=(steps, envs))
    values = rng.normal(size=(steps, envs))
    dones = (rng.random((steps, envs)) < 0.1).astype(np.float64)
    next_value = rng.normal(size=envs)
    expected_adv, expected_ret = reference_gae(rewards, values, dones, next_value, 0.97, 0.9)
    adv, ret = compute_gae(
        torch.tensor(rewards),
        torch.tensor(values),
        torch.tensor(dones),
        torch.tensor(next_value),
        0.97,
        0.9,
    )
    np.testing.assert_allclose(adv.numpy(), expected_adv, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ret.numpy(), expected_ret, rtol=1e-12, atol=1e-12)


def test_single_step_episode_is_reward_minus_value():
    rewards = torch.tensor([[1.0]])
    values = torch.tensor([[0.25]])
    adv, ret = compute_gae(
        rewards, values, torch.tensor([[1.0]]), torch.tensor([100.0]), 0.99, 0.95
    )
    assert adv.item() == 0.75 and ret.item() == 1.0


def test_writes_into_given_buffer():
    out = torch.zeros(4, 2)
    adv, _ = compute_gae(
        torch.ones(4, 2),
        torch.zeros(4, 2),
        torch.zeros(4, 2),
        torch.zeros(2),
        1.0,
        1.0,
        advantages=out,
    )
    assert adv.data_ptr() == out.data_ptr()
    assert out[:, 0].tolist() == [4.0, 3.0, 2.0, 1.0]


GAMMA, LAM = 0.99, 0.95
SHAPES = [(1, 1), (1, 7), (9, 1), (37, 9), (128, 257)]


def random_rollout(steps, envs, seed):
    """float32 rollout tensors with episode ends everywhere, first and last step included."""
    rng = np.random.default_rng(seed)
    rewards = rng.normal(size=(steps, envs)).astype(np.float32)
    values = rng.normal(size=(steps, envs)).astype(np.float32)
    dones = (rng.random((steps, envs)) < 0.1).astype(np.float32)
    dones[0, ::3] = 1.0
    dones[-1, 1::3] = 1.0
    next_value = rng.normal(size=envs).astype(np.float32)
    return tuple(torch.from_numpy(array) for array in (rewards, values, dones, next_value))


def run_kernel(rewards, values, dones, next_value, gamma=GAMMA, lam=LAM):
    advantages, returns = torch.empty_like(rewards), torch.empty_like(rewards)
    gae_kernel(
        rewards.numpy(),
        values.numpy(),
        dones.numpy(),
        next_value.numpy(),
        gamma,
        lam,
        advantages.numpy(),
        returns.numpy(),
    )
    return advantages, returns


def assert_matches_reference(rollout, advantages, returns):
    expected_adv, expected_ret = reference_gae(*(t.double().numpy() for t in rollout), GAMMA, LAM)
    np.testing.assert_allclose(advantages.numpy(), expected_adv, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(returns.numpy(), expected_ret, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("steps, envs", SHAPES)
def test_kernel_matches_reference(steps, envs):
    rollout = random_rollout(steps, envs, seed=steps * 1000 + envs)
    assert_matches_reference(rollout, *run_kernel(*rollout))


@pytest.mark.parametrize("steps, envs", SHAPES)
def test_torch_path_matches_reference(steps, envs):
    rollout = random_rollout(steps, envs, seed=steps * 1000 + envs)
    advantages, returns = _compute_gae_torch(*rollout, GAMMA, LAM)
    assert advantages.dtype == returns.dtype == torch.float32
    assert_matches_reference(rollout, advantages, returns)


@pytest.mark.parametrize("steps, envs", SHAPES)
def test_kernel_and_torch_path_agree(steps, envs):
    rollout = random_rollout(steps, envs, seed=steps * 1000 + envs + 1)
    kernel_adv, kernel_ret = run_kernel(*rollout)
    torch_adv, torch_ret = _compute_gae_torch(*rollout, GAMMA, LAM)
    torch.testing.assert_close(kernel_adv, torch_adv, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(kernel_ret, torch_ret, rtol=1e-5, atol=1e-5)


def test_done_at_first_and_last_step_cuts_the_flow():
    """An episode end at the last step ignores next_value; one at step 0 ignores step 1."""
    rewards = torch.tensor([[1.0, 1.0], [1.0, 1.0]])
    values = torch.tensor([[0.5, 0.5], [0.25, 0.25]])
    dones = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    next_value = torch.tensor([100.0, 100.0])
    for advantages, _ in (
        run_kernel(rewards, values, dones, next_value, 1.0, 1.0),
        _compute_gae_torch(rewards, values, dones, next_value, 1.0, 1.0),
    ):
        # env 0: step 0 ends its episode (1 - 0.5); step 1 bootstraps from next_value.
        # env 1: step 1 ends its episode (1 - 0.25); step 0 = 1 + 0.25 - 0.5 + 0.75.
        assert advantages.tolist() == [[0.5, 1.5], [100.75, 0.75]]


def test_dispatch_uses_kernel_for_cpu_float32_and_torch_otherwise(monkeypatch):
    from operant.trainer.loop import ppo

    calls = []
    monkeypatch.setattr(ppo, "_gae_kernel", lambda *args: calls.append(args))
    rollout = random_rollout(4, 3, seed=1)
    ppo.compute_gae(*rollout, GAMMA, LAM)
    assert len(calls) == 1
    ppo.compute_gae(*(t.double() for t in rollout), GAMMA, LAM)  # another dtype
    ppo.compute_gae(rollout[0].t().contiguous().t(), *rollout[1:], GAMMA, LAM)  # strided
    ppo.compute_gae(*rollout, GAMMA, LAM, advantages=torch.empty(3, 4).t())  # strided out
    assert len(calls) == 1


@pytest.mark.parametrize("path", ["kernel", "torch"])
def test_out_buffers_written_in_place(path):
    rollout = random_rollout(16, 5, seed=2)
    advantages, returns = torch.full((16, 5), np.nan), torch.full((16, 5), np.nan)
    if path == "kernel":
        got_adv, got_ret = compute_gae(*rollout, GAMMA, LAM, advantages=advantages, returns=returns)
    else:
        got_adv, got_ret = _compute_gae_torch(*rollout, GAMMA, LAM, advantages, returns)
    assert got_adv.data_ptr() == advantages.data_ptr()
    assert got_ret.data_ptr() == returns.data_ptr()
    assert_matches_reference(rollout, advantages, returns)


def test_compute_gae_without_out_buffers_allocates_both():
    rollout = random_rollout(8, 4, seed=3)
    advantages, returns = compute_gae(*rollout, GAMMA, LAM)
    assert advantages.shape == returns.shape == (8, 4)
    assert advantages.data_ptr() != returns.data_ptr()
    assert_matches_reference(rollout, advantages, returns)


def bad_shape_cases():
    rewards, values, dones, next_value = random_rollout(6, 4, seed=4)
    yield "values", (rewards, values[:5], dones, next_value)
    yield "dones", (rewards, values, dones[:, :3], next_value)
    yield "next_value", (rewards, values, dones, next_value[:3])
    yield "empty", (rewards[:0], values[:0], dones[:0], next_value)


@pytest.mark.parametrize("name, rollout", list(bad_shape_cases()))
def test_bad_shapes_raise_value_error(name, rollout):
    with pytest.raises(ValueError):
        run_kernel(*rollout)
    with pytest.raises(ValueError):
        _compute_gae_torch(*rollout, GAMMA, LAM)
    with pytest.raises(ValueError):
        compute_gae(*rollout, GAMMA, LAM)


def test_kernel_rejects_bad_out_buffers():
    rollout = random_rollout(6, 4, seed=5)
    rewards = rollout[0]
    with pytest.raises(ValueError, match="advantages must have the shape"):
        gae_kernel(
            *(t.numpy() for t in rollout),
            GAMMA,
            LAM,
            np.empty((6, 5), np.float32),
            np.empty((6, 4), np.float32),
        )
    with pytest.raises(ValueError, match="overlap"):
        out = np.empty((6, 4), np.float32)
        gae_kernel(*(t.numpy() for t in rollout), GAMMA, LAM, out, out)
    with pytest.raises(ValueError, match="overlap"):
        gae_kernel(
            *(t.numpy() for t in rollout), GAMMA, LAM, np.empty((6, 4), np.float32), rewards.numpy()
        )


def test_stacked_actor_critic_equals_two_separate_mlps():
    """The stacked layout is only a layout: rows are exactly two independent MLPs."""
    from operant.trainer.policies.mlp import ActorCritic

    torch.manual_seed(0)
    policy = ActorCritic(4, 3, [16, 8])
    obs = torch.randn(5, 4)

    def mlp(row, width):
        x = obs
        for index, (weight, bias) in enumerate(zip(policy.weights, policy.biases)):
            x = x @ weight[row] + bias[row]
            if index < len(policy.weights) - 1:
                x = torch.tanh(x)
        return x[:, :width]

    logits, values = policy.heads(obs)
    torch.testing.assert_close(logits, mlp(0, 3), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(values, mlp(1, 1)[:, 0], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(policy.value(obs), values, rtol=1e-6, atol=1e-6)
    # Gradients reach the flat buffer; the critic's unused head columns stay exactly zero.
    from operant.trainer.loop.flat import FlatParameters

    flat = FlatParameters(policy)
    flat.zero_grad()
    logprob, entropy, value = policy.evaluate(obs, torch.tensor([0, 1, 2, 0, 1]))
    (logprob.sum() + value.sum() + entropy.sum()).backward()
    assert flat.grad.abs().sum() > 0
    assert policy.weights[-1].grad[1, :, 1:].abs().sum() == 0
    assert policy.weights[0].data_ptr() == flat.param.data_ptr()

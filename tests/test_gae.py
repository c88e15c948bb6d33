"""compute_gae against a plain per-env, per-step reference implementation."""

import numpy as np
import torch

from operant.trainer.ppo import compute_gae


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
    adv, ret = compute_gae(torch.tensor(rewards), torch.tensor(values), torch.tensor(dones),
                           torch.tensor(next_value), 0.97, 0.9)
    np.testing.assert_allclose(adv.numpy(), expected_adv, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ret.numpy(), expected_ret, rtol=1e-12, atol=1e-12)


def test_single_step_episode_is_reward_minus_value():
    rewards = torch.tensor([[1.0]])
    values = torch.tensor([[0.25]])
    adv, ret = compute_gae(rewards, values, torch.tensor([[1.0]]), torch.tensor([100.0]), 0.99, 0.95)
    assert adv.item() == 0.75 and ret.item() == 1.0


def test_writes_into_given_buffer():
    out = torch.zeros(4, 2)
    adv, _ = compute_gae(torch.ones(4, 2), torch.zeros(4, 2), torch.zeros(4, 2),
                         torch.zeros(2), 1.0, 1.0, advantages=out)
    assert adv.data_ptr() == out.data_ptr()
    assert out[:, 0].tolist() == [4.0, 3.0, 2.0, 1.0]


def test_stacked_actor_critic_equals_two_separate_mlps():
    """The stacked layout is only a layout: rows are exactly two independent MLPs."""
    from operant.trainer.policy import ActorCritic

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
    from operant.trainer.policy import FlatParameters

    flat = FlatParameters(policy)
    flat.zero_grad()
    logprob, entropy, value = policy.evaluate(obs, torch.tensor([0, 1, 2, 0, 1]))
    (logprob.sum() + value.sum() + entropy.sum()).backward()
    assert flat.grad.abs().sum() > 0
    assert policy.weights[-1].grad[1, :, 1:].abs().sum() == 0
    assert policy.weights[0].data_ptr() == flat.param.data_ptr()

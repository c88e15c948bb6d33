"""The token encoder's native kernel (operant.trainer.policies.token_encoder) against torch's
operations
(TokenPolicy.encode_torch, autograd): the pooled features and the gradients of both embedding
tables, the token layer's weight and its bias, to float32 rounding, on random tokens with
padding, empty rows, repeated tokens and feature ids past the table's; the same bits from two
calls; the rollout's pass (no argmax) equal to the update's; and the paths the trainer takes
on Grid-v0 are the native ones."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from operant.trainer.policies import token_encoder
from operant.trainer.policies.token import FEATURES, PAD, TokenPolicy

pytestmark = pytest.mark.skipif(token_encoder._native is None, reason="cext not built")


def random_tokens(rows: int, slots: int, seed: int) -> torch.Tensor:
    """Left-packed uint8 tokens: real counts from 0 (empty rows) to every slot, feature ids up
    to 11 (past the table's 8: they share its last rows), few locations and values so that
    tokens repeat within a row."""
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.empty((rows, slots, 3), dtype=torch.uint8)
    for column, high in enumerate((30, 12, 4)):
        tokens[..., column] = torch.randint(0, high, (rows, slots), generator=generator)
    counts = torch.randint(0, slots + 1, (rows,), generator=generator)
    counts[:2] = 0  # empty rows
    counts[2] = slots  # a full row
    if rows > 4 and slots > 1:
        tokens[4, 1] = tokens[4, 0]  # an exact repeat
    tokens[torch.arange(slots) >= counts.unsqueeze(1)] = PAD
    return tokens


def encoder_grads(policy: TokenPolicy, obs: torch.Tensor, encode, seed: int):
    """(pooled, [the four encoder parameters' gradients]) of a random linear function of it."""
    policy.zero_grad()
    pooled = encode(obs)
    weight = torch.randn(pooled.shape, generator=torch.Generator().manual_seed(seed))
    (pooled * weight).sum().backward()
    params = (
        policy.feature_value.weight,
        policy.location.weight,
        policy.token[0].weight,
        policy.token[0].bias,
    )
    return pooled.detach(), [param.grad.clone() for param in params]


def assert_close_to_largest(got: torch.Tensor, want: torch.Tensor, tolerance: float) -> None:
    """Within `tolerance` of the reference's largest element (float32 rounding of sums of up
    to thousands of terms: absolute error grows with the values summed)."""
    scale = max(float(want.abs().max()), 1.0)
    assert float((got - want).abs().max()) <= tolerance * scale


@pytest.mark.parametrize(
    "embed, hidden, rows, slots",
    [(32, 64, 96, 40), (32, 32, 64, 7), (12, 20, 33, 50), (32, 64, 5, 1)],
)
def test_native_matches_torch_outputs_and_gradients(embed, hidden, rows, slots):
    torch.manual_seed(embed + hidden)
    policy = TokenPolicy(5, embed=embed, hidden=hidden)
    obs = random_tokens(rows, slots, seed=rows)
    assert token_encoder.applies(obs, policy.feature_value, policy.location, policy.token[0])
    pooled, grads = encoder_grads(policy, obs, policy.encode, seed=1)
    want_pooled, want_grads = encoder_grads(policy, obs, policy.encode_torch, seed=1)
    torch.testing.assert_close(pooled, want_pooled, rtol=0, atol=1e-5)
    for got, want in zip(grads, want_grads):
        assert_close_to_largest(got, want, 1e-5)
    assert (pooled[:2] == 0).all()  # the empty rows
    # Where a row's token read a feature id past the table's, its gradient is in the last rows.
    assert grads[0][(FEATURES - 1) * 256 :].abs().sum() > 0 or rows < 10


def test_native_gradients_are_as_close_to_float64_as_torchs():
    torch.manual_seed(0)
    policy = TokenPolicy(5)
    obs = random_tokens(256, 40, seed=3)
    ways = policy.encode, policy.encode_torch
    grads, torch_grads = (encoder_grads(policy, obs, way, 2)[1] for way in ways)
    exact = TokenPolicy(5).double()
    exact.load_state_dict(policy.state_dict())
    _, exact_grads = encoder_grads(exact, obs, exact.encode_torch, seed=2)
    for got, reference, want in zip(grads, torch_grads, exact_grads):
        error = float((got.double() - want).abs().max())
        assert error <= 2 * float((reference.double() - want).abs().max()) + 1e-6


def test_two_backward_calls_give_identical_bits():
    torch.manual_seed(0)
    policy = TokenPolicy(5)
    obs = random_tokens(128, 30, seed=5)
    (first_pooled, first), (second_pooled, second) = (
        encoder_grads(policy, obs, policy.encode, 4) for _ in range(2)
    )
    assert torch.equal(first_pooled, second_pooled)
    assert all(torch.equal(a, b) for a, b in zip(first, second))


def test_rollout_pass_equals_the_update_pass():
    """act/value (the kernel's pass without argmax, into the workspace) against heads."""
    torch.manual_seed(0)
    policy = TokenPolicy(7)
    obs = random_tokens(48, 20, seed=7)
    logits, values = policy.heads(obs)
    with torch.inference_mode():
        actions, logprob, acted_values = policy.act(obs, torch.Generator().manual_seed(0))
        value = policy.value(obs)
    logits, values = logits.detach(), values.detach()
    expected = torch.log_softmax(logits, -1).gather(-1, actions.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(acted_values, values)
    torch.testing.assert_close(value, values)
    torch.testing.assert_close(logprob, expected)
    workspace = next(iter(policy._workspaces.values()))
    assert "table" in workspace and "token" not in workspace  # the native pass ran
    torch.testing.assert_close(workspace["pooled"], policy.encode(obs).detach(), rtol=0, atol=0)


def test_torch_path_where_the_kernel_does_not_apply(monkeypatch):
    torch.manual_seed(0)
    policy = TokenPolicy(5)
    obs = random_tokens(16, 10, seed=9)
    strided = obs.transpose(0, 1).contiguous().transpose(0, 1)
    layers = policy.feature_value, policy.location, policy.token[0]
    assert not token_encoder.applies(strided, *layers)
    assert torch.equal(policy.encode(strided), policy.encode_torch(obs))
    with torch.inference_mode():
        native = policy.value(obs).clone()
    # The rollout's torch pass (over every slot, padding masked) on the same workspace.
    monkeypatch.setattr(token_encoder, "applies", lambda *_: False)
    with torch.inference_mode():
        fallback = policy.value(obs)
    assert "token" in next(iter(policy._workspaces.values()))
    torch.testing.assert_close(fallback, native)
    torch.testing.assert_close(fallback, policy.heads(obs)[1].detach())
    policy.double()
    assert policy.encode(obs).dtype == torch.float64


def test_grid_v0_trainer_takes_the_native_path():
    """The update's minibatches (storage rows) and the rollout's observations (the env's
    buffer) both meet `applies`, so Grid-v0 trains and resumes on the kernel."""
    from operant.trainer.config import load_config
    from operant.trainer.loop.train import Trainer

    config = load_config(None, ["env.id=Grid-v0", "env.num_envs=2", "ppo.num_steps=4"])
    trainer = Trainer(config)
    trainer.collect()
    policy = trainer.policy
    assert isinstance(policy, TokenPolicy)
    layers = policy.feature_value, policy.location, policy.token[0]
    minibatch = trainer.storage.obs.reshape(-1, *trainer.storage.obs.shape[2:])[:5]
    assert token_encoder.applies(minibatch, *layers)
    assert type(policy.encode(minibatch).grad_fn).__name__ == "TokenPoolBackward"
    assert all("table" in workspace for workspace in policy._workspaces.values())


def test_the_environment_switch_leaves_the_encoder_to_torch():
    code = "from operant.trainer.policies import token_encoder as t; print(t._native is None)"
    result = subprocess.run(
        [sys.executable, "-c", code],
        env={"OPERANT_TOKEN_NATIVE": "0", "PATH": ""},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert result.stdout.strip() == "True"

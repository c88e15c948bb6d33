"""Categorical sampling (operant.trainer.policies.sampling): the native inversion draws what the
torch
operations draw from the same generator, and the draws follow the policy's probabilities."""

from __future__ import annotations

import pytest
import torch

from operant.trainer.policies.sampling import categorical_workspace, sample_categorical


def _draw(logits: torch.Tensor, native: bool, seed: int):
    rows, count = logits.shape
    workspace = categorical_workspace(rows, count, logits.device)
    actions = torch.empty(rows, dtype=torch.long)
    logprob = torch.empty(rows)
    generator = torch.Generator().manual_seed(seed)
    sample_categorical(logits, workspace, generator, actions, logprob, native=native)
    return actions, logprob


@pytest.mark.parametrize("count", [1, 3, 6, 18])
def test_the_native_inversion_draws_the_torch_paths_actions(count):
    torch.manual_seed(count)
    logits = torch.randn(20_000, count) * 3
    logits[:100] = 0.0  # uniform rows
    logits[100:200, 0] = 80.0  # rows all but certain of one action
    native_actions, native_logprob = _draw(logits, True, seed=5)
    torch_actions, torch_logprob = _draw(logits, False, seed=5)
    # The same uniforms: the same actions but where one falls within rounding of a CDF entry.
    assert int((native_actions != torch_actions).sum()) <= 2
    same = native_actions == torch_actions
    torch.testing.assert_close(native_logprob[same], torch_logprob[same], rtol=1e-5, atol=1e-6)
    assert int(native_actions.min()) >= 0 and int(native_actions.max()) < count


def test_the_native_draws_follow_the_probabilities():
    probabilities = torch.tensor([0.05, 0.15, 0.3, 0.5])
    logits = probabilities.log().expand(200_000, 4).contiguous()
    actions, logprob = _draw(logits, True, seed=11)
    shares = torch.bincount(actions, minlength=4).float() / actions.numel()
    # 200,000 draws: a share's standard error is at most 0.0012.
    torch.testing.assert_close(shares, probabilities, rtol=0, atol=0.006)
    torch.testing.assert_close(logprob, probabilities.log()[actions], rtol=1e-5, atol=1e-6)

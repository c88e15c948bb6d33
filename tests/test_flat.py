"""FlatAdam against torch.optim.Adam's single-tensor path, bit for bit, where its second
moments are zero or subnormal (the floor under its square root, operant.trainer.loop.flat)."""

from __future__ import annotations

import pytest
import torch

from operant.trainer.loop.flat import FlatAdam, _invisible_below


def _gradients(steps: int, size: int) -> list[torch.Tensor]:
    """Gradients with exact zeros (weights whose input never fires), values whose squares
    are subnormal or underflow, and ordinary ones."""
    generator = torch.Generator().manual_seed(7)
    grads = []
    for step in range(steps):
        grad = torch.randn(size, generator=generator)
        grad[: size // 4] = 0.0
        grad[size // 4 : size // 2] *= 1e-21  # squares near 1e-42: subnormal
        grad[size // 2 : size // 2 + 8] = 1e-19 * (step % 3)  # squares around the floor
        grads.append(grad)
    return grads


@pytest.mark.parametrize("eps", [1e-8, 1e-5, 1e-12, 0.0])
def test_flat_adam_matches_torch_adam_bit_for_bit(eps):
    size, steps = 4096, 60
    start = torch.randn(size, generator=torch.Generator().manual_seed(1))
    ours = start.clone().requires_grad_(True)
    theirs = start.clone().requires_grad_(True)
    flat_adam = FlatAdam(ours, lr=1e-3, eps=eps)
    torch_adam = torch.optim.Adam([theirs], lr=1e-3, eps=eps, foreach=False, fused=False)
    for grad in _gradients(steps, size):
        ours.grad = grad.clone()
        theirs.grad = grad.clone()
        flat_adam.step()
        torch_adam.step()
        # Bit for bit (eps = 0 divides 0 by 0 for never-moved weights: NaN on both sides).
        torch.testing.assert_close(ours.detach(), theirs.detach(), rtol=0, atol=0, equal_nan=True)
    moments = torch_adam.state[theirs]["exp_avg_sq"]
    assert torch.equal(flat_adam.exp_avg_sq, moments)
    # The cases the floor is for were there: exact zeros and subnormal moments.
    assert int((moments == 0).sum()) >= size // 4
    assert int(((moments > 0) & (moments < torch.finfo(torch.float32).tiny)).sum()) > 0


def test_floor_is_normal_and_invisible():
    for eps in (1e-8, 1e-5, 1e-3):
        for step in (1, 10, 1000, 10**6):
            b = (1 - 0.999**step) ** 0.5
            floor = _invisible_below(eps, b)
            assert floor is not None and floor >= torch.finfo(torch.float32).tiny
            under = torch.tensor([0.0, 1e-45, floor], dtype=torch.float32)
            eps32 = torch.tensor(eps, dtype=torch.float32)
            assert torch.equal(under.sqrt() / b + eps32, torch.full((3,), float(eps32)))
    # No normal floor exists for eps = 0 or one so small its floor would be subnormal.
    assert _invisible_below(0.0, 1.0) is None
    assert _invisible_below(1e-15, 0.03) is None

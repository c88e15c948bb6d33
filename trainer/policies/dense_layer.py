"""The CNN policy's dense layer (the flattened feature maps times a (out, in) weight) with the
weight transposed into (in, out) first, in both of the policy's paths.

MKL multiplies a row-major batch by a row-major (in, out) matrix (NN) faster than by the
transposed view of nn.Linear's (out, in) weight (NT): for MinAtar's 1024 -> 128 layer on this
VM's Xeon, 113 against 214 us at the rollout's 64 rows and 2.33 against 2.77 ms at a
minibatch's 1,024 (docs/journal/2026-11-22-training-end-to-end.md). The transpose costs a
copy of the weight:
- the rollout (`transposed_for_rollout`) keeps one in its workspace and makes it again only
  when the weight's bytes changed, which it learns by comparing them with the copy it was
  made from (operant.cext.im2col.refresh_transposed: 10 us; once an update they differ);
- the update (`DenseNN`, an autograd Function) transposes the weight each call (torch's
  copy of the transposed view, 0.12-0.16 ms here, about 2x a tiled C loop's speed; the weight
  changed since the last minibatch), and computes the input's and the weight's gradients from
  the weight as it is, the layouts torch's own backward of the NT product uses.
Values agree with nn.Linear's to float32 rounding (tests/test_cnn_policy.py). Elsewhere (other
devices, dtypes, an unbuilt checkout) both fall back to nn.Linear's product.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

try:
    from operant.cext.im2col import refresh_transposed
except ImportError:  # an unbuilt checkout: nn.Linear's product does the same
    refresh_transposed = None


TRANSPOSE_MAX_ELEMENTS = 1 << 20
"""Weights up to this size (4 MB) are transposed; a larger one's copy costs more than the
faster product saves (a 107,584 -> 128 layer over 84x84 frames, 55 MB, made the update about
3x slower than nn.Linear's product)."""


def _applies(weight: torch.Tensor) -> bool:
    return (
        refresh_transposed is not None
        and weight.device.type == "cpu"
        and weight.dtype == torch.float32
        and weight.is_contiguous()
        and weight.numel() <= TRANSPOSE_MAX_ELEMENTS
    )


def transposed_for_rollout(weight: torch.Tensor, copy: torch.Tensor, seen: torch.Tensor):
    """The weight as the (in, out) matrix the rollout's product reads: `copy` (in, out), made
    again only where the weight's bytes differ from `seen` (out, in), the weight it was last
    made from; the transposed view where the copy does not apply. Allocates nothing."""
    if not _applies(weight) or seen.shape != weight.shape or copy.shape != weight.t().shape:
        return weight.t()
    rows, cols = weight.shape
    refresh_transposed(weight.data_ptr(), seen.data_ptr(), copy.data_ptr(), rows, cols)
    return copy


class DenseNN(torch.autograd.Function):
    """x @ weight.T + bias with the weight transposed into a contiguous copy first."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor):
        weight_t = weight.t().contiguous()
        ctx.save_for_backward(x, weight)
        return torch.addmm(bias, x, weight_t)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor):
        x, weight = ctx.saved_tensors
        grad = grads[0]
        grad_x = grad.mm(weight) if ctx.needs_input_grad[0] else None
        grad_weight = _weight_grad(grad, x) if ctx.needs_input_grad[1] else None
        grad_bias = grad.sum(0) if ctx.needs_input_grad[2] else None
        return grad_x, grad_weight, grad_bias


def dense(x: torch.Tensor, layer: nn.Linear) -> torch.Tensor:
    """`layer(x)` for the update: DenseNN where it applies (float32 2-D input on the host)."""
    if not _applies(layer.weight) or layer.bias is None or x.dtype != torch.float32 or x.dim() != 2:
        return layer(x)
    return DenseNN.apply(x, layer.weight, layer.bias)


KBLOCK = 256
"""Rows a block of the weight gradient's sum (0: one product)."""


def _weight_grad(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """grad.T @ x summed over blocks of KBLOCK rows. MKL took longer over 1,024 rows at once
    than over four blocks of 256 accumulated (dense layer of MinAtar's network, 1,024-row
    minibatch, this VM's Xeon: the whole update step 1.049x, and 1.025x with blocks of 128,
    median of nine alternating rounds each; the product alone about 1.1x). The same sum in
    another order."""
    if KBLOCK <= 0 or x.shape[0] <= KBLOCK:
        return grad.t().mm(x)
    out = grad[:KBLOCK].t().mm(x[:KBLOCK])
    for start in range(KBLOCK, x.shape[0], KBLOCK):
        out.addmm_(grad[start : start + KBLOCK].t(), x[start : start + KBLOCK])
    return out

"""The CNN policy's first convolution computed from the frames' nonzero cells
(operant.cext.sparse_conv), for the update (an autograd Function) and the rollout.

MinAtar's frames are 0/1 cells of which 1-8% are set (Breakout: about 33 of 400, most of them
bricks; Seaquest about 12 of 1,000). A dense convolution multiplies every cell's weights
whether it is set or not; walking the set cells and adding their weights to the positions they
reach does a tenth (Breakout) to a hundredth (Seaquest) of that arithmetic and needs no
im2col. The walk's cost grows with the cells set, so frames more than a quarter set
(other image envs) keep torch's dense product: `applies` decides per batch.

Values agree with torch's conv2d to float32 rounding (sums in another order;
tests/test_cnn_policy.py compares outputs and gradients); the frames get no gradient (they are
the observation).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

try:
    from operant.cext import sparse_conv as _native
except ImportError:  # an unbuilt checkout: torch's convolution does the same
    _native = None

# Above this share of nonzero cells the dense product is the faster one: the walk costs about
# k x k x O multiply-adds per set cell, against a dense product's rate several times higher.
DENSITY_LIMIT = 0.25


def applies(frames: torch.Tensor, conv: nn.Conv2d) -> bool:
    """Whether `conv` on `frames` can run here: C-contiguous uint8 frames on the host, a
    float32 host convolution of stride 1 without padding, and few enough cells set."""
    if (
        _native is None
        or frames.dtype != torch.uint8
        or frames.device.type != "cpu"
        or frames.dim() != 4
        or not frames.is_contiguous()
        or conv.weight.dtype != torch.float32
        or conv.weight.device.type != "cpu"
        or conv.bias is None
        or not conv.weight.is_contiguous()
        or not conv.bias.is_contiguous()
        or conv.stride != (1, 1)
        or conv.padding != (0, 0)
        or conv.dilation != (1, 1)
        or conv.groups != 1
        or conv.kernel_size[0] != conv.kernel_size[1]
        or frames.shape[1] != conv.in_channels
        or min(frames.shape[2:]) < conv.kernel_size[0]
    ):
        return False
    cells = frames.numel()
    return cells == 0 or _native.count_nonzero(frames.data_ptr(), cells) <= DENSITY_LIMIT * cells


def _shape(frames: torch.Tensor, weight: torch.Tensor) -> tuple[int, int, int, int, int, int]:
    batch, channels, height, width = frames.shape
    return batch, channels, height, width, int(weight.shape[2]), int(weight.shape[0])


def forward_into(
    frames: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    weight_t: torch.Tensor,
    out: torch.Tensor,
) -> torch.Tensor:
    """ReLU(conv(frames)) into `out`, C-contiguous float32 (B, H', W', O); `weight_t` is
    (C, k, k, O) scratch. For the rollout's workspace: allocates nothing."""
    _native.forward(
        frames.data_ptr(),
        weight.data_ptr(),
        bias.data_ptr(),
        weight_t.data_ptr(),
        out.data_ptr(),
        *_shape(frames, weight),
    )
    return out


class SparseConvReLU(torch.autograd.Function):
    """ReLU(conv2d(frames, weight, bias)) as (B, H', W', O) feature maps (channels-last), with
    the weight's and bias's gradients; `applies` must hold for the frames and convolution."""

    @staticmethod
    def forward(ctx: Any, frames: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor):
        weight = weight.detach().contiguous()
        bias = bias.detach().contiguous()
        batch, channels, height, width, kernel, outs = _shape(frames, weight)
        out = torch.empty((batch, height - kernel + 1, width - kernel + 1, outs))
        weight_t = torch.empty((channels, kernel, kernel, outs))
        forward_into(frames, weight, bias, weight_t, out)
        ctx.save_for_backward(frames, out)
        ctx.conv_shape = (batch, channels, height, width, kernel, outs)
        return out

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor):
        frames, out = ctx.saved_tensors
        batch, channels, height, width, kernel, outs = ctx.conv_shape
        grad = grads[0].contiguous()
        grad_weight = torch.empty((outs, channels, kernel, kernel))
        grad_bias = torch.empty(outs)
        grad_weight_t = torch.empty((channels, kernel, kernel, outs))
        masked = torch.empty(out[0].numel() if batch else 1)
        _native.backward(
            frames.data_ptr(),
            out.data_ptr(),
            grad.data_ptr(),
            grad_weight.data_ptr(),
            grad_bias.data_ptr(),
            grad_weight_t.data_ptr(),
            masked.data_ptr(),
            batch,
            channels,
            height,
            width,
            kernel,
            outs,
        )
        return None, grad_weight, grad_bias


def conv_relu(frames: torch.Tensor, conv: nn.Conv2d) -> torch.Tensor:
    """SparseConvReLU of `conv` on `frames`: (B, H', W', O)."""
    return SparseConvReLU.apply(frames, conv.weight, conv.bias)

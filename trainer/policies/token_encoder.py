"""The token encoder's per-token layer and masked max-pool in one native call
(operant.cext.token_encoder), for the update (an autograd Function) and the rollout.

The token layer is linear in its input, and a token's input is the sum of two embedding rows,
so the kernel computes each table row's product with the layer's weight once per call, when a
token first reads it, and a token then costs one add and the max per hidden unit instead of an
(hidden x embed) product: Grid-v0's windows and MinAtar's frames as tokens read a few dozen to
a few hundred distinct rows a minibatch, against tens of thousands of tokens.

The backward is sparse because max-pooling is: each (row, unit)'s pooled value came from one
token (the first on ties, as torch's CPU max returns), so its gradient reaches that token's two
table rows only, and only where the pooled value is > 0 (relu's gradient at 0 is 0; the zeros
of a row without a real token get none). The tables' gradients are dense (zeros elsewhere), as
nn.Embedding's are: the optimizer is dense Adam over flat buffers.

Values agree with torch's gathers, Linear, ReLU and masked max to float32 rounding (sums in
another order; tests/test_token_encoder.py compares outputs and gradients), and the kernel's
sums run in a fixed order: two calls give the same bits. Padding (0xFF as feature id) is
skipped wherever it is, as torch's mask does. `OPERANT_TOKEN_NATIVE=0` in the environment (read
at import) leaves the encoder to torch, for comparisons.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import nn

try:
    import operant.cext.token_encoder as _native
except ImportError:  # an unbuilt checkout: torch's operations do the same
    _native = None
if os.environ.get("OPERANT_TOKEN_NATIVE", "") == "0":  # torch's path, for comparisons
    _native = None


def _host_float32(*tensors: torch.Tensor) -> bool:
    return all(
        t.dtype == torch.float32 and t.device.type == "cpu" and t.is_contiguous() for t in tensors
    )


def applies(
    obs: torch.Tensor, feature_value: nn.Embedding, location: nn.Embedding, token: nn.Linear
) -> bool:
    """Whether the native kernel can encode `obs` here: C-contiguous uint8 (B, T, 3) tokens on
    the host, float32 contiguous host weights, tables of whole 256-row blocks."""
    return (
        _native is not None
        and obs.dtype == torch.uint8
        and obs.device.type == "cpu"
        and obs.dim() == 3
        and obs.shape[2] == 3
        and obs.is_contiguous()
        and token.bias is not None
        and location.num_embeddings == 256
        and feature_value.num_embeddings % 256 == 0
        and feature_value.embedding_dim == location.embedding_dim == token.in_features
        and _host_float32(feature_value.weight, location.weight, token.weight, token.bias)
    )


def table_rows(features: int) -> int:
    """Rows of the kernel's scratch table (and its flag bytes) for `features` feature ids."""
    return int(_native.table_rows(features))


def _shape(obs: torch.Tensor, fv: torch.Tensor, weight: torch.Tensor) -> tuple[int, ...]:
    hidden, embed = weight.shape
    return obs.shape[0], obs.shape[1], fv.shape[0] // 256, embed, hidden


def _addresses(*tensors: torch.Tensor) -> list[int]:
    return [t.data_ptr() for t in tensors]


def scratch(features: int, embed: int, hidden: int) -> dict[str, torch.Tensor]:
    """The kernel's scratch for one encoder: the weight transposed, the table of row products
    (in the backward, the gradient sums per table row and the bias's, in float64: twice the
    floats and a row more) and its flags."""
    rows = table_rows(features)
    return {
        "weight_t": torch.empty((embed, hidden)),
        "table": torch.empty((rows + 1, 2 * hidden)),
        "flags": torch.empty(rows, dtype=torch.uint8),
    }


def forward_into(
    obs: torch.Tensor,
    weights: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
    work: dict[str, torch.Tensor],
    pooled: torch.Tensor,
    arg: torch.Tensor | None = None,
) -> torch.Tensor:
    """The pooled features (B, H) into `pooled` and, where given, the argmax slots into `arg`
    (B, H) int32; `weights` (feature_value, location, token weight, token bias) as `applies`
    checked them, `work` from `scratch`. Allocates nothing."""
    fv, _, weight, _ = weights
    scratch = work["weight_t"], work["table"], work["flags"]
    _native.forward(
        *_addresses(obs, *weights, *scratch, pooled),
        0 if arg is None else arg.data_ptr(),
        *_shape(obs, fv, weight),
    )
    return pooled


class TokenPool(torch.autograd.Function):
    """max over the row's real tokens of relu(token(feature_value[fv] + location[loc])), with
    the four weights' gradients; `applies` must hold."""

    @staticmethod
    def forward(ctx: Any, obs, fv, loc, weight, bias):
        weights = tuple(t.detach() for t in (fv, loc, weight, bias))
        batch, _, features, embed, hidden = _shape(obs, fv, weight)
        work = scratch(features, embed, hidden)
        pooled = torch.empty((batch, hidden))
        arg = torch.empty((batch, hidden), dtype=torch.int32)
        forward_into(obs, weights, work, pooled, arg)
        ctx.save_for_backward(obs, *weights[:3], pooled, arg)
        ctx.work = work
        return pooled

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor):
        obs, fv, loc, weight, pooled, arg = ctx.saved_tensors
        work, grad = ctx.work, grads[0].contiguous()  # held: the call reads its address
        grad_fv, grad_loc = torch.empty_like(fv), torch.empty_like(loc)
        grad_weight, grad_bias = torch.empty_like(weight), torch.empty(weight.shape[0])
        grads_out = grad_fv, grad_loc, grad_weight, grad_bias
        _native.backward(
            *_addresses(obs, fv, loc, weight, pooled, arg, grad, *grads_out),
            *_addresses(work["table"], work["flags"]),
            *_shape(obs, fv, weight),
        )
        return None, grad_fv, grad_loc, grad_weight, grad_bias


def pool(
    obs: torch.Tensor, feature_value: nn.Embedding, location: nn.Embedding, token: nn.Linear
) -> torch.Tensor:
    """TokenPool of the encoder's layers on `obs`: (B, H)."""
    return TokenPool.apply(obs, feature_value.weight, location.weight, token.weight, token.bias)

"""Drawing discrete actions without allocating: the categorical's CDF inverted at one uniform
per row (`searchsorted`, what `torch.multinomial` does, minus its allocations), through
buffers made once per batch size. Shared by the MLP actor-critic and the token encoder."""

from __future__ import annotations

from typing import Any

import torch

try:
    from operant.cext.sampling import categorical as _native_categorical
except ImportError:  # an unbuilt checkout: the torch operations below do the same
    _native_categorical = None


def categorical_workspace(batch: int, num_actions: int, device: torch.device) -> dict[str, Any]:
    """The buffers `sample_categorical` writes, for `batch` rows (made outside inference mode:
    call inside `torch.inference_mode(False)` or plain grad mode)."""
    return {
        "logits": torch.empty((batch, num_actions), device=device),
        "log_probs": torch.empty((batch, num_actions), device=device),
        "cdf": torch.empty((batch, num_actions), device=device),
        "uniform": torch.empty((batch, 1), device=device),
    }


def sample_categorical(
    logits: torch.Tensor,
    workspace: dict[str, Any],
    generator: torch.Generator | None,
    actions: torch.Tensor,
    logprob: torch.Tensor,
    native: bool = False,
) -> None:
    """One action per row of `logits` (B, A), into `actions` (B,) with its log-probability in
    `logprob` (B,): the categorical's CDF inverted at one uniform per row, through the
    workspace's buffers (nothing allocated)."""
    if native and _native_inverts(logits, workspace["uniform"], actions, logprob):
        uniform = torch.rand((logits.shape[0], 1), generator=generator, out=workspace["uniform"])
        rows, count = logits.shape
        _native_categorical(
            logits.data_ptr(),
            uniform.data_ptr(),
            actions.data_ptr(),
            logprob.data_ptr(),
            rows,
            count,
        )
        return
    log_probs = torch.log_softmax(logits, -1, out=workspace["log_probs"])
    cdf = torch.cumsum(torch.exp(log_probs, out=workspace["cdf"]), -1, out=workspace["cdf"])
    uniform = torch.rand((logits.shape[0], 1), generator=generator, out=workspace["uniform"])
    # A CDF that rounds to just under 1 could place u past its end: clamp to the last.
    index = actions.unsqueeze(-1)
    torch.searchsorted(cdf, uniform, right=True, out=index)
    index.clamp_(max=logits.shape[-1] - 1)
    torch.gather(log_probs, -1, index, out=logprob.unsqueeze(-1))


def _native_inverts(
    logits: torch.Tensor, uniform: torch.Tensor, actions: torch.Tensor, logprob: torch.Tensor
) -> bool:
    """Whether operant.cext.sampling can write these: C-contiguous float32 logits, uniforms
    and log-probabilities and int64 actions, on the host."""
    return (
        _native_categorical is not None
        and logits.device.type == "cpu"
        and logits.dtype == torch.float32
        and uniform.dtype == torch.float32
        and actions.dtype == torch.int64
        and logprob.dtype == torch.float32
        and logits.dim() == 2
        and all(t.is_contiguous() for t in (logits, uniform, actions, logprob))
        and all(t.device.type == "cpu" for t in (uniform, actions, logprob))
    )

"""PPO's loss over a discrete policy's heads in one native call (operant.cext.ppo_loss), for
the torch update of policies that expose `heads` (operant.trainer.policies.HeadsPolicy: the
CNN, the token encoder).

ppo._torch_epoch computes, from `evaluate`'s log-probabilities, entropies and values, the
ratio, the clipped surrogate, the value loss and the entropy bonus with some thirty torch
operations, and autograd runs as many backward: 1.7 ms of a 1,024-row minibatch step whose
arithmetic there is about 0.1 ms. Here one call takes the heads' logits and values and returns
the loss, with its gradient at the logits and values computed in the same pass and handed to
autograd (`_FusedLoss`), and the minibatch's five statistics. The network's own backward (the
heads' layers and below) stays torch's. The same function to float32 rounding
(tests/test_ppo_loss.py holds loss, gradients and statistics to the torch path's).
"""

from __future__ import annotations

from typing import Any

import torch

from operant.trainer.config import PPOConfig
from operant.trainer.policies import HeadsPolicy

try:
    from operant.cext import ppo_loss as _native
except ImportError:  # an unbuilt checkout: the torch path computes the same
    _native = None


def applies(policy: Any, obs: torch.Tensor) -> bool:
    """Whether the fused loss serves this policy's update: its heads on the host."""
    return _native is not None and isinstance(policy, HeadsPolicy) and obs.device.type == "cpu"


class _FusedLoss(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, values: torch.Tensor, *rest: Any):
        config, data, moments, sums = rest
        logits = logits.detach().contiguous()
        values = values.detach().contiguous()
        actions, old_logp, advantages, returns, old_values = data
        dlogits = torch.empty_like(logits)
        dvalues = torch.empty_like(values)
        _native.loss(
            logits.data_ptr(),
            values.data_ptr(),
            actions.data_ptr(),
            old_logp.data_ptr(),
            advantages.data_ptr(),
            returns.data_ptr(),
            old_values.data_ptr(),
            logits.shape[0],
            logits.shape[1],
            config.clip_coef,
            config.vf_coef,
            config.ent_coef,
            config.clip_vloss,
            config.norm_adv,
            None if moments is None else (float(moments[0]), float(moments[1])),
            dlogits.data_ptr(),
            dvalues.data_ptr(),
            sums.data_ptr(),
        )
        ctx.save_for_backward(dlogits, dvalues)
        return sums[0].to(torch.float32)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor):
        dlogits, dvalues = ctx.saved_tensors
        scale = grads[0]
        return dlogits * scale, dvalues * scale, None, None, None, None


def losses(
    config: PPOConfig,
    logits: torch.Tensor,
    values: torch.Tensor,
    batch: tuple[torch.Tensor, ...],
    moments: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The minibatch's loss (a 0-d tensor autograd differentiates back into the heads) and its
    statistics (policy loss, value loss, entropy, approx KL, clip fraction) as float32.
    `batch`: the minibatch's actions, old log-probabilities, advantages, returns and old
    values; `moments`: the (mean, std) to normalise advantages with, or None for the rows'
    own."""
    actions, old_logp, advantages, returns, old_values = batch
    data = (
        actions.to(torch.int64).contiguous(),
        *(tensor.to(torch.float32).contiguous() for tensor in (old_logp, advantages)),
        *(tensor.to(torch.float32).contiguous() for tensor in (returns, old_values)),
    )
    sums = torch.empty(6, dtype=torch.float64)
    loss = _FusedLoss.apply(logits, values, config, data, moments, sums)
    return loss, sums[1:].to(torch.float32)

"""PPO's loss over a discrete policy's heads in one native call (operant.cext.ppo_loss), for
the torch update of policies that expose `heads` (operant.trainer.policies.registry.HeadsPolicy: the
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

from typing import Any, TypeGuard

import torch

from operant.trainer.config import PPOConfig
from operant.trainer.loop.flat import FlatAdam, FlatParameters
from operant.trainer.loop.fused import adam_arguments
from operant.trainer.policies.registry import HeadsPolicy

try:
    import operant.cext.ppo_loss as _native
    from operant.cext.fused_mlp import clip_adam as _clip_adam
except ImportError:  # an unbuilt checkout: the torch path computes the same
    _native = _clip_adam = None


def applies(policy: Any, device: torch.device) -> bool:
    """Whether the fused loss serves this policy's update: its heads on the host (the rollout's
    `device`)."""
    return _native is not None and isinstance(policy, HeadsPolicy) and device.type == "cpu"


class _FusedLoss(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, values: torch.Tensor, *rest: Any):
        config, data, moments, sums = rest
        logits = logits.detach().contiguous()
        values = values.detach().contiguous()
        dlogits = torch.empty_like(logits)
        dvalues = torch.empty_like(values)
        _call(config, logits, values, data, moments, dlogits, dvalues, sums, 0)
        ctx.save_for_backward(dlogits, dvalues)
        return sums[0].to(torch.float32)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor):
        dlogits, dvalues = ctx.saved_tensors
        scale = grads[0]
        return dlogits * scale, dvalues * scale, None, None, None, None


class _HeadsLoss(torch.autograd.Function):
    """The actor and critic heads (linear layers on the trunk's features) and the loss over
    them: the heads as one product into (rows, actions + 1), the loss's gradient there from the
    same call as the loss, and in the backward the features' and heads' gradients as three
    products, in place of autograd's two linear layers, split and squeeze (0.37 against
    0.13 ms at 1,024 rows)."""

    @staticmethod
    def forward(ctx: Any, features: torch.Tensor, *rest: Any):
        actor_weight, actor_bias, critic_weight, critic_bias, config, data, moments, sums = rest
        weight = torch.cat((actor_weight.detach(), critic_weight.detach()))
        bias = torch.cat((actor_bias.detach(), critic_bias.detach()))
        features = features.detach()
        heads = torch.addmm(bias, features, weight.t())
        grad_heads = torch.empty_like(heads)
        actions = actor_weight.shape[0]
        _call(
            config,
            heads,
            heads[:, actions:],
            data,
            moments,
            grad_heads,
            grad_heads[:, actions:],
            sums,
            heads.shape[1],
        )
        ctx.save_for_backward(features, weight, grad_heads)
        ctx.actions = actions
        return sums[0].to(torch.float32)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor):
        features, weight, grad_heads = ctx.saved_tensors
        grad_heads = grad_heads * grads[0]
        grad_weight = grad_heads.t().mm(features)
        grad_bias = grad_heads.sum(0)
        a = ctx.actions
        return (
            grad_heads.mm(weight),
            grad_weight[:a],
            grad_bias[:a],
            grad_weight[a:],
            grad_bias[a:],
            None,
            None,
            None,
            None,
        )


def _call(
    config: PPOConfig,
    logits: torch.Tensor,
    values: torch.Tensor,
    data: tuple[torch.Tensor, ...],
    moments: torch.Tensor | None,
    dlogits: torch.Tensor,
    dvalues: torch.Tensor,
    sums: torch.Tensor,
    stride: int,
) -> None:
    actions, old_logp, advantages, returns, old_values = data
    _native.loss(
        logits.data_ptr(),
        values.data_ptr(),
        actions.data_ptr(),
        old_logp.data_ptr(),
        advantages.data_ptr(),
        returns.data_ptr(),
        old_values.data_ptr(),
        logits.shape[0],
        dlogits.shape[1] if stride == 0 else stride - 1,
        config.clip_coef,
        config.vf_coef,
        config.ent_coef,
        config.clip_vloss,
        config.norm_adv,
        None if moments is None else (float(moments[0]), float(moments[1])),
        dlogits.data_ptr(),
        dvalues.data_ptr(),
        sums.data_ptr(),
        stride,
    )


def _data(batch: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    actions, old_logp, advantages, returns, old_values = batch
    floats = (old_logp, advantages, returns, old_values)
    return (
        actions.to(torch.int64).contiguous(),
        *(tensor.to(torch.float32).contiguous() for tensor in floats),
    )


def minibatch_loss(
    config: PPOConfig,
    policy: Any,
    obs: torch.Tensor,
    batch: tuple[torch.Tensor, ...],
    moments: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`losses` of the policy's heads on `obs`; for a policy with `head_features` (the
    features its heads read) and linear `actor` and `critic` heads on them (the CNN, the token
    encoder), the heads computed inside the same Function."""
    trunk = getattr(policy, "head_features", None)
    actor, critic = getattr(policy, "actor", None), getattr(policy, "critic", None)
    if trunk is None or not _linear(actor) or not _linear(critic) or critic.out_features != 1:
        logits, values = policy.heads(obs)
        return losses(config, logits, values, batch, moments)
    sums = torch.empty(6, dtype=torch.float64)
    loss = _HeadsLoss.apply(
        trunk(obs),
        actor.weight,
        actor.bias,
        critic.weight,
        critic.bias,
        config,
        _data(batch),
        moments,
        sums,
    )
    return loss, sums[1:].to(torch.float32)


def _linear(layer: Any) -> TypeGuard[torch.nn.Linear]:
    return isinstance(layer, torch.nn.Linear) and layer.bias is not None


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
    sums = torch.empty(6, dtype=torch.float64)
    loss = _FusedLoss.apply(logits, values, config, _data(batch), moments, sums)
    return loss, sums[1:].to(torch.float32)


def clip_and_step(flat: FlatParameters, optimizer: FlatAdam, config: PPOConfig) -> None:
    """FlatParameters.clip_grad_norm_ and FlatAdam.step in one native pass over the flat
    buffers (fused_mlp's, the MLP's native update's): the same arithmetic elementwise, the
    gradient's norm summed in another order; about 0.05 ms against torch's 0.4 for the CNN's
    132K parameters (ten operations of 0.5 MB each). Where it is not built, torch's."""
    if _clip_adam is None or flat.param.device.type != "cpu":
        flat.clip_grad_norm_(config.max_grad_norm)
        optimizer.step()
        return
    optimizer.steps += 1
    arguments = adam_arguments(optimizer, config)
    _clip_adam(flat.param.detach().numpy(), flat.grad.numpy(), *arguments, optimizer.steps)
    optimizer.step_count.fill_(optimizer.steps)

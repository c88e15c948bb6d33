"""The native path for small MLP actor-critics: which runs take it (`ppo.update_impl`), and
the glue between the trainer's tensors and operant.cext.fused_mlp.

The native path computes, per minibatch, what ppo_update's torch loop computes (the forward,
the clipped loss's gradient, FlatParameters.clip_grad_norm_, FlatAdam.step) and, per rollout
step, what ActorCritic.act computes, in one C call each without the GIL, on the same flat
parameter, gradient and Adam-moment tensors: checkpoints and resume see nothing new. Torch
autograd stays the reference (tests/test_fused_mlp.py holds the two together) and serves every
run the native path does not cover: continuous actions, other policies, accelerators.
Under torchrun the native path runs one call per minibatch instead of per epoch, so that the
gradient's all-reduce sits between the gradient and the clip, as in the torch loop.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from operant.trainer.config import Config, ConfigError, PPOConfig
from operant.trainer.loop.flat import FlatAdam, FlatParameters
from operant.trainer.policies.mlp import ActorCritic

try:
    from operant.cext.fused_mlp import FusedMLP
except ImportError:  # an unbuilt checkout: torch serves every run
    FusedMLP = None


MAX_GAUSSIAN_DIMS = 16  # (cext/trainer/fused_mlp.pyx's act_gaussian keeps them on its stack)


def native_unsupported(policy: Any, device: torch.device) -> str | None:
    """Why the native path cannot train this run, in a few words; None when it can."""
    if FusedMLP is None:
        return "operant.cext.fused_mlp is not built"
    if type(policy) is not ActorCritic:
        return f"it covers the MLP actor-critic, not {type(policy).__name__}"
    if policy.continuous and policy.num_actions > MAX_GAUSSIAN_DIMS:
        return f"it covers Gaussian heads of at most {MAX_GAUSSIAN_DIMS} action dimensions"
    if torch.device(device).type != "cpu":
        return f"it runs on the CPU, not {device}"
    return None


def make_native(
    config: Config,
    policy: Any,
    flat: FlatParameters,
    device: torch.device,
) -> NativeUpdate | None:
    """The native update `ppo.update_impl` chooses for this run, attached to the policy's
    rollout forward, or None for torch; "native" where it cannot run is a ConfigError."""
    impl = config.ppo.update_impl
    if impl == "torch":
        return None
    reason = native_unsupported(policy, device)
    if reason is None:
        native = NativeUpdate(policy, flat, config.ppo)
        policy.attach_native(native.act, native.value)
        return native
    if impl == "native":
        raise ConfigError(
            f'ppo.update_impl = "native" cannot train this run: {reason}; '
            f'use "auto" (native where it can) or "torch"'
        )
    return None


def layer_table(policy: ActorCritic, flat: FlatParameters) -> np.ndarray:
    """(towers x depth, 5) int64: each layer's weight offset, weight row stride, bias offset,
    inputs and outputs, in `flat`'s buffer (shared: one tower whose last layer is the logits
    then the value; separate: the actor's tower, then the critic's, which reads column 0 of
    the stacked head)."""
    offsets = parameter_offsets(flat)
    towers = 1 if policy.shared else 2
    depth = len(policy.weights)
    rows = []
    for tower in range(towers):
        for index, (weight, bias) in enumerate(zip(policy.weights, policy.biases)):
            inputs, outputs = weight.shape[-2], weight.shape[-1]
            used = outputs
            if not policy.shared and index == depth - 1:
                used = policy.num_actions if tower == 0 else 1
            rows.append(
                (
                    offsets[id(weight)] + tower * inputs * outputs,
                    outputs,
                    offsets[id(bias)] + tower * outputs,
                    inputs,
                    used,
                )
            )
    return np.ascontiguousarray(rows, dtype=np.int64)


def adam_arguments(optimizer: FlatAdam, config: PPOConfig) -> tuple[Any, ...]:
    """What the kernel's clip and Adam step take after the parameters and the gradient, in
    its order: FlatAdam's moments, lr, betas and eps, then the clip's max norm."""
    return (
        optimizer.exp_avg.numpy(),
        optimizer.exp_avg_sq.numpy(),
        optimizer.lr,
        optimizer.beta1,
        optimizer.beta2,
        optimizer.eps,
        config.max_grad_norm,
    )


def _plain_rows(obs: torch.Tensor, byte_obs: bool) -> bool:
    """Whether the kernel reads `obs` as it is: (rows, dim) float32, or (rows, ...) uint8 for
    a network over bytes, contiguous, in host memory."""
    if byte_obs:
        return obs.dtype == torch.uint8 and obs.is_contiguous() and obs.device.type == "cpu"
    return (
        obs.dim() == 2
        and obs.dtype == torch.float32
        and obs.is_contiguous()
        and obs.device.type == "cpu"
    )


def _rows(obs: torch.Tensor) -> np.ndarray:
    """`obs` (rows, ...) as the kernel's (rows, dim) numpy view (no copy: it is contiguous)."""
    return (obs if obs.dim() == 2 else obs.view(obs.shape[0], -1)).numpy()


def parameter_offsets(flat: FlatParameters) -> dict[int, int]:
    """Where each parameter (by id) starts in `flat`'s buffer."""
    offsets, at = {}, 0
    for parameter in flat.params:
        offsets[id(parameter)] = at
        at += parameter.numel()
    return offsets


def kernel_views(batch: tuple[torch.Tensor, ...]) -> tuple[np.ndarray, ...]:
    """A rollout's (obs, actions, logprobs, advantages, returns, values) as the kernel's numpy
    views, the observations as (rows, dim)."""
    obs, *rest = (tensor.detach().contiguous() for tensor in batch)
    return (_rows(obs), *(tensor.numpy() for tensor in rest))


def _contiguous(*tensors: torch.Tensor) -> bool:
    return all(tensor.is_contiguous() for tensor in tensors)


class NativeUpdate:
    """One ActorCritic's native kernels, with scratch buffers made once per row count."""

    def __init__(self, policy: ActorCritic, flat: FlatParameters, config: PPOConfig):
        if FusedMLP is None:
            raise RuntimeError("operant.cext.fused_mlp is not built")
        self.flat = flat
        self.towers = 1 if policy.shared else 2
        self.kernel = FusedMLP(
            layer_table(policy, flat),
            self.towers,
            policy.weights[0].shape[-2],
            policy.num_actions,
            policy.activation is torch.relu,
            config.clip_coef,
            config.vf_coef,
            config.ent_coef,
            config.norm_adv,
            config.clip_vloss,
            policy.byte_obs,
            policy.obs_scale,
            config.update_threads,
            flat.param.numel(),
            parameter_offsets(flat)[id(policy.log_std)] if policy.continuous else -1,
        )
        self.continuous = policy.continuous
        self.byte_obs = policy.byte_obs
        self._scratch: dict[int, np.ndarray] = {}
        self._uniform: dict[int, tuple[torch.Tensor, np.ndarray]] = {}
        self._param_at, self._param_view = 0, np.empty(0, np.float32)

    def scratch(self, rows: int) -> np.ndarray:
        """The scratch buffer for calls on `rows` rows (made on first use)."""
        buffer = self._scratch.get(rows)
        if buffer is None:
            if len(self._scratch) >= 4:  # a few row counts at a time: minibatch, rollout
                self._scratch.clear()
            buffer = self._scratch[rows] = np.empty(self.kernel.scratch_floats(rows), np.float32)
        return buffer

    def param(self) -> np.ndarray:
        """The flat parameters as numpy sees them, the view made again only when the tensor
        moved (the view keeps the tensor it was made from alive, so an address seen again
        is the same tensor): the rollout's per-step calls skip detach() and numpy()."""
        param = self.flat.param
        if param.data_ptr() != self._param_at:
            self._param_at, self._param_view = param.data_ptr(), param.detach().numpy()
        return self._param_view

    def epoch(
        self,
        optimizer: FlatAdam,
        config: PPOConfig,
        batch: tuple[torch.Tensor, ...],
        order: torch.Tensor,
        minibatch_size: int,
        keep_stats: bool,
        sums: torch.Tensor,
    ) -> int:
        """ppo_update's minibatch loop for one epoch: `batch` is its (obs, actions,
        logprobs, advantages, returns, values), read in `order`. Steps `optimizer`'s moments
        and count as FlatAdam.step would; returns the minibatches stepped."""
        obs, actions, logprobs, advantages, returns, values = kernel_views(batch)
        steps = self.kernel.epoch(
            obs,
            actions,
            logprobs,
            advantages,
            returns,
            values,
            order.numpy(),
            minibatch_size,
            self.scratch(minibatch_size),
            self.param(),
            self.flat.grad.numpy(),
            *adam_arguments(optimizer, config),
            optimizer.steps,
            keep_stats,
            sums.numpy(),
        )
        optimizer.steps += steps
        optimizer.step_count.fill_(optimizer.steps)
        return steps

    def epoch_group(
        self,
        optimizer: FlatAdam,
        config: PPOConfig,
        batch: tuple[torch.Tensor, ...],
        order: torch.Tensor,
        minibatch_size: int,
        moments: torch.Tensor | None,
        group: Any,
        keep_stats: bool,
        sums: torch.Tensor,
    ) -> int:
        """`epoch` under torchrun: per minibatch, the gradient, its average over the ranks
        (`group.average_`), then the clip and Adam; `moments` (minibatches, 2) are the global
        minibatches' advantage moments (None: each local minibatch's own)."""
        views = kernel_views(batch)
        order_view = order.numpy()
        param = self.param()
        grad = self.flat.grad.numpy()
        scratch = self.scratch(minibatch_size)
        stats = np.zeros(5, dtype=np.float32)
        count = 0
        for start in range(0, order_view.shape[0], minibatch_size):
            stats[:] = 0
            given = None if moments is None else tuple(moments[count].tolist())
            self.kernel.gradient(
                *views,
                order_view[start : start + minibatch_size],
                given,
                scratch,
                param,
                grad,
                stats,
            )
            group.average_(self.flat.grad)
            optimizer.steps += 1
            self.kernel.clip_adam(
                param,
                grad,
                *adam_arguments(optimizer, config),
                optimizer.steps,
            )
            if keep_stats:
                sums += torch.from_numpy(stats)
            count += 1
        optimizer.step_count.fill_(optimizer.steps)
        return count

    def act(
        self,
        obs: torch.Tensor,
        generator: torch.Generator | None,
        out: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    ) -> bool:
        """ActorCritic.act into `out` natively, drawing from `generator` what the torch path
        draws (one uniform per row; a Gaussian's standard normals, into the actions); False,
        having drawn nothing, where it cannot (obs or out not plain contiguous CPU
        float32/int64)."""
        actions, logprobs, values = out
        action_dtype = torch.float32 if self.continuous else torch.int64
        if not (
            _plain_rows(obs, self.byte_obs) and actions.dtype == action_dtype and _contiguous(*out)
        ):
            return False
        if self.continuous:
            actions.normal_(generator=generator)
            self.kernel.act_gaussian(
                _rows(obs),
                actions.numpy(),
                self.scratch(obs.shape[0]),
                self.param(),
                logprobs.numpy(),
                values.numpy(),
            )
            return True
        rows = obs.shape[0]
        uniform = self._uniform.get(rows)
        if uniform is None:
            if len(self._uniform) >= 4:
                self._uniform.clear()
            tensor = torch.empty((rows, 1))
            uniform = self._uniform[rows] = (tensor, tensor.view(-1).numpy())
        torch.rand((rows, 1), generator=generator, out=uniform[0])
        self.kernel.act(
            _rows(obs),
            uniform[1],
            self.scratch(rows),
            self.param(),
            actions.numpy(),
            logprobs.numpy(),
            values.numpy(),
        )
        return True

    def value(
        self,
        obs: torch.Tensor,
        out: torch.Tensor,
        where: np.ndarray | None = None,
        add_to: np.ndarray | None = None,
        scale: float = 0.0,
    ) -> bool:
        """ActorCritic.value into `out` natively (the truncation bootstrap's value pass); with
        `where` (uint8, one flag per row) only the flagged rows, the others set to 0, and
        with `add_to` (float32, one per row) scale * value added to the flagged rows there.
        False where it cannot (obs or out not plain contiguous CPU float32)."""
        if not (
            _plain_rows(obs, self.byte_obs) and out.dtype == torch.float32 and _contiguous(out)
        ):
            return False
        self.kernel.value(
            _rows(obs),
            self.scratch(obs.shape[0]),
            self.param(),
            out.numpy(),
            where,
            add_to,
            scale,
        )
        return True

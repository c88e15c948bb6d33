"""PPO's two computations: advantages (GAE) and the clipped update. Both are pure in the
sense that matters: they read their inputs and return or update only what they are given."""

from __future__ import annotations

from typing import Any, Protocol, cast

import torch
from torch import nn

from operant.shared.record import PPOStatistics
from operant.trainer.config import PPOConfig
from operant.trainer.loop import ppo_loss
from operant.trainer.loop.flat import FlatAdam, FlatParameters
from operant.trainer.loop.storage import Batch

try:
    from operant.cext.gae import gae as _gae_kernel
except ImportError:  # an unbuilt checkout: the torch loop computes the same thing
    _gae_kernel = None


def compute_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    dones: torch.Tensor,
    next_value: torch.Tensor,
    gamma: float,
    gae_lambda: float,
    advantages: torch.Tensor | None = None,
    returns: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over a whole rollout, all envs at once.

    Shapes: rewards, values, dones (T, N); next_value (N,) is V(obs after the last step).
    `dones[t]` means the episode ended at step t (terminated or truncated; a truncated step's
    reward already includes gamma * V(final observation)), so nothing flows across it.
    Returns (advantages, returns), both (T, N); writes into `advantages` and `returns` when
    given. CPU float32 contiguous tensors go to the Cython kernel (operant.cext.gae, on
    zero-copy numpy views, the GIL released); anything else (CUDA, other dtypes) to the torch
    loop, `_compute_gae_torch`. Both compute the same float32 operations in the same order.
    """
    if _gae_kernel is not None and _kernel_can_take(
        rewards, values, dones, next_value, advantages, returns
    ):
        if advantages is None:
            advantages = torch.empty_like(rewards)
        if returns is None:
            returns = torch.empty_like(rewards)
        _gae_kernel(
            rewards.numpy(),
            values.numpy(),
            dones.numpy(),
            next_value.numpy(),
            gamma,
            gae_lambda,
            advantages.numpy(),
            returns.numpy(),
        )
        return advantages, returns
    return _compute_gae_torch(
        rewards, values, dones, next_value, gamma, gae_lambda, advantages, returns
    )


def _kernel_can_take(*tensors: torch.Tensor | None) -> bool:
    """Whether every given tensor is one the Cython kernel reads in place: CPU, float32,
    contiguous, not part of an autograd graph. (A plain loop: this runs on every call.)"""
    for tensor in tensors:
        if tensor is not None and not (
            tensor.is_cpu
            and tensor.dtype == torch.float32
            and tensor.is_contiguous()
            and not tensor.requires_grad
        ):
            return False
    return True


def _compute_gae_torch(
    rewards: torch.Tensor,
    values: torch.Tensor,
    dones: torch.Tensor,
    next_value: torch.Tensor,
    gamma: float,
    gae_lambda: float,
    advantages: torch.Tensor | None = None,
    returns: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """compute_gae as a vectorised torch loop over steps: any device, any float dtype."""
    shapes_ok = (
        rewards.dim() == 2
        and rewards.numel() > 0
        and next_value.shape == rewards.shape[1:]
        and all(
            tensor is None or tensor.shape == rewards.shape
            for tensor in (values, dones, advantages, returns)
        )
    )
    if not shapes_ok:
        raise ValueError(
            f"GAE needs rewards, values, dones, advantages, returns of one (T, N) "
            f"shape, T, N >= 1, and next_value (N,), got {tuple(rewards.shape)}, "
            f"{tuple(values.shape)}, {tuple(dones.shape)}, "
            f"{tuple(next_value.shape)}"
        )
    steps = rewards.shape[0]
    if advantages is None:
        advantages = torch.empty_like(rewards)
    not_done = 1.0 - dones.to(rewards.dtype)
    last = torch.zeros_like(next_value)
    following_value = next_value
    for t in range(steps - 1, -1, -1):
        delta = rewards[t] + gamma * following_value * not_done[t] - values[t]
        last = delta + gamma * gae_lambda * not_done[t] * last
        advantages[t] = last
        following_value = values[t]
    if returns is None:
        return advantages, advantages + values
    torch.add(advantages, values, out=returns)
    return advantages, returns


class UpdatePath(Protocol):
    """How an epoch's minibatches are stepped: chosen once per run by `update_path`, so that
    `ppo_update` runs its epochs without asking which arithmetic does the work."""

    config: PPOConfig
    minibatch_size: int
    group: Any

    def epoch(
        self,
        batch: Batch,
        order: torch.Tensor,
        moments: torch.Tensor | None,
        keep_stats: bool,
        sums: torch.Tensor,
    ) -> int:
        """Step the minibatches of `batch` taken in `order`; add their statistics to `sums`
        when `keep_stats`; return how many were stepped."""
        ...


class Evaluates(Protocol):
    """What the torch update calls on a policy beside its parameters (the loop's contract,
    operant.trainer.policies.registry): the registry hands out nn.Modules, whose methods the
    type checker cannot see."""

    def evaluate(
        self, obs: torch.Tensor, actions: torch.Tensor, entropy: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """(log-probabilities, entropies or None unless `entropy`, values), with gradients."""
        ...

    def entropy(self, obs: torch.Tensor) -> torch.Tensor:
        """Per-observation entropy."""
        ...


class TorchEpochs:
    """Torch autograd, the reference: the batch gathered in the epoch's order, then each
    minibatch's loss, backward, (the ranks' mean,) clip and Adam. `heads`: the policy's
    heads and PPO's loss in one native call and the clip and Adam in one native pass
    (operant.trainer.loop.ppo_loss), for a HeadsPolicy on the host."""

    def __init__(
        self,
        policy: nn.Module,
        flat: FlatParameters,
        optimizer: FlatAdam,
        config: PPOConfig,
        minibatch_size: int,
        group: Any,
        heads: bool,
    ):
        self.policy, self.flat, self.optimizer, self.config = policy, flat, optimizer, config
        self.minibatch_size, self.group, self.heads = minibatch_size, group, heads

    def epoch(
        self,
        batch: Batch,
        order: torch.Tensor,
        moments: torch.Tensor | None,
        keep_stats: bool,
        sums: torch.Tensor,
    ) -> int:
        permutation = order.to(batch.obs.device)
        # index_select, not tensor[permutation]: the same rows, but torch copies them whole
        # instead of element by element through its advanced-indexing iterator (8,192
        # MinAtar frames: 0.5-0.75 ms against 4.8 ms an epoch).
        gathered = tuple(tensor.index_select(0, permutation) for tensor in batch)
        return _torch_epoch(self, gathered, moments, keep_stats, sums)


class NativeEpochs:
    """The native MLP update (operant.trainer.loop.fused.NativeUpdate): an epoch's minibatch
    steps in one C call, or with ranks one call a minibatch with the all-reduce between the
    gradient and the clip; the same draws, the same arithmetic up to float32 rounding."""

    def __init__(
        self, native: Any, optimizer: FlatAdam, config: PPOConfig, minibatch_size: int, group: Any
    ):
        self.native, self.optimizer, self.config = native, optimizer, config
        self.minibatch_size, self.group = minibatch_size, group

    def epoch(
        self,
        batch: Batch,
        order: torch.Tensor,
        moments: torch.Tensor | None,
        keep_stats: bool,
        sums: torch.Tensor,
    ) -> int:
        args = (self.optimizer, self.config, tuple(batch), order, self.minibatch_size)
        if self.group is None:
            return int(self.native.epoch(*args, keep_stats, sums))
        return int(self.native.epoch_group(*args, moments, self.group, keep_stats, sums))


def update_path(
    policy: nn.Module,
    flat: FlatParameters,
    optimizer: FlatAdam,
    config: PPOConfig,
    minibatch_size: int,
    device: torch.device,
    group: Any = None,
    native: Any = None,
) -> UpdatePath:
    """The update path for this run, chosen once when its policy is built: the native MLP
    update where `native` (make_native's NativeUpdate) serves it and a minibatch has the two
    rows its advantages' std needs; else torch autograd, with the heads' loss native for a
    HeadsPolicy on the host. Under torchrun `group` is the rank's group
    (operant.trainer.distributed.group) and `minibatch_size` its share of a minibatch."""
    if native is not None and minibatch_size > 1:
        return NativeEpochs(native, optimizer, config, minibatch_size, group)
    heads = ppo_loss.applies(policy, device)
    return TorchEpochs(policy, flat, optimizer, config, minibatch_size, group, heads)


def ppo_update(path: UpdatePath, batch: Batch, generator: torch.Generator) -> PPOStatistics:
    """Clipped-surrogate PPO epochs over one flattened batch, stepped by `path`.

    Each epoch takes the batch once in a fresh random order, so minibatches are contiguous
    slices rather than six gathers each. Statistics are computed only where they are
    reported: the last epoch (every epoch when target_kl needs the KL to stop early).

    Returns the last epoch's mean losses and statistics (policy_loss, value_loss, entropy,
    approx_kl, clip_fraction), the batch's explained variance and the epochs run, as
    PPOStatistics (operant.shared.record). A non-finite loss shows up as non-finite
    parameters, which the caller checks after every update (Trainer.check_finite).

    Under torchrun (`path.group`) the batch is this rank's share: every minibatch's gradient
    is averaged over the ranks before it is clipped and applied, and advantages are
    normalised with the global minibatch's statistics. The statistics returned are this
    rank's (the record averages them over the ranks), except with target_kl, whose early stop
    must be every rank's: then they are averaged here, every epoch.
    """
    config, group, size = path.config, path.group, path.minibatch_size
    rows = batch.obs.shape[0]
    sums = torch.zeros(5, device=batch.obs.device)
    count = epochs_run = 0
    # Several ranks and every epoch run (no target_kl): the epochs' orders are drawn up
    # front (the same draws, in the same order), so that one all-reduce gives every epoch's
    # advantage moments: one collective per update instead of one per epoch.
    orders = (
        [torch.randperm(rows, generator=generator) for _ in range(config.update_epochs)]
        if group is not None and config.target_kl is None
        else None
    )
    normalise = group is not None and config.norm_adv
    planned = None
    if orders is not None and normalise:
        planned = _global_moments(batch.advantages, orders, size, group)
    for epoch in range(config.update_epochs):
        keep_stats = config.target_kl is not None or epoch == config.update_epochs - 1
        order = orders[epoch] if orders is not None else torch.randperm(rows, generator=generator)
        sums.zero_()
        moments = (
            planned[epoch]
            if planned is not None
            else _global_moments(batch.advantages, [order], size, group)[0]
            if normalise
            else None
        )
        count = path.epoch(batch, order, moments, keep_stats, sums)
        epochs_run += 1
        if group is not None and keep_stats and config.target_kl is not None:
            # target_kl's stop must be every rank's; otherwise the ranks' statistics are
            # averaged with the update's record (operant.trainer.loop.update_record).
            group.average_(sums, "the update statistics' all-reduce")
        if config.target_kl is not None and float(sums[3]) / count > config.target_kl:
            break
    return _statistics(sums / count, batch.returns, batch.values, epochs_run)


def _torch_epoch(
    path: TorchEpochs,
    epoch_batch: tuple[torch.Tensor, ...],
    moments: torch.Tensor | None,
    keep_stats: bool,
    sums: torch.Tensor,
) -> int:
    """One epoch's minibatch steps through torch autograd (the reference), over the batch
    already gathered in the epoch's order; adds the statistics to `sums` when `keep_stats`.
    With `path.heads` (a HeadsPolicy on the host: the CNN, the token encoder) the loss, its
    gradient at the heads, the clip and Adam are native calls (operant.trainer.loop.ppo_loss),
    and the entropy statistic is the minibatch's before its step, as the native MLP update
    reports it. Returns the minibatches stepped."""
    flat, optimizer, config = path.flat, path.optimizer, path.config
    policy = cast(Evaluates, path.policy)  # (the loop's contract: the registry's docstring)
    minibatch_size, group = path.minibatch_size, path.group
    e_obs, e_actions, e_logprobs, e_advantages, e_returns, e_values = epoch_batch
    need_entropy_grad = config.ent_coef > 0
    fused = path.heads
    count = 0
    for start in range(0, e_obs.shape[0], minibatch_size):
        mb = slice(start, start + minibatch_size)
        if fused:  # the loss over the heads in one native call (operant.trainer.loop.ppo_loss)
            rest = (e_actions[mb], e_logprobs[mb], e_advantages[mb], e_returns[mb], e_values[mb])
            moment = None if moments is None else moments[count]
            loss, statistics = ppo_loss.minibatch_loss(config, policy, e_obs[mb], rest, moment)
            _step(flat, optimizer, config, loss, group, native=True)
            if keep_stats:
                sums += statistics
            count += 1
            continue
        logprob, entropy, value = policy.evaluate(
            e_obs[mb], e_actions[mb], entropy=need_entropy_grad
        )
        log_ratio = logprob - e_logprobs[mb]
        ratio = log_ratio.exp()
        policy_loss, value_loss = _losses(
            config,
            ratio,
            e_advantages[mb],
            value,
            e_returns[mb],
            e_values[mb],
            None if moments is None else moments[count],
        )
        loss = policy_loss + config.vf_coef * value_loss
        if need_entropy_grad:  # then `evaluate` returned the entropies
            loss = loss - config.ent_coef * cast(torch.Tensor, entropy).mean()
        _step(flat, optimizer, config, loss, group)
        if keep_stats:
            with torch.no_grad():
                if entropy is None:
                    entropy = policy.entropy(e_obs[mb])
                sums += _minibatch_statistics(
                    config, policy_loss, value_loss, entropy, ratio, log_ratio
                )
        count += 1
    return count


def _step(
    flat: FlatParameters,
    optimizer: FlatAdam,
    config: PPOConfig,
    loss: torch.Tensor,
    group: Any,
    native: bool = False,
) -> None:
    """The minibatch's gradient (averaged over the ranks), clipped and applied; `native`: the
    clip and Adam in one native pass (ppo_loss.clip_and_step), for the fused-loss path."""
    flat.zero_grad()
    loss.backward()
    if group is not None:
        group.average_(flat.grad)
    if native:
        ppo_loss.clip_and_step(flat, optimizer, config)
        return
    flat.clip_grad_norm_(config.max_grad_norm)
    optimizer.step()


def _losses(
    config: PPOConfig,
    ratio: torch.Tensor,
    mb_advantages: torch.Tensor,
    value: torch.Tensor,
    mb_returns: torch.Tensor,
    mb_values: torch.Tensor,
    moments: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One minibatch's clipped surrogate (policy) loss and its (optionally clipped) value loss.
    `moments`: the (mean, std) to normalise advantages with, where they are the global
    minibatch's (several ranks); None: this minibatch's own."""
    if config.norm_adv:
        if moments is None:
            mb_advantages = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std() + 1e-8)
        else:
            mb_advantages = (mb_advantages - moments[0]) / (moments[1] + 1e-8)
    policy_loss = torch.max(
        -mb_advantages * ratio,
        -mb_advantages * ratio.clamp(1 - config.clip_coef, 1 + config.clip_coef),
    ).mean()
    if config.clip_vloss:
        unclipped = (value - mb_returns) ** 2
        clipped_value = mb_values + (value - mb_values).clamp(-config.clip_coef, config.clip_coef)
        value_loss = 0.5 * torch.max(unclipped, (clipped_value - mb_returns) ** 2).mean()
    else:
        value_loss = 0.5 * ((value - mb_returns) ** 2).mean()
    return policy_loss, value_loss


def _global_moments(
    advantages: torch.Tensor, orders: list[torch.Tensor], minibatch_size: int, group: Any
) -> torch.Tensor:
    """(epochs, minibatches, 2): for each epoch's order, each global minibatch's advantage
    mean and standard deviation (with Bessel's correction, as torch.std), the global
    minibatch being every rank's local one at the same position: one all-reduce of their
    sums and sums of squares, in float64."""
    local = torch.stack([advantages.detach()[order] for order in orders]).to(torch.float64)
    local = local.reshape(len(orders), -1, minibatch_size)
    sums = torch.stack([local.sum(2), (local * local).sum(2)], dim=2)
    group.sum_(sums, "the advantage statistics' all-reduce")
    count = minibatch_size * group.world_size
    mean = sums[..., 0] / count
    variance = (sums[..., 1] - count * mean * mean) / (count - 1)
    moments = torch.stack([mean, variance.clamp(min=0).sqrt()], dim=2)
    return moments.to(advantages.dtype)


def _minibatch_statistics(
    config: PPOConfig,
    policy_loss: torch.Tensor,
    value_loss: torch.Tensor,
    entropy: torch.Tensor,
    ratio: torch.Tensor,
    log_ratio: torch.Tensor,
) -> torch.Tensor:
    """(policy loss, value loss, entropy, approx KL, clip fraction) of one minibatch."""
    approx_kl = ((ratio - 1) - log_ratio).mean()
    clip_fraction = ((ratio - 1.0).abs() > config.clip_coef).float().mean()
    return torch.stack(
        [policy_loss.detach(), value_loss.detach(), entropy.mean(), approx_kl, clip_fraction]
    )


def _statistics(
    means: torch.Tensor, b_returns: torch.Tensor, b_values: torch.Tensor, epochs_run: int
) -> PPOStatistics:
    """The update's record: the last epoch's mean statistics, the batch's explained variance."""
    policy_loss, value_loss, entropy, approx_kl, clip_fraction = means.tolist()
    variance = b_returns.var()
    explained = (
        float("nan") if variance == 0 else float(1 - (b_returns - b_values).var() / variance)
    )
    return PPOStatistics(
        policy_loss=policy_loss,
        value_loss=value_loss,
        entropy=entropy,
        approx_kl=approx_kl,
        clip_fraction=clip_fraction,
        explained_variance=explained,
        epochs=float(epochs_run),
    )

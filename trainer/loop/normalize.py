"""Running observation and reward normalisation (as Gymnasium's NormalizeObservation and
NormalizeReward wrappers compute them), on tensors, batched over envs.

Statistics are float64 tensors registered as buffers, so they are saved with the model and
restored with it: a policy trained on normalised observations is useless without them.
Nothing here is differentiable (the buffers never require grad), so the per-step calls run
without a grad-mode context of their own: the rollout calls them under inference mode.
"""

from __future__ import annotations

from typing import TypedDict

import torch
from torch import nn

from operant.envs.contract import ObsSpec
from operant.trainer.config import ConfigError


def _normal_tensors() -> torch.inference_mode:
    """Workspaces are made as normal tensors even when the first call is under inference
    mode (the rollout's), so that a later call outside it may still write into them."""
    return torch.inference_mode(False)


class _Like(TypedDict):
    """The dtype and device every workspace of a RunningMeanStd is made with."""

    dtype: torch.dtype
    device: torch.device


class RunningMeanStd(nn.Module):
    """Mean and variance over every sample seen, merged batch by batch (Chan et al.).

    `update` allocates nothing after its first call for a batch shape: every intermediate has
    a workspace tensor, and the batch size is a 0-dim tensor (a Python number in a tensor
    operation would be wrapped in a new tensor each call). The merge is the textbook
    formula's, operation for operation; the batch variance is a two-pass sum of squared
    deviations (equal to torch.var's up to the last bits)."""

    # Buffers (register_buffer), declared so that the type checker reads them as tensors
    # rather than through nn.Module.__getattr__ (Tensor | Module).
    mean: torch.Tensor
    var: torch.Tensor
    count: torch.Tensor

    def __init__(self, shape: tuple[int, ...] = (), epsilon: float = 1e-4):
        super().__init__()
        self.register_buffer("mean", torch.zeros(shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(shape, dtype=torch.float64))
        self.register_buffer("count", torch.tensor(epsilon, dtype=torch.float64))
        self._workspaces: dict[tuple[tuple[int, ...], torch.device], dict[str, torch.Tensor]] = {}

    def _workspace(self, batch: torch.Tensor) -> dict[str, torch.Tensor]:
        key = (tuple(batch.shape), batch.device)
        work = self._workspaces.get(key)
        if work is None:
            like = _Like(dtype=torch.float64, device=self.mean.device)
            with _normal_tensors():
                work = {
                    "batch": torch.empty(batch.shape, **like),
                    **{
                        name: torch.empty(self.mean.shape, **like)
                        for name in ("batch_mean", "batch_var", "delta", "m2", "scratch")
                    },
                    "batch_count": torch.tensor(float(batch.shape[0]), **like),
                    "total": torch.empty((), **like),
                }
            self._workspaces[key] = work
        return work

    def update(self, batch: torch.Tensor) -> None:
        work = self._workspace(batch)
        batch64, count, batch_count, total = (
            work["batch"],
            self.count,
            work["batch_count"],
            work["total"],
        )
        batch_mean, batch_var, delta = work["batch_mean"], work["batch_var"], work["delta"]
        m2, scratch = work["m2"], work["scratch"]
        batch64.copy_(batch)
        # The mean as torch.mean computes it (a sum, then a division by the count), without
        # the scalar tensor torch.mean(out=) allocates for that count.
        torch.sum(batch64, 0, out=batch_mean).div_(batch_count)
        # The population variance in two passes, in place over the widened copy (torch.var
        # allocates for a single column, as the reward statistics are).
        torch.sum(batch64.sub_(batch_mean).square_(), 0, out=batch_var).div_(batch_count)
        torch.sub(batch_mean, self.mean, out=delta)
        torch.add(count, batch_count, out=total)
        # mean += delta * batch_count / total
        torch.mul(delta, batch_count, out=scratch).div_(total)
        self.mean.add_(scratch)
        # var = (var * count + batch_var * batch_count
        #        + delta^2 * count * batch_count / total) / total
        torch.mul(self.var, count, out=m2).addcmul_(batch_var, batch_count)
        torch.mul(delta, delta, out=scratch).mul_(count).mul_(batch_count).div_(total)
        m2.add_(scratch)
        torch.div(m2, total, out=self.var)
        count.copy_(total)


def check_obs_normalizable(obs_spec: ObsSpec, env_id: str) -> None:
    """Refuse normalize.obs for observations that are not floating point (frames, tokens):
    a running mean over pixel or token codes means nothing, and would cost a float copy."""
    if not obs_spec.is_float:
        raise ConfigError(
            f"normalize.obs = true needs floating-point observations, and "
            f"{env_id} has {obs_spec.dtype} {obs_spec.shape} ones: set "
            "normalize.obs = false"
        )


class ObservationNormalizer(nn.Module):
    """(obs - mean) / sqrt(var + eps), clipped to +-clip; statistics updated while training.
    Float observations only (`check_obs_normalizable`), of any per-row shape.

    Returns a workspace tensor per batch shape, overwritten by the next call of that shape:
    use (or copy) the result before normalising the next batch."""

    _epsilon: torch.Tensor  # a buffer (register_buffer), typed as RunningMeanStd's are

    def __init__(self, shape: int | tuple[int, ...], clip: float, epsilon: float = 1e-8):
        super().__init__()
        self.stats = RunningMeanStd((shape,) if isinstance(shape, int) else tuple(shape))
        self.clip = clip
        self.register_buffer(
            "_epsilon", torch.tensor(epsilon, dtype=torch.float64), persistent=False
        )
        self._workspaces: dict[
            tuple[tuple[int, ...], torch.dtype, torch.device], tuple[torch.Tensor, ...]
        ] = {}

    def forward(self, obs: torch.Tensor, update: bool = False) -> torch.Tensor:
        if update:
            self.stats.update(obs)
        key = (tuple(obs.shape), obs.dtype, obs.device)
        work = self._workspaces.get(key)
        if work is None:
            with _normal_tensors():
                work = (
                    torch.empty(obs.shape[1:], dtype=torch.float64, device=obs.device),
                    torch.empty(obs.shape, dtype=torch.float64, device=obs.device),
                    torch.empty_like(obs),
                )
            self._workspaces[key] = work
        scale, normalized, out = work
        torch.add(self.stats.var, self._epsilon, out=scale).rsqrt_()
        # Widened first: an operation mixing float32 and float64 would cast into a temporary.
        normalized.copy_(obs).sub_(self.stats.mean).mul_(scale)
        return out.copy_(normalized.clamp_(-self.clip, self.clip))


class RewardNormalizer(nn.Module):
    """Rewards divided by the running standard deviation of each env's discounted return.

    Like ObservationNormalizer, allocation-free after the first call per shape, and returning
    a workspace tensor."""

    # Buffers (register_buffer), typed as RunningMeanStd's are.
    returns: torch.Tensor
    _gamma: torch.Tensor
    _epsilon: torch.Tensor
    _one: torch.Tensor

    def __init__(self, num_envs: int, gamma: float, clip: float, epsilon: float = 1e-8):
        super().__init__()
        self.stats = RunningMeanStd(())
        self.register_buffer("returns", torch.zeros(num_envs, dtype=torch.float64))
        self.clip = clip
        for name, value in (("_gamma", gamma), ("_epsilon", epsilon), ("_one", 1.0)):
            self.register_buffer(name, torch.tensor(value, dtype=torch.float64), persistent=False)
        self._workspaces: dict[tuple[torch.dtype, torch.device], tuple[torch.Tensor, ...]] = {}

    def forward(self, rewards: torch.Tensor, dones: torch.Tensor) -> torch.Tensor:
        """Normalise one step's rewards (N,); `dones` (N,) ends each env's return after it."""
        key = (rewards.dtype, rewards.device)
        work = self._workspaces.get(key)
        if work is None:
            with _normal_tensors():
                work = (
                    torch.empty_like(self.returns),
                    torch.empty_like(self.stats.var),
                    torch.empty((), dtype=rewards.dtype, device=rewards.device),
                    torch.empty_like(rewards),
                )
            self._workspaces[key] = work
        wide, std, narrow_std, scaled = work
        # float32 inputs widened into float64 workspaces first (a mixed-dtype operation would
        # cast into a temporary); the values are the same as computing in float64 directly.
        self.returns.mul_(self._gamma).add_(wide.copy_(rewards))
        self.stats.update(self.returns)
        wide.copy_(dones)
        self.returns.mul_(torch.sub(self._one, wide, out=wide))
        torch.add(self.stats.var, self._epsilon, out=std).sqrt_()
        # float32 rewards over a 0-dim float64 std compute in float32 (`rewards / std` always
        # did): the std narrowed into a workspace first, or the cast would allocate.
        narrow_std.copy_(std)
        return torch.div(rewards, narrow_std, out=scaled).clamp_(-self.clip, self.clip)

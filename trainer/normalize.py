"""Running observation and reward normalisation (as Gymnasium's NormalizeObservation and
NormalizeReward wrappers compute them), on tensors, batched over envs.

Statistics are float64 tensors registered as buffers, so they are saved with the model and
restored with it: a policy trained on normalised observations is useless without them.
"""

from __future__ import annotations

import torch
from torch import nn


class RunningMeanStd(nn.Module):
    """Mean and variance over every sample seen, merged batch by batch (Chan et al.)."""

    def __init__(self, shape: tuple[int, ...] = (), epsilon: float = 1e-4):
        super().__init__()
        self.register_buffer("mean", torch.zeros(shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(shape, dtype=torch.float64))
        self.register_buffer("count", torch.tensor(epsilon, dtype=torch.float64))

    @torch.no_grad()
    def update(self, batch: torch.Tensor) -> None:
        batch = batch.to(torch.float64)
        batch_mean = batch.mean(0)
        batch_var = batch.var(0, unbiased=False)
        batch_count = batch.shape[0]
        delta = batch_mean - self.mean
        total = self.count + batch_count
        self.mean += delta * batch_count / total
        m2 = self.var * self.count + batch_var * batch_count + delta * delta * self.count * batch_count / total
        self.var.copy_(m2 / total)
        self.count.copy_(total)


class ObservationNormalizer(nn.Module):
    """(obs - mean) / sqrt(var + eps), clipped to +-clip; statistics updated while training."""

    def __init__(self, obs_dim: int, clip: float, epsilon: float = 1e-8):
        super().__init__()
        self.stats = RunningMeanStd((obs_dim,))
        self.clip, self.epsilon = clip, epsilon

    @torch.no_grad()
    def forward(self, obs: torch.Tensor, update: bool = False) -> torch.Tensor:
        if update:
            self.stats.update(obs)
        scale = torch.rsqrt(self.stats.var + self.epsilon)
        normalized = (obs - self.stats.mean) * scale
        return normalized.clamp_(-self.clip, self.clip).to(obs.dtype)


class RewardNormalizer(nn.Module):
    """Rewards divided by the running standard deviation of each env's discounted return."""

    def __init__(self, num_envs: int, gamma: float, clip: float, epsilon: float = 1e-8):
        super().__init__()
        self.stats = RunningMeanStd(())
        self.register_buffer("returns", torch.zeros(num_envs, dtype=torch.float64))
        self.gamma, self.clip, self.epsilon = gamma, clip, epsilon

    @torch.no_grad()
    def forward(self, rewards: torch.Tensor, dones: torch.Tensor) -> torch.Tensor:
        """Normalise one step's rewards (N,); `dones` (N,) ends each env's return after it."""
        self.returns.mul_(self.gamma).add_(rewards)
        self.stats.update(self.returns)
        self.returns.mul_(1.0 - dones.to(torch.float64))
        scaled = rewards / torch.sqrt(self.stats.var + self.epsilon)
        return scaled.clamp_(-self.clip, self.clip).to(rewards.dtype)

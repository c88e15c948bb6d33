"""The actor-critic: separate MLPs for the policy and the value, CleanRL's initialisation.

Sampling and log-probabilities are written out by hand rather than through
torch.distributions: the same arithmetic without argument validation or object churn on the
per-step path.
"""

from __future__ import annotations

import math

import torch
from torch import nn

ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU}


def _layer(inputs: int, outputs: int, std: float) -> nn.Linear:
    layer = nn.Linear(inputs, outputs)
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, 0.0)
    return layer


def mlp(inputs: int, hidden: list[int], outputs: int, activation: str, out_std: float) -> nn.Sequential:
    layers: list[nn.Module] = []
    width = inputs
    for size in hidden:
        layers += [_layer(width, size, math.sqrt(2)), ACTIVATIONS[activation]()]
        width = size
    layers.append(_layer(width, outputs, out_std))
    return nn.Sequential(*layers)


class ActorCritic(nn.Module):
    """Discrete actions: a categorical over `num_actions` logits."""

    def __init__(self, obs_dim: int, num_actions: int, hidden: list[int], activation: str = "tanh"):
        super().__init__()
        self.actor = mlp(obs_dim, hidden, num_actions, activation, out_std=0.01)
        self.critic = mlp(obs_dim, hidden, 1, activation, out_std=1.0)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs).squeeze(-1)

    def act(self, obs: torch.Tensor, generator: torch.Generator | None = None):
        """Sample actions; returns (actions, log-probabilities, values)."""
        logits = self.actor(obs)
        log_probs = torch.log_softmax(logits, dim=-1)
        actions = torch.multinomial(log_probs.exp(), 1, generator=generator).squeeze(-1)
        logprob = log_probs.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
        return actions, logprob, self.value(obs)

    def evaluate(self, obs: torch.Tensor, actions: torch.Tensor):
        """Log-probabilities of `actions`, entropies and values, for the PPO loss."""
        log_probs = torch.log_softmax(self.actor(obs), dim=-1)
        logprob = log_probs.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
        entropy = -(log_probs.exp() * log_probs).sum(-1)
        return logprob, entropy, self.value(obs)

    def greedy(self, obs: torch.Tensor) -> torch.Tensor:
        return self.actor(obs).argmax(-1)

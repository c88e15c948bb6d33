"""The token encoder: the policy "auto" chooses for uint8 (T, 3) token observations
(MettaGrid's format, Grid-v0's rows), registered as "token".

Each token (location, feature id, value) becomes one vector: a learned embedding of the
(feature id, value) pair (values are categories here: object kinds, orientations, coarse
progress; one table of FEATURES x 256 rows) plus a learned embedding of the location byte
(row << 4 | col: 256 rows), then Linear + ReLU. The tokens are pooled by a max over the row's
real tokens (0xFF padding is masked out), and an MLP trunk feeds the actor and critic heads.

Why max-pooling (PufferLib's and MettaGrid's default encoders pool the same way): it is
invariant to the order and number of tokens, as a set encoder must be; unlike a sum, its scale
does not grow with how crowded the window is (a sum would see 5 walls and 50 walls at
different magnitudes, and the token budget truncates crowded windows anyway); unlike a mean,
one resource in an empty window is not diluted by the other tokens. Attention would also
bind tokens to each other, at several times the arithmetic per token for windows this small.

Tokens are left-packed (padding only at the end), so the forward pass first cuts the batch
to its longest real row: a window with 10 tokens out of a budget of 200 costs 10.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from operant.envs.contract import ActSpec, ObsSpec
from operant.trainer.config import Config
from operant.trainer.policies import HeadsPolicy, register_policy

FEATURES = 8
"""Feature ids the value table covers (Grid-v0 uses 0..2); larger ids share the last row set."""
PAD = 0xFF


class TokenPolicy(HeadsPolicy):
    """Per-token embedding, masked max-pool, MLP trunk, actor and critic heads."""

    def __init__(self, num_actions: int, embed: int = 32, hidden: int = 64):
        super().__init__()
        self.num_actions = num_actions
        self.feature_value = nn.Embedding(FEATURES * 256, embed)
        self.location = nn.Embedding(256, embed)
        self.token = nn.Sequential(nn.Linear(embed, hidden), nn.ReLU())
        self.trunk = nn.Sequential(nn.Linear(hidden, hidden), nn.Tanh())
        self.actor = nn.Linear(hidden, num_actions)
        self.critic = nn.Linear(hidden, 1)
        nn.init.orthogonal_(self.actor.weight, 0.01)
        nn.init.zeros_(self.actor.bias)

    def encode(self, obs: torch.Tensor) -> torch.Tensor:
        """(B, T, 3) uint8 tokens -> (B, hidden) pooled features."""
        real = obs[..., 1] != PAD
        used = int(real.sum(-1).max().item()) if obs.shape[0] else 0
        tokens, real = obs[:, : max(used, 1)].long(), real[:, : max(used, 1)]
        feature = tokens[..., 1].clamp(max=FEATURES - 1)
        x = self.feature_value(feature * 256 + tokens[..., 2]) + self.location(tokens[..., 0])
        x = self.token(x).masked_fill(~real.unsqueeze(-1), float("-inf"))
        pooled = x.max(dim=1).values
        return torch.where(torch.isfinite(pooled), pooled, torch.zeros_like(pooled))

    def heads(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.trunk(self.encode(obs))
        return self.actor(x), self.critic(x).squeeze(-1)


def reads_tokens(obs_spec: ObsSpec, act_spec: ActSpec) -> bool:
    """uint8 (T, 3) observations and discrete actions."""
    return (
        obs_spec.dtype == np.uint8
        and len(obs_spec.shape) == 2
        and obs_spec.shape[1] == 3
        and act_spec.discrete
    )


def build_token_policy(config: Config, obs_spec: ObsSpec, act_spec: ActSpec) -> TokenPolicy:
    return TokenPolicy(act_spec.num_actions, hidden=config.policy.hidden_sizes[-1])


register_policy("token", reads_tokens, build_token_policy)

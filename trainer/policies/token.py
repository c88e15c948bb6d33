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

On the host (uint8 tokens, float32 weights) the per-token layer and the masked max-pool, with
their backward, run in one native call (operant.trainer.policies.token_encoder,
cext/trainer/token_encoder.h):
the layer is linear and a token's input is the sum of two table rows, so each table row's
product with the layer's weight is computed once per call and a token costs one add and the
max per unit: 14x torch's minibatch step and 12x the trainer's steps/s on Grid-v0
(docs/benchmarks.md). The backward is sparse because max-pooling is: a (row, unit)'s
gradient reaches only the token that gave its maximum (the first on ties, as torch's CPU max),
and only where that maximum is > 0 (relu's gradient at 0 is 0). Values agree with torch's
operations (`encode_torch`, the reference and the path elsewhere) to float32 rounding, and the
kernel's sums run in a fixed order: resumed runs stay bit-exact.

The torch path cuts the batch to its longest real row first (tokens are left-packed, padding
only at the end): a window with 10 tokens out of a budget of 200 costs 10; the kernel skips
padding wherever it is, at a byte's test per slot. The rollout's pass (`act`, `value`) runs
the kernel without its argmax bookkeeping (or torch's operations over every slot, padding
masked) into a workspace kept per batch shape: nothing is allocated per step after the first.
"""

from __future__ import annotations

from functools import partial
from typing import cast

import numpy as np
import torch
from torch import nn

from operant.envs.contract import ActSpec, ObsSpec
from operant.trainer.config import Config
from operant.trainer.policies import token_encoder
from operant.trainer.policies.registry import WorkspaceHeadsPolicy, register_policy
from operant.trainer.policies.sampling import categorical_workspace

FEATURES = 8
"""Feature ids the value table covers (Grid-v0 uses 0..2); larger ids share the last row set."""
PAD = 0xFF


class TokenPolicy(WorkspaceHeadsPolicy):
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
        self._workspaces: dict[tuple[int, int, torch.device], dict[str, torch.Tensor]] = {}

    def _token_layer(self) -> nn.Linear:
        """`token[0]`, the per-token Linear layer built in __init__ (indexing an nn.Sequential
        is typed as any Module)."""
        return cast(nn.Linear, self.token[0])

    def _trunk_layer(self) -> nn.Linear:
        """`trunk[0]`, the trunk's Linear layer built in __init__."""
        return cast(nn.Linear, self.trunk[0])

    def encode(self, obs: torch.Tensor) -> torch.Tensor:
        """(B, T, 3) uint8 tokens -> (B, hidden) pooled features: the native kernel where it
        applies (operant.trainer.policies.token_encoder), else torch's operations
        (`encode_torch`)."""
        token = self._token_layer()
        if token_encoder.applies(obs, self.feature_value, self.location, token):
            return token_encoder.pool(obs, self.feature_value, self.location, token)
        return self.encode_torch(obs)

    def encode_torch(self, obs: torch.Tensor) -> torch.Tensor:
        """`encode` in torch's operations: the reference, and the path elsewhere (other
        devices and dtypes, an unbuilt checkout)."""
        real = obs[..., 1] != PAD
        used = int(real.sum(-1).max().item()) if obs.shape[0] else 0
        tokens, real = obs[:, : max(used, 1)].long(), real[:, : max(used, 1)]
        feature = tokens[..., 1].clamp(max=FEATURES - 1)
        x = self.feature_value(feature * 256 + tokens[..., 2]) + self.location(tokens[..., 0])
        x = self.token(x).masked_fill(~real.unsqueeze(-1), float("-inf"))
        pooled = x.max(dim=1).values
        return torch.where(torch.isfinite(pooled), pooled, torch.zeros_like(pooled))

    def heads(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.head_features(obs)
        return self.actor(x), self.critic(x).squeeze(-1)

    def head_features(self, obs: torch.Tensor) -> torch.Tensor:
        """The trunk's output, which the actor and critic heads read (PPO's update applies
        the heads itself, inside its loss: operant.trainer.loop.ppo_loss)."""
        return self.trunk(self.encode(obs))

    # -- the rollout path (act, value: WorkspaceHeadsPolicy): no allocation after the first
    # call for a batch shape ---------------------------------------------------------------
    def _workspace(self, obs: torch.Tensor) -> dict[str, torch.Tensor]:
        batch, tokens = obs.shape[0], obs.shape[1]
        key = (batch, tokens, obs.device)
        workspace = self._workspaces.get(key)
        if workspace is None:
            if len(self._workspaces) >= 4:
                self._workspaces.clear()
            hidden = self._trunk_layer().in_features
            with torch.inference_mode(False):
                empty = partial(torch.empty, device=obs.device)
                workspace = {
                    "pooled": empty((batch, hidden)),
                    "trunk": empty((batch, hidden)),
                    "values": empty((batch, 1)),
                    **categorical_workspace(batch, self.num_actions, obs.device),
                }
            self._workspaces[key] = workspace
        return workspace

    def _encoder_buffers(self, obs: torch.Tensor, native: bool) -> dict[str, torch.Tensor]:
        """The encoder's part of the workspace, made on its first call for a shape: the
        kernel's scratch (native), or the torch path's gathered and per-token buffers."""
        embed, hidden = self.location.embedding_dim, self._trunk_layer().in_features
        with torch.inference_mode(False):
            if native:
                return token_encoder.scratch(FEATURES, embed, hidden)
            batch, tokens = obs.shape[0], obs.shape[1]
            empty = partial(torch.empty, device=obs.device)
            return {
                "feature": empty((batch, tokens), dtype=torch.long),
                "location": empty((batch, tokens), dtype=torch.long),
                "pad": empty((batch, tokens), dtype=torch.bool),
                # A tensor, not the int: eq would make a tensor of the int on every call.
                "pad_value": torch.full((), PAD, dtype=torch.uint8, device=obs.device),
                "embed": empty((batch * tokens, embed)),
                "embed_location": empty((batch * tokens, embed)),
                "token": empty((batch * tokens, hidden)),
            }

    def _heads_into(
        self, obs: torch.Tensor, workspace: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`heads` into the workspace: the pooled features by the native kernel without its
        argmax bookkeeping where it applies, else torch's operations over every token slot
        (padding masked, not cut)."""
        token = self._token_layer()
        native = token_encoder.applies(obs, self.feature_value, self.location, token)
        if ("table" if native else "token") not in workspace:
            workspace.update(self._encoder_buffers(obs, native))
        if native:
            weights = (self.feature_value.weight, self.location.weight, token.weight, token.bias)
            pooled = token_encoder.forward_into(obs, weights, workspace, workspace["pooled"])
        else:
            pooled = self._pool_torch_into(obs, workspace)
        trunk = self._trunk_layer()
        x = torch.addmm(trunk.bias, pooled, trunk.weight.t(), out=workspace["trunk"]).tanh_()
        logits = torch.addmm(self.actor.bias, x, self.actor.weight.t(), out=workspace["logits"])
        values = torch.addmm(self.critic.bias, x, self.critic.weight.t(), out=workspace["values"])
        return logits, values.view(-1)

    def _pool_torch_into(
        self, obs: torch.Tensor, workspace: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        """The pooled features in torch's operations, into the workspace."""
        batch, tokens = obs.shape[0], obs.shape[1]
        feature, location = workspace["feature"], workspace["location"]
        # feature * 256 + value, in int64 (location holds the values first: adding uint8 to
        # int64 in place would convert them into a temporary).
        location.copy_(obs[..., 2])
        feature.copy_(obs[..., 1]).clamp_(max=FEATURES - 1).mul_(256).add_(location)
        location.copy_(obs[..., 0])
        x = torch.index_select(
            self.feature_value.weight, 0, feature.view(-1), out=workspace["embed"]
        )
        x.add_(
            torch.index_select(
                self.location.weight, 0, location.view(-1), out=workspace["embed_location"]
            )
        )
        token = self._token_layer()
        hidden = torch.addmm(token.bias, x, token.weight.t(), out=workspace["token"]).relu_()
        hidden = hidden.view(batch, tokens, -1)
        pad = torch.eq(obs[..., 1], workspace["pad_value"], out=workspace["pad"])
        hidden.masked_fill_(pad.unsqueeze(-1), float("-inf"))
        pooled = torch.amax(hidden, dim=1, out=workspace["pooled"])
        pooled.nan_to_num_(nan=0.0, neginf=0.0)  # a row without a real token: zeros
        return pooled


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

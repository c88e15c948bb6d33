"""The policy registry: which network a run trains, chosen from the env's specs.

A policy is registered once, by name, with `register_policy(name, matches, build, reads)`:
`matches(obs_spec, act_spec)` says whether "auto" should choose it for those observations and
actions, `reads(obs_spec, act_spec)` (by default `matches`) whether it can train on them when
named, and `build(config, obs_spec, act_spec)` returns the module (on the CPU; the trainer
moves it). `policy.kind = "auto"` (the default) takes the first registered policy that
matches, in registration order, so the built-in MLP keeps serving flat float32 observations
even after other families register theirs (and frames go to the CNN, tokens to the token
encoder); any other `policy.kind` names one, or a user's network as `module:Name`
(operant.trainer.policies.user). The MLP reads any observation when named: it flattens frames
and tokens, as SB3's MlpPolicy and PureJaxRL's MinAtar agents do.

What the loop needs from a policy module (operant.trainer.loop.train, ppo, evaluate):
- `act(obs, generator, out=(actions, logprobs, values))`: sample, without gradients;
- `value(obs, out=values)`: the critic alone, without gradients;
- `evaluate(obs, actions, entropy=True)`: (log-probabilities, entropies or None, values)
  with gradients, for the PPO loss; `entropy(obs)`; `greedy(obs)` for evaluation;
- parameters that `FlatParameters` can re-home (all of them trainable, on one device).
`obs` arrives in the observation spec's dtype (uint8 frames stay uint8 in the rollout
storage): a policy converts it on the fly. `HeadsPolicy` below implements this contract for
discrete actions from a single `heads(obs)` method, for encoders written elsewhere.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from operant.envs.contract import ActSpec, ObsSpec
from operant.trainer.config import Config, ConfigError
from operant.trainer.policies.mlp import ActorCritic
from operant.trainer.policies.sampling import sample_categorical
from operant.trainer.policies.user import build_user_policy, is_user_policy

AUTO = "auto"


Specs = Callable[[ObsSpec, ActSpec], bool]


@dataclass(frozen=True)
class PolicyEntry:
    name: str
    matches: Specs
    build: Callable[[Config, ObsSpec, ActSpec], nn.Module]
    reads: Specs


POLICIES: dict[str, PolicyEntry] = {}


def register_policy(
    name: str,
    matches: Specs,
    build: Callable[[Config, ObsSpec, ActSpec], nn.Module],
    reads: Specs | None = None,
) -> None:
    """Make `name` choosable as `policy.kind` for specs it `reads` (default: `matches`), and
    by "auto" for specs it `matches`. Registering a name again replaces it (a module imported
    twice registers twice)."""
    if name == AUTO:
        raise ValueError(f"{AUTO!r} is reserved for choosing by the observation spec")
    POLICIES[name] = PolicyEntry(name, matches, build, reads or matches)


def describe(obs_spec: ObsSpec, act_spec: ActSpec) -> str:
    """Specs in the user's words: 'uint8 (2, 8, 8) observations and Discrete(2) actions'."""
    actions = f"Discrete({act_spec.num_actions})" if act_spec.discrete else f"Box{act_spec.shape}"
    return f"{obs_spec.dtype} {obs_spec.shape} observations and {actions} actions"


def choose_policy(kind: str, obs_spec: ObsSpec, act_spec: ActSpec) -> PolicyEntry:
    """The registered policy `kind` names (or "auto" chooses) for these specs; ConfigError
    naming policy.kind when there is none or it does not fit."""
    if is_user_policy(kind):
        return PolicyEntry(kind, _any, build_user_policy, _any)
    if kind == AUTO:
        for candidate in POLICIES.values():
            if candidate.matches(obs_spec, act_spec):
                return candidate
        raise ConfigError(
            f'policy.kind = "auto": no registered policy reads '
            f"{describe(obs_spec, act_spec)} (registered: "
            f"{', '.join(POLICIES)}); register one with "
            "operant.trainer.policies.registry.register_policy"
        )
    entry = POLICIES.get(kind)
    if entry is None:
        raise ConfigError(
            f"policy.kind = {kind!r} is not a registered policy; choose one of: "
            f"{', '.join((AUTO, *POLICIES))}; or a network of yours as module:Name "
            '(docs/envs.md, "Your own network")'
        )
    if not entry.reads(obs_spec, act_spec):
        raise ConfigError(
            f"policy.kind = {kind!r} cannot read {describe(obs_spec, act_spec)}; "
            f'use policy.kind = "auto" or a policy made for them'
        )
    return entry


def _any(obs_spec: ObsSpec, act_spec: ActSpec) -> bool:
    return True


def build_policy(config: Config, obs_spec: ObsSpec, act_spec: ActSpec) -> nn.Module:
    """The module `config.policy.kind` chooses for these specs (CPU)."""
    return choose_policy(config.policy.kind, obs_spec, act_spec).build(config, obs_spec, act_spec)


# --- the built-in MLP ----------------------------------------------------------------------


def _mlp_matches(obs_spec: ObsSpec, act_spec: ActSpec) -> bool:
    return len(obs_spec.shape) == 1 and obs_spec.dtype == np.float32


def _mlp_reads(obs_spec: ObsSpec, act_spec: ActSpec) -> bool:
    """Any float32 or byte observation, flattened (tokens and frames are uint8)."""
    return obs_spec.dtype in (np.float32, np.uint8) and math.prod(obs_spec.shape) > 0


def _build_mlp(config: Config, obs_spec: ObsSpec, act_spec: ActSpec) -> nn.Module:
    return ActorCritic.from_config(
        config.policy,
        math.prod(obs_spec.shape),
        act_spec.num_actions,
        not act_spec.discrete,
        byte_obs=obs_spec.dtype == np.uint8,
        obs_scale=obs_spec.scale,
    )


register_policy("mlp", _mlp_matches, _build_mlp, _mlp_reads)


# --- a base for other encoders -------------------------------------------------------------


class HeadsPolicy(nn.Module):
    """The policy contract for discrete actions, from one method a subclass writes:
    `heads(obs) -> (logits (B, num_actions), values (B,))`, with `obs` in the observation
    spec's dtype. Sampling inverts the categorical's CDF with one uniform per row, as
    ActorCritic does (this path allocates per call: it is for encoders whose forward pass
    dominates anyway)."""

    num_actions: int

    def heads(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    @torch.no_grad()
    def act(
        self,
        obs: torch.Tensor,
        generator: torch.Generator | None = None,
        out: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
    ):
        logits, values = self.heads(obs)
        log_probs = torch.log_softmax(logits, -1)
        cdf = torch.cumsum(log_probs.exp(), -1)
        uniform = torch.rand((obs.shape[0], 1), generator=generator, device=obs.device)
        actions = torch.searchsorted(cdf, uniform, right=True).clamp_(max=self.num_actions - 1)
        logprob = log_probs.gather(-1, actions).squeeze(-1)
        result = (actions.squeeze(-1), logprob, values)
        if out is None:
            return result
        for target, value in zip(out, result):
            target.copy_(value)
        return out

    @torch.no_grad()
    def value(self, obs: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        values = self.heads(obs)[1]
        return values if out is None else out.copy_(values)

    def evaluate(self, obs: torch.Tensor, actions: torch.Tensor, entropy: bool = True):
        logits, values = self.heads(obs)
        log_probs = torch.log_softmax(logits, -1)
        logprob = log_probs.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
        entropies = -(log_probs.exp() * log_probs).sum(-1) if entropy else None
        return logprob, entropies, values

    def entropy(self, obs: torch.Tensor) -> torch.Tensor:
        log_probs = torch.log_softmax(self.heads(obs)[0], -1)
        return -(log_probs.exp() * log_probs).sum(-1)

    def greedy(self, obs: torch.Tensor) -> torch.Tensor:
        return self.heads(obs)[0].argmax(-1)


class WorkspaceHeadsPolicy(HeadsPolicy):
    """A HeadsPolicy whose rollout path allocates nothing once a batch shape was seen: the
    subclass writes `_workspace(obs)` (its buffers for this shape, kept) and
    `_heads_into(obs, workspace) -> (logits, values)`, and sampling runs in the workspace
    (operant.trainer.policies.sampling). The CNN and the token encoder are written this way."""

    def _workspace(self, obs: torch.Tensor) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def _heads_into(
        self, obs: torch.Tensor, workspace: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    # (no_grad as a `with`, not a decorator: the decorator's wrapper kept a few small objects
    # per call alive in the allocation test's traced window.)
    def act(
        self,
        obs: torch.Tensor,
        generator: torch.Generator | None = None,
        out: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
    ):
        """Sample actions: (actions, log-probabilities, values), into `out` when given; every
        intermediate lives in a workspace, so nothing is allocated once this shape was seen."""
        with torch.no_grad():
            workspace = self._workspace(obs)
            logits, values = self._heads_into(obs, workspace)
            if out is None:
                batch = obs.shape[0]
                out = (
                    torch.empty(batch, dtype=torch.long, device=obs.device),
                    torch.empty(batch, device=obs.device),
                    torch.empty(batch, device=obs.device),
                )
            actions, logprob, value_out = out
            value_out.copy_(values)
            # The inversion in one native call (operant.cext.sampling): these policies'
            # rollouts had no bit-for-bit record to keep, as the MLP's torch path has.
            sample_categorical(logits, workspace, generator, actions, logprob, native=True)
            return out

    def value(self, obs: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        with torch.no_grad():
            values = self._heads_into(obs, self._workspace(obs))[1]
            return values.clone() if out is None else out.copy_(values)


# Encoders for other observation specs register themselves when imported; these are built in.
from operant.trainer.policies import (  # noqa: E402, F401  (they register "cnn" and "token")
    cnn,
    token,
)

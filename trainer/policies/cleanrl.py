"""CleanRL's agent under the trainer's policy contract (operant.trainer.policies.registry): what
`policy.kind = "module:Name"` trains when Name is CleanRL-shaped (`get_value`,
`get_action_and_value`; operant.trainer.policies.user builds and checks it)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from operant.envs.contract import ActSpec
from operant.trainer.config import ConfigError


class CleanRLPolicy(nn.Module):
    """The trainer's policy contract over a CleanRL agent (`get_value`, `get_action_and_value`).
    Observations reach it as float32, as CleanRL's loops give them (`torch.Tensor(obs)`; the
    rollout keeps a byte env's bytes). Values come out flat (CleanRL's are (B, 1)). A CleanRL
    agent samples from torch's default generator; `act` lends it the state of the generator
    it is given and takes it back after, so the agent draws from the trainer's generator as a
    built-in policy does (the default's own stream is left as it was), and a resumed run draws
    what the uninterrupted one would have. `greedy` is the agent's own where it has one, else
    for discrete actions the most probable action, found by evaluating each action's
    log-probability."""

    agent: Any  # the user's module (nn.Module's attribute type would hide its methods)

    def __init__(self, agent: nn.Module, act_spec: ActSpec):
        super().__init__()
        self.agent = agent
        self.discrete = act_spec.discrete
        self.num_actions = act_spec.num_actions
        self.has_greedy = act_spec.discrete or callable(getattr(agent, "greedy", None))
        """Whether `greedy` can answer: operant eval's default asks for it."""

    # The checkpoint holds the agent's weights under its own names (no "agent." prefix).
    def state_dict(self, *args: Any, **kwargs: Any) -> Any:
        return self.agent.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict: Any, strict: bool = True, assign: bool = False) -> Any:
        return self.agent.load_state_dict(state_dict, strict=strict, assign=assign)

    def act(
        self,
        obs: torch.Tensor,
        generator: torch.Generator | None = None,
        out: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        with torch.no_grad(), _drawing_from(generator):
            actions, logprobs, _, values = self.agent.get_action_and_value(_as_read(obs))
            result = (actions, logprobs, values.reshape(-1))
        if out is None:
            return result
        for target, value in zip(out, result):
            target.copy_(value)
        return out

    def value(self, obs: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        with torch.no_grad():
            values = self.agent.get_value(_as_read(obs)).reshape(-1)
        return values if out is None else out.copy_(values)

    def evaluate(self, obs: torch.Tensor, actions: torch.Tensor, entropy: bool = True):
        taken = actions.long() if self.discrete else actions
        _, logprobs, entropies, values = self.agent.get_action_and_value(_as_read(obs), taken)
        return logprobs, entropies if entropy else None, values.reshape(-1)

    def entropy(self, obs: torch.Tensor) -> torch.Tensor:
        return self.agent.get_action_and_value(_as_read(obs))[2]

    def greedy(self, obs: torch.Tensor) -> torch.Tensor:
        obs = _as_read(obs)
        own = getattr(self.agent, "greedy", None)
        if callable(own):
            return own(obs)
        if not self.discrete:
            raise ConfigError(
                f"{type(self.agent).__name__} has no greedy(obs) for its continuous actions: "
                "evaluate with --stochastic, or give it a greedy(obs) returning the mean action"
            )
        with torch.no_grad():
            each = torch.empty(obs.shape[0], dtype=torch.long, device=obs.device)
            scores = torch.stack(
                [
                    self.agent.get_action_and_value(obs, each.fill_(action))[1]
                    for action in range(self.num_actions)
                ],
                -1,
            )
        return scores.argmax(-1)


def _as_read(obs: torch.Tensor) -> torch.Tensor:
    """Observations as a CleanRL agent reads them: float32, as its loop's `torch.Tensor(obs)`
    makes them (bytes keep their values: ppo_atari.py's agent divides by 255 itself)."""
    return obs if obs.is_floating_point() else obs.float()


@contextlib.contextmanager
def _drawing_from(generator: torch.Generator | None) -> Iterator[None]:
    """torch's default generator (of its device) playing `generator` for the block: it takes
    the generator's state, and gives it back advanced by what the block drew; the default's
    own state is restored. Nothing where there is no generator. (Four state copies: a tenth
    of what `fork_rng` and a reseed cost a call.)"""
    if generator is None:
        yield
        return
    default = _default_generator(generator.device)
    saved = default.get_state()
    default.set_state(generator.get_state())
    try:
        yield
    finally:
        generator.set_state(default.get_state())
        default.set_state(saved)


def _default_generator(device: torch.device) -> torch.Generator:
    if device.type != "cuda":
        return torch.default_generator
    index = device.index if device.index is not None else torch.cuda.current_device()
    return torch.cuda.default_generators[index]

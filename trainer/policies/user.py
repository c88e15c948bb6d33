"""A user's own network from the command line: `policy.kind = "module:Name"`.

`Name` in `module` (imported as an env's `module:Id` is: from sys.path, else the current
folder) is a class or function called as `Name(observation_space, action_space)` with the
Gymnasium spaces of the rows the policy reads (`spaces_of`), or as CleanRL's `Agent(envs)`
where it takes one argument (`envs.single_observation_space` and `.single_action_space` are
those spaces), returning a torch module that
either
- implements the trainer's policy contract itself (operant.trainer.policies.registry: `act`,
`value`,
  `evaluate`, `entropy`, `greedy`), most simply by subclassing `HeadsPolicy` and writing
  `heads(obs) -> (logits, values)`; or
- is a CleanRL agent: `get_value(x)` and `get_action_and_value(x, action=None) -> (action,
  log_prob, entropy, value)`, as CleanRL's ppo*.py write theirs. `CleanRLPolicy`
  (operant.trainer.policies.cleanrl) adapts it; its weights are saved under the agent's own
  names, so `Agent(...).load_state_dict(torch.load("model.pt")["policy"])` loads a
  checkpoint's policy into the user's class.

The module is built once on a 64-row probe before anything is trained, so an import error,
a missing method or an output of the wrong shape is one line naming `policy.kind`, not a
traceback in the middle of the first update.
"""

from __future__ import annotations

import inspect
import sys
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from operant.envs.contract import ActSpec, ObsSpec
from operant.envs.registry import ModuleNotHere
from operant.trainer.config import Config, ConfigError
from operant.trainer.policies.cleanrl import CleanRLPolicy

CONTRACT = ("act", "value", "evaluate", "entropy", "greedy")
CLEANRL = ("get_action_and_value", "get_value")


class PolicyFailedError(RuntimeError):
    """A user's network raised while the run trained: the message names it and where, the
    exception is its `__cause__`; it ends the run as failed, after that traceback, as a
    user's env's failure does (operant.envs.registry.EnvFailedError)."""

    fails_the_run = True
    culprit = "policy"


def blame(kind: str, error: Exception, parameters_finite: bool) -> PolicyFailedError | None:
    """`error` as the failure of policy.kind's network where its module's code is on the
    traceback (the innermost such frame named); None where it is not (operant's own)."""
    module = sys.modules.get(kind.partition(":")[0])
    path = getattr(module, "__file__", None)
    frames = [
        frame for frame in traceback.extract_tb(error.__traceback__) if frame.filename == path
    ]
    if not frames:
        return None
    where = frames[-1]
    after = (
        ""
        if parameters_finite
        else "; its parameters are no longer finite (NaN or infinity): a learning rate too "
        "high for it, or a non-finite loss (ppo.learning_rate, ppo.max_grad_norm)"
    )
    return PolicyFailedError(
        f"the policy {kind} raised at {where.filename}:{where.lineno} in {where.name}: "
        f"{_said(error)}{after}"
    )


class PolicyModuleNotHere(ConfigError, ModuleNotHere):
    """policy.kind's `module` cannot be found."""


def is_user_policy(kind: str) -> bool:
    """Whether `policy.kind` names a user's `module:Name` rather than a registered policy."""
    return ":" in kind


def spaces_of(obs_spec: ObsSpec, act_spec: ActSpec) -> tuple[spaces.Box, spaces.Space[Any]]:
    """The Gymnasium spaces of one row: its observation as the rollout holds it (shape and
    dtype; bounds the dtype's, 0-255 for byte images, 0-1 for 0/1 frames) and its action."""
    dtype = obs_spec.dtype
    if dtype.kind == "f":
        low, high = -np.inf, np.inf
    elif dtype == np.bool_ or (dtype == np.uint8 and obs_spec.scale == 1.0):
        low, high = 0, 1
    else:
        info = np.iinfo(dtype)
        low, high = info.min, info.max
    observation_space = spaces.Box(low, high, obs_spec.shape, dtype)
    if act_spec.discrete:
        return observation_space, spaces.Discrete(act_spec.num_actions)
    assert act_spec.low is not None and act_spec.high is not None
    return observation_space, spaces.Box(act_spec.low, act_spec.high, act_spec.shape, np.float32)


def load_factory(kind: str) -> Callable[..., Any]:
    """`Name` of `module:Name`; ConfigError naming policy.kind when it cannot be had."""
    from operant.envs.registry import import_env_module, shadowed

    module, _, name = kind.partition(":")
    if not module or not name:
        raise ConfigError(
            f"policy.kind = {kind!r}: a policy of yours is named module:Name "
            '(e.g. "mypolicies:Agent", mypolicies.py in the current folder)'
        )
    try:
        import_env_module(module)
    except ModuleNotFoundError as error:
        if error.name != module:  # the module is here; something it imports is not
            raise ConfigError(
                f"policy.kind = {kind!r}: importing {module} raised {_said(error)}"
            ) from error
        raise PolicyModuleNotHere(
            f"policy.kind = {kind!r}: no module named {module!r} on sys.path or in the "
            "current folder; run this where the module is, or install it"
        ) from None
    except Exception as error:
        raise ConfigError(
            f"policy.kind = {kind!r}: importing {module} raised {_said(error)}"
        ) from error
    factory = getattr(sys.modules[module], name, None)
    if not callable(factory):
        raise ConfigError(
            f"policy.kind = {kind!r}: module {module} has no class or function {name!r}"
            f"{shadowed(module)}"
        )
    return factory


class SpacesOnly:
    """What CleanRL's `Agent(envs)` reads of its vector env: the single env's spaces (a
    policy is built before, and apart from, the envs it will act for)."""

    def __init__(self, observation_space: spaces.Box, action_space: spaces.Space[Any]):
        self.single_observation_space = self.observation_space = observation_space
        self.single_action_space = self.action_space = action_space


def _takes_envs(kind: str, factory: Callable[..., Any]) -> bool:
    """Whether `factory` is called CleanRL's way, with one argument (`Agent(envs)`), rather
    than with the two spaces; ConfigError where it takes neither."""
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # a builtin or extension type: call it with the spaces
        return False
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    parameters = signature.parameters.values()
    required = [p for p in parameters if p.kind in positional and p.default is p.empty]
    if required and required[0].name == "envs" and len(required) > 1:
        names = ", ".join(p.name for p in required)
        raise ConfigError(
            f"policy.kind = {kind!r}: it takes ({names}); operant calls it as CleanRL does, "
            f"Name(envs): give {', '.join(p.name for p in required[1:])} a default"
        )
    if any(p.kind == p.VAR_POSITIONAL for p in parameters) or len(required) == 2:
        return False
    if len(required) == 1:
        return True
    raise ConfigError(
        f"policy.kind = {kind!r}: it takes {len(required)} arguments; operant calls it as "
        "Name(observation_space, action_space), or Name(envs) as CleanRL's Agent"
    )


def build_user_policy(config: Config, obs_spec: ObsSpec, act_spec: ActSpec) -> nn.Module:
    """The module `config.policy.kind` names, built for these specs, adapted to the policy
    contract where it is a CleanRL agent, and checked on a probe batch."""
    kind = config.policy.kind
    factory = load_factory(kind)
    observation_space, action_space = spaces_of(obs_spec, act_spec)
    name = kind.partition(":")[2]
    if _takes_envs(kind, factory):
        call = f"{name}(envs)"
        arguments: tuple[Any, ...] = (SpacesOnly(observation_space, action_space),)
    else:
        call = f"{name}(observation_space, action_space)"
        arguments = (observation_space, action_space)
    try:
        module = factory(*arguments)
    except Exception as error:
        raise ConfigError(f"policy.kind = {kind!r}: {call} raised {_said(error)}") from error
    if not isinstance(module, nn.Module):
        raise ConfigError(
            f"policy.kind = {kind!r}: it returned a {type(module).__name__}, not a torch nn.Module"
        )
    if all(callable(getattr(module, method, None)) for method in CONTRACT):
        policy = module
    elif all(callable(getattr(module, method, None)) for method in CLEANRL):
        policy = CleanRLPolicy(module, act_spec)
    else:
        raise ConfigError(
            f"policy.kind = {kind!r}: {type(module).__name__} has neither "
            f"{'/'.join(CONTRACT)} (subclass operant.trainer.policies.registry.HeadsPolicy and "
            f"write heads(obs)) nor CleanRL's {' and '.join(CLEANRL)}"
        )
    if not any(parameter.requires_grad for parameter in policy.parameters()):
        raise ConfigError(
            f"policy.kind = {kind!r}: {type(module).__name__} has no trainable parameters"
        )
    other = {str(p.dtype) for p in policy.parameters() if p.dtype != torch.float32}
    if other:
        raise ConfigError(
            f"policy.kind = {kind!r}: {type(module).__name__} has {', '.join(sorted(other))} "
            "parameters; operant trains float32 networks (its optimizer keeps them in one "
            "float32 buffer): build it in float32 (no .double())"
        )
    check_outputs(kind, policy, obs_spec, act_spec)
    return policy


def _said(error: BaseException) -> str:
    """'ValueError: its first line' (torch's may go on with a tensor's values)."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0].rstrip(':')}" if text else type(error).__name__


def check_outputs(kind: str, policy: Any, obs_spec: ObsSpec, act_spec: ActSpec) -> None:
    """Run the policy's sampling and evaluation on two zero rows; ConfigError naming the first
    output whose shape is not what the trainer stores."""
    # Enough rows that an action outside the space (3 logits for Discrete(2)) is sampled.
    rows = 64
    obs = torch.from_numpy(np.zeros((rows, *obs_spec.shape), obs_spec.dtype))
    action_shape = (rows, *act_spec.shape)
    training = policy.training
    policy.eval()  # the probe moves no BatchNorm statistics
    try:
        actions, logprobs, values = policy.act(obs)
        if act_spec.discrete and not _actions_in(actions, act_spec.num_actions):
            low, high = float(actions.min()), float(actions.max())
            named = _as_named(policy, "act's actions")
            raise ConfigError(
                f"policy.kind = {kind!r}: {named} for {rows} rows came out from {low:g} to "
                f"{high:g} ({actions.dtype}), expected integers in [0, {act_spec.num_actions}) "
                f"for Discrete({act_spec.num_actions})"
            )
        outputs = {
            "act's actions": (actions, action_shape),
            "act's log-probabilities": (logprobs, (rows,)),
            "act's values": (values, (rows,)),
        }
        logprob, entropies, values = policy.evaluate(obs, actions)
        outputs |= {
            "evaluate's log-probabilities": (logprob, (rows,)),
            "evaluate's entropies": (entropies, (rows,)),
            "evaluate's values": (values, (rows,)),
            "value's values": (policy.value(obs), (rows,)),
        }
    except ConfigError:
        raise
    except Exception as error:
        raise ConfigError(
            f"policy.kind = {kind!r}: a probe batch of {rows} zero observations "
            f"{tuple(obs.shape)} {obs_spec.dtype} raised {_said(error)}"
        ) from error
    finally:
        policy.train(training)
    for what, (tensor, shape) in outputs.items():
        got = tuple(tensor.shape) if isinstance(tensor, torch.Tensor) else type(tensor).__name__
        if got != shape:
            heads = (
                " (HeadsPolicy is for discrete actions)"
                if hasattr(policy, "heads") and not act_spec.discrete
                else ""
            )
            raise ConfigError(
                f"policy.kind = {kind!r}: {_as_named(policy, what)} for {rows} rows came out "
                f"{got}, expected {shape}{heads}"
            )


CLEANRL_NAMES = {
    "act's": "get_action_and_value(x)'s",
    "evaluate's": "get_action_and_value(x, action)'s",
    "value's": "get_value(x)'s",
}


def _as_named(policy: Any, what: str) -> str:
    """An output's name in the user's words: a CleanRL agent's methods, not the contract's."""
    if not isinstance(policy, CleanRLPolicy):
        return what
    method, _, rest = what.partition(" ")
    return f"{CLEANRL_NAMES.get(method, method)} {rest}"


def _actions_in(actions: Any, count: int) -> bool:
    """Whether sampled discrete actions are integers of the action space."""
    if not isinstance(actions, torch.Tensor):
        return True  # its shape check names it
    if actions.dtype.is_floating_point or actions.dtype.is_complex or actions.dtype == torch.bool:
        return False
    return bool(((actions >= 0) & (actions < count)).all())


def train_update(trainer: Any) -> Any:
    """`trainer.train_update()`; where a user's network (policy.kind = "module:Name") raised
    in it, or gave an action the env refuses, that network's failure (PolicyFailedError), not
    operant's crash."""
    from operant.envs.registry import InvalidActionError

    kind = trainer.config.policy.kind
    if not is_user_policy(kind):
        return trainer.train_update()
    try:
        return trainer.train_update()
    except InvalidActionError as error:  # the actions are the user's network's
        raise PolicyFailedError(
            f"the policy {kind} gave an action the env refuses: {error}"
        ) from error
    except Exception as error:
        failure = blame(kind, error, trainer.flat.all_finite())
        if failure is None:
            raise
        raise failure from error

"""The actor-critic: an actor MLP and a critic MLP of the same shape, evaluated together.

Shared (`shared=True`, PufferLib's layout): one trunk, and a last layer whose columns are the
actor's logits then the value — about half the arithmetic for the same widths.

Separate (the default, CleanRL's layout): the two networks are stored stacked — layer l's
weights are one (2, in, out) tensor, actor in row 0 and critic in row 1 — so one batched
matmul (`baddbmm`) evaluates a layer of both. The arithmetic is exactly that of two separate
MLPs (each row only ever multiplies its own weights); what changes is the number of operator
calls, which is what bounds small networks on a CPU. The output layer is max(num_actions, 1)
wide for both: the critic reads column 0, and its other columns get no gradient and stay
zero.

Observations are any rows, flattened: float32 vectors, or byte frames and tokens (`byte_obs`:
uint8 of any shape, as SB3's MlpPolicy and PureJaxRL's MinAtar agents read them), which enter
as float times `obs_scale` (ObsSpec.scale: 1 for MinAtar's 0/1 cells). The rollout converts
them into a workspace buffer; the native path (operant.trainer.loop.fused) reads the bytes as they
are.

Sampling and log-probabilities are written out by hand rather than through
torch.distributions: the same arithmetic without argument validation or object churn on the
per-step path. All parameters live in one flat buffer (`FlatParameters`) so the optimiser,
the gradient clip and the NaN check each touch one tensor (operant.trainer.loop.flat).
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any, cast

import numpy as np
import torch
from torch import nn

from operant.trainer.policies.sampling import sample_categorical

ACTIVATIONS = {"tanh": torch.tanh, "relu": torch.relu}
IN_PLACE = {"tanh": torch.Tensor.tanh_, "relu": torch.Tensor.relu_}
ACTOR, CRITIC = 0, 1


def _orthogonal(inputs: int, outputs: int, std: float) -> torch.Tensor:
    """An (inputs, outputs) weight as nn.Linear(inputs, outputs) with orthogonal init would
    have it, transposed for `x @ W`."""
    weight = torch.empty(outputs, inputs)
    nn.init.orthogonal_(weight, std)
    return weight.t().contiguous()


LOG_2PI = math.log(2 * math.pi)


class ActorCritic(nn.Module):
    """CleanRL's initialisation (orthogonal, sqrt(2) hidden gain, 0.01 actor head, 1.0 critic
    head, zero biases).

    Discrete actions (`continuous=False`): a categorical over `num_actions` logits.
    Continuous actions (`continuous=True`, `num_actions` = action dimensions): a diagonal
    Gaussian whose mean is the actor's output and whose log standard deviation is one learned
    parameter per dimension, independent of the state. Samples are unbounded; the trainer
    clips them to the action space before the env sees them, and PPO's ratio uses the
    unclipped sample (as CleanRL's ppo_continuous_action does).
    """

    def __init__(
        self,
        obs_dim: int,
        num_actions: int,
        hidden: list[int],
        activation: str = "tanh",
        continuous: bool = False,
        log_std_init: float = 0.0,
        shared: bool = False,
        byte_obs: bool = False,
        obs_scale: float = 1.0,
    ):
        super().__init__()
        self.obs_dim = obs_dim
        self.byte_obs = byte_obs
        self.obs_scale = float(obs_scale)
        self.num_actions = num_actions
        self.continuous = continuous
        self.shared = shared
        if continuous:
            self.log_std = nn.Parameter(torch.full((num_actions,), float(log_std_init)))
        self.activation = ACTIVATIONS[activation]
        self.activation_ = IN_PLACE[activation]
        widths = [obs_dim, *hidden]
        weights, biases = [], []
        if shared:
            # One trunk; the last layer is num_actions actor columns then one value column.
            for inputs, outputs in zip(widths[:-1], widths[1:]):
                weights.append(_orthogonal(inputs, outputs, math.sqrt(2)))
                biases.append(torch.zeros(outputs))
            weights.append(
                torch.cat(
                    [_orthogonal(widths[-1], num_actions, 0.01), _orthogonal(widths[-1], 1, 1.0)],
                    dim=1,
                )
            )
            biases.append(torch.zeros(num_actions + 1))
        else:
            out = max(num_actions, 1)
            for inputs, outputs in zip(widths[:-1], widths[1:]):
                actor = _orthogonal(inputs, outputs, math.sqrt(2))
                critic = _orthogonal(inputs, outputs, math.sqrt(2))
                weights.append(torch.stack([actor, critic]))
                biases.append(torch.zeros(2, 1, outputs))
            head = torch.zeros(2, widths[-1], out)
            head[ACTOR] = _orthogonal(widths[-1], num_actions, 0.01)
            head[CRITIC, :, :1] = _orthogonal(widths[-1], 1, 1.0)
            weights.append(head)
            biases.append(torch.zeros(2, 1, out))
        self.weights = nn.ParameterList([nn.Parameter(w) for w in weights])
        self.biases = nn.ParameterList([nn.Parameter(b) for b in biases])
        # Plain tuples for the per-step path: indexing a ParameterList costs more than the
        # layer's arithmetic at these sizes.
        self._layers = tuple(zip(self.weights, self.biases))
        self._last = len(self._layers) - 1
        self._workspaces: dict[tuple[int, torch.device], dict[str, Any]] = {}
        self._native_act: Any = None
        self._native_value: Any = None

    def attach_native(self, native_act: Any, native_value: Any = None) -> None:
        """Serve `act(obs, generator, out)` with `native_act(obs, generator, out)` where it
        returns True (operant.trainer.loop.fused: the same samples from the same uniforms, in one
        C call), and likewise `value(obs, out)` with `native_value(obs, out)`; None detaches
        them."""
        self._native_act = native_act
        self._native_value = native_value

    def __getstate__(self) -> dict[str, Any]:
        # A copy or a pickle is a module of its own: the native act read the original's
        # flat buffer, so it stays behind (the copy samples through torch).
        state = self.__dict__.copy()
        state["_native_act"] = state["_native_value"] = None
        return state

    @classmethod
    def from_config(
        cls,
        config,
        obs_dim: int,
        num_actions: int,
        continuous: bool,
        byte_obs: bool = False,
        obs_scale: float = 1.0,
    ) -> ActorCritic:
        """The network a `PolicyConfig` describes, over `obs_dim` inputs (float32, or bytes
        times `obs_scale` with `byte_obs`)."""
        return cls(
            obs_dim,
            num_actions,
            config.hidden_sizes,
            config.activation,
            continuous=continuous,
            log_std_init=config.log_std_init,
            shared=config.shared,
            byte_obs=byte_obs,
            obs_scale=obs_scale,
        )

    def rows(self, obs: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """Observations (B, ...) as the float (B, obs_dim) rows the layers read: float32
        vectors as they are; byte rows flattened, converted and scaled (into `out` when
        given, the rollout's workspace)."""
        if not self.byte_obs and obs.dim() == 2:
            return obs
        flat = obs.reshape(obs.shape[0], self.obs_dim)
        if not self.byte_obs:
            return flat
        rows = flat.float() if out is None else out.copy_(flat)
        return rows if self.obs_scale == 1.0 else rows.mul_(self.obs_scale)

    def _float(self, obs: torch.Tensor) -> torch.dtype:
        """The dtype of the values and continuous actions computed from `obs`."""
        return torch.float32 if self.byte_obs else obs.dtype

    def heads(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits (B, num_actions), values (B,)) for observations (B, ...)."""
        obs = self.rows(obs)
        if self.shared:
            x = obs
            for index, (weight, bias) in enumerate(self._layers):
                x = torch.addmm(bias, x, weight)
                if index < self._last:
                    x = self.activation(x)
            return x[:, : self.num_actions], x[:, self.num_actions]
        x = obs.unsqueeze(0).expand(2, *obs.shape)
        for index, (weight, bias) in enumerate(self._layers):
            x = torch.baddbmm(bias, x, weight)
            if index < self._last:
                x = self.activation(x)
        return x[ACTOR, :, : self.num_actions], x[CRITIC, :, 0]

    # -- the rollout path: no allocation after the first call for a batch size ---------------
    def _workspace(self, batch: int, device: torch.device) -> dict[str, Any]:
        """Preallocated intermediates for acting on `batch` observations (made once per batch
        size and device, outside any inference mode so that later in-place writes are allowed
        in every grad mode)."""
        key = (batch, device)
        workspace = self._workspaces.get(key)
        if workspace is not None:
            return workspace
        if len(self._workspaces) >= 4:  # a few batch sizes are in use at a time (rollout, eval)
            self._workspaces.clear()
        with torch.inference_mode(False):
            empty = partial(torch.empty, device=device)
            widths = [weight.shape[-1] for weight, _ in self._layers]
            rows = () if self.shared else (2,)
            actions = max(self.num_actions, 1)
            workspace = {
                "layers": [empty((*rows, batch, width)) for width in widths],
                "critic": [empty((batch, width)) for width in widths],
                "logits": empty((batch, actions)),
                "log_probs": empty((batch, actions)),
                "cdf": empty((batch, actions)),
                "uniform": empty((batch, 1)),
                "noise": empty((batch, actions)),
                "std": empty(actions),
                "inv_std": empty(actions),
                "std_offset": empty(actions),
                "half_log_2pi": torch.full((actions,), 0.5 * LOG_2PI, device=device),
                "values": empty(batch),
                "obs": empty((batch, self.obs_dim)),
            }
        self._workspaces[key] = workspace
        return workspace

    def _forward_into(
        self, obs: torch.Tensor, workspace: dict[str, Any]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`heads` computed into the workspace (views of its last layer)."""
        obs = self.rows(obs, workspace["obs"])
        outputs = workspace["layers"]
        x = obs if self.shared else obs.unsqueeze(0).expand(2, *obs.shape)
        for index, (weight, bias) in enumerate(self._layers):
            if self.shared:
                torch.addmm(bias, x, weight, out=outputs[index])
            else:
                torch.baddbmm(bias, x, weight, out=outputs[index])
            x = outputs[index]
            if index < self._last:
                self.activation_(x)
        if self.shared:
            # The logits are the first columns of a wider row: give them rows of their own.
            logits = workspace["logits"].copy_(x[:, : self.num_actions])
            return logits, x[:, self.num_actions]
        return x[ACTOR, :, : self.num_actions], x[CRITIC, :, 0]

    def value_where(
        self,
        obs: torch.Tensor,
        where: np.ndarray,
        out: torch.Tensor,
        add_to: np.ndarray | None = None,
        scale: float = 0.0,
    ) -> bool:
        """The values of the rows flagged in `where` (uint8, one per row) into `out`, 0 in
        the others, and scale * value added to those rows of `add_to` (float32) when given,
        natively (one C call, the flagged rows alone); False, having written nothing, where
        the native path does not serve this call (then use `value`)."""
        native = self._native_value
        return native is not None and native(obs, out, where, add_to, scale)

    def value(self, obs: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """Critic only (separate: the stacked layers restricted to row 1; shared: the whole
        net), written into `out` when given. Call without gradients."""
        native = self._native_value
        if out is not None and native is not None and native(obs, out):
            return out
        with torch.no_grad():
            workspace = self._workspace(obs.shape[0], obs.device)
            if out is None:
                out = torch.empty(obs.shape[0], device=obs.device, dtype=self._float(obs))
            if self.shared:
                return out.copy_(self._forward_into(obs, workspace)[1])
            x = self.rows(obs, workspace["obs"])
            for index, (weight, bias) in enumerate(self._layers):
                layer = workspace["critic"][index]
                torch.addmm(bias[CRITIC], x, weight[CRITIC], out=layer)
                x = layer
                if index < self._last:
                    self.activation_(x)
            return out.copy_(x[:, 0])

    def act(
        self,
        obs: torch.Tensor,
        generator: torch.Generator | None = None,
        out: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
    ):
        """Sample actions; returns (actions, log-probabilities, values), written into `out`
        (three tensors of shapes (B, ...), (B,), (B,)) when given. Nothing is allocated once
        this batch size has been seen: every intermediate lives in a workspace.

        Discrete actions are drawn by inverting the categorical's CDF with one uniform per
        row (`searchsorted`), which is what `torch.multinomial` does, minus its allocations."""
        batch = obs.shape[0]
        native = self._native_act
        if out is not None and native is not None and native(obs, generator, out):
            return out
        with torch.no_grad():
            workspace = self._workspace(batch, obs.device)
            if out is None:
                shape = (batch, self.num_actions) if self.continuous else (batch,)
                out = (
                    torch.empty(
                        shape,
                        device=obs.device,
                        dtype=self._float(obs) if self.continuous else torch.long,
                    ),
                    torch.empty(batch, device=obs.device),
                    torch.empty(batch, device=obs.device),
                )
            actions, logprob, values = out
            logits, value = self._forward_into(obs, workspace)
            values.copy_(value)
            if self.continuous:
                std = torch.exp(self.log_std, out=workspace["std"])
                torch.exp(
                    torch.neg(self.log_std, out=workspace["inv_std"]), out=workspace["inv_std"]
                )
                actions.normal_(generator=generator)
                actions.mul_(std).add_(logits)
                self._gaussian_logprob(logits, actions, out=logprob, workspace=workspace)
                return out
            sample_categorical(logits, workspace, generator, actions, logprob)
            return out

    def _gaussian_logprob(
        self,
        mean: torch.Tensor,
        actions: torch.Tensor,
        out: torch.Tensor | None = None,
        workspace: dict[str, Any] | None = None,
    ) -> torch.Tensor:
        """Diagonal-Gaussian log-density of `actions`; into `out` through the workspace's
        noise buffer when given (then without gradients)."""
        if out is None:
            z = (actions - mean) * torch.exp(-self.log_std)
            return (-0.5 * z * z - self.log_std - 0.5 * LOG_2PI).sum(-1)
        # -(log_std + log(2 pi)/2 + z^2/2), summed: Python scalars would be wrapped in fresh
        # tensors, so the constant is a workspace buffer and the 1/2 a kernel argument.
        work = cast("dict[str, Any]", workspace)  # (`act` gives its workspace with `out`)
        z = torch.sub(actions, mean, out=work["noise"]).mul_(work["inv_std"])
        offset = torch.add(self.log_std, work["half_log_2pi"], out=work["std_offset"])
        torch.addcmul(offset, z, z, value=0.5, out=z)
        return torch.sum(z, -1, out=out).neg_()

    def evaluate(self, obs: torch.Tensor, actions: torch.Tensor, entropy: bool = True):
        """Log-probabilities of `actions`, entropies (None unless `entropy`) and values, for
        the PPO loss."""
        out, values = self.heads(obs)
        if self.continuous:
            entropies = self._gaussian_entropy(out.shape[0]) if entropy else None
            return self._gaussian_logprob(out, actions), entropies, values
        log_probs = torch.log_softmax(out, dim=-1)
        logprob = log_probs.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
        entropies = -(log_probs.exp() * log_probs).sum(-1) if entropy else None
        return logprob, entropies, values

    def _gaussian_entropy(self, batch: int) -> torch.Tensor:
        return (0.5 + 0.5 * LOG_2PI + self.log_std).sum().expand(batch)

    def entropy(self, obs: torch.Tensor) -> torch.Tensor:
        """Per-observation policy entropy."""
        if self.continuous:
            return self._gaussian_entropy(obs.shape[0])
        log_probs = torch.log_softmax(self.heads(obs)[0], dim=-1)
        return -(log_probs.exp() * log_probs).sum(-1)

    def greedy(self, obs: torch.Tensor) -> torch.Tensor:
        """The most likely action: argmax of the logits, or the Gaussian's mean."""
        out = self.heads(obs)[0]
        return out if self.continuous else out.argmax(-1)

"""The actor-critic: an actor MLP and a critic MLP of the same shape, evaluated together.

The two networks are stored stacked — layer l's weights are one (2, in, out) tensor, actor in
row 0 and critic in row 1 — so one batched matmul (`baddbmm`) evaluates a layer of both. The
arithmetic is exactly that of two separate MLPs (each row only ever multiplies its own
weights); what changes is the number of operator calls, which is what bounds small networks
on a CPU. The output layer is max(num_actions, 1) wide for both: the critic reads column 0,
and its other columns get no gradient and stay zero.

Sampling and log-probabilities are written out by hand rather than through
torch.distributions: the same arithmetic without argument validation or object churn on the
per-step path. All parameters live in one flat buffer (`FlatParameters`) so the optimiser,
the gradient clip and the NaN check each touch one tensor.
"""

from __future__ import annotations

import math

import torch
from torch import nn

ACTIVATIONS = {"tanh": torch.tanh, "relu": torch.relu}
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

    def __init__(self, obs_dim: int, num_actions: int, hidden: list[int], activation: str = "tanh",
                 continuous: bool = False, log_std_init: float = 0.0):
        super().__init__()
        self.num_actions = num_actions
        self.continuous = continuous
        if continuous:
            self.log_std = nn.Parameter(torch.full((num_actions,), float(log_std_init)))
        self.activation = ACTIVATIONS[activation]
        widths = [obs_dim, *hidden]
        out = max(num_actions, 1)
        weights, biases = [], []
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

    def heads(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits (B, num_actions), values (B,)) for observations (B, obs_dim)."""
        x = obs.unsqueeze(0).expand(2, *obs.shape)
        for index, (weight, bias) in enumerate(self._layers):
            x = torch.baddbmm(bias, x, weight)
            if index < self._last:
                x = self.activation(x)
        return x[ACTOR, :, :self.num_actions], x[CRITIC, :, 0]

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """Critic only: the same stacked layers restricted to row 1."""
        x = obs
        for index, (weight, bias) in enumerate(self._layers):
            x = torch.addmm(bias[CRITIC], x, weight[CRITIC])
            if index < self._last:
                x = self.activation(x)
        return x[:, 0]

    def act(self, obs: torch.Tensor, generator: torch.Generator | None = None):
        """Sample actions; returns (actions, log-probabilities, values)."""
        out, values = self.heads(obs)
        if self.continuous:
            noise = torch.randn(out.shape, generator=generator, device=out.device, dtype=out.dtype)
            actions = out + self.log_std.exp() * noise
            return actions, self._gaussian_logprob(out, actions), values
        log_probs = torch.log_softmax(out, dim=-1)
        actions = torch.multinomial(log_probs.exp(), 1, generator=generator).squeeze(-1)
        logprob = log_probs.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
        return actions, logprob, values

    def _gaussian_logprob(self, mean: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        z = (actions - mean) * torch.exp(-self.log_std)
        return (-0.5 * z * z - self.log_std - 0.5 * LOG_2PI).sum(-1)

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


class FlatParameters:
    """Re-home a module's parameters and gradients as views into two flat buffers.

    `flat.param` and `flat.grad` are ordinary tensors; every parameter's `.data` and `.grad`
    are views into them, and backward accumulates into those views in place (grads are
    zeroed with `zero_grad()`, never set to None). An optimiser built over `[flat.param]`
    therefore updates the whole module with one fused kernel, and clipping or checking the
    gradient is one reduction.
    """

    def __init__(self, module: nn.Module):
        self.params = [p for p in module.parameters() if p.requires_grad]
        total = sum(p.numel() for p in self.params)
        device = self.params[0].device
        self.param = torch.zeros(total, device=device, requires_grad=True)
        self.param.grad = torch.zeros(total, device=device)
        offset = 0
        with torch.no_grad():
            for p in self.params:
                count = p.numel()
                self.param[offset:offset + count].copy_(p.reshape(-1))
                p.data = self.param.data[offset:offset + count].view_as(p)
                p.grad = self.param.grad[offset:offset + count].view_as(p)
                offset += count

    @property
    def grad(self) -> torch.Tensor:
        return self.param.grad

    def zero_grad(self) -> None:
        self.param.grad.zero_()

    def clip_grad_norm_(self, max_norm: float) -> torch.Tensor:
        """Scale the gradient to norm <= max_norm (as torch.nn.utils.clip_grad_norm_)."""
        norm = torch.linalg.vector_norm(self.param.grad)
        self.param.grad.mul_(torch.clamp(max_norm / (norm + 1e-6), max=1.0))
        return norm

    def all_finite(self) -> bool:
        return bool(torch.isfinite(self.param).all())


class FlatAdam(nn.Module):
    """Adam (Kingma & Ba 2015) on one flat parameter tensor, with the arithmetic of
    torch.optim.Adam's single-tensor path (lerp for the first moment, bias corrections, eps
    added after the square root).

    Why not torch.optim.Adam: constructing any torch.optim optimizer imports torch._dynamo,
    which costs about 1.6 s of start-up on the development machine — a third of the time it
    takes to solve CartPole. Over one flat tensor Adam is five in-place operations anyway.
    Its moments and step count are buffers, so checkpoints carry them like any module state.
    """

    def __init__(self, param: torch.Tensor, lr: float, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8):
        super().__init__()
        self.param = param
        self.lr = lr
        self.beta1, self.beta2 = betas
        self.eps = eps
        self.register_buffer("exp_avg", torch.zeros_like(param, requires_grad=False))
        self.register_buffer("exp_avg_sq", torch.zeros_like(param, requires_grad=False))
        self.register_buffer("step_count", torch.zeros((), dtype=torch.int64, device=param.device))
        self.steps = 0

    @torch.no_grad()
    def step(self) -> None:
        grad = self.param.grad
        self.steps += 1
        self.step_count.fill_(self.steps)
        self.exp_avg.lerp_(grad, 1 - self.beta1)
        self.exp_avg_sq.mul_(self.beta2).addcmul_(grad, grad, value=1 - self.beta2)
        bias_correction1 = 1 - self.beta1 ** self.steps
        bias_correction2_sqrt = math.sqrt(1 - self.beta2 ** self.steps)
        denom = (self.exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(self.eps)
        self.param.addcdiv_(self.exp_avg, denom, value=-self.lr / bias_correction1)

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        result = super().load_state_dict(state_dict, strict=strict, assign=assign)
        self.steps = int(self.step_count)
        return result

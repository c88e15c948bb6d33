"""The arithmetic bound: how many steps/s a config's PPO could train at if every operation ran
at the rate this CPU's arithmetic reaches for its shape, in a tight loop, on one thread.

`operant bench trainer`'s other bound (measure.compute_bound) times the trainer's own torch
code in isolation, so it includes torch's per-call overhead: a run at 90% of it can still be
far from what the machine's arithmetic allows. This one is FLOPs over measured rates:

- `step_work` lists the work of the rollout's policy forward (a batch of num_envs, sampling
  included) and of one PPO minibatch step (forward, loss, backward, gradient clip and Adam)
  for a policy module, read from its own layers: matrix products (`Gemm`), elementwise passes
  (`Pointwise`, with their FLOPs per element), transcendental functions (`Transcendental`:
  tanh, exp, log, counted 1 FLOP each but timed at their own rate) and the clipped Adam step
  over every parameter (`Adam`, 16 FLOPs each);
- `measure_rates` times each distinct item in a tight loop at its exact shape: a matrix
  product is the best of torch.mm and three register-tiled C loops (operant.cext.arithmetic:
  A @ B, (B^T A^T)^T, dot products), all single-threaded; elementwise passes and Adam are C
  loops; transcendentals are torch's vectorised tanh on at least 32K elements;
- the bound is 1 / (forward time / num_envs + epochs x minibatch time / minibatch size)
  steps/s, env stepping, storage, GAE and bookkeeping counted as free, as in compute_bound.

What is counted, per layer of in -> out features and B rows: forward 2*B*in*out (matmul) +
B*out (bias) + B*out (ReLU; tanh one transcendental); backward 2*B*in*out for the weights,
2*B*in*out for the input's gradient (not for the first layer, whose input is the
observation), B*out for the bias and B*out (ReLU) or 3*B*out (tanh) for the activation. The
critic's head of a separate actor-critic counts its one used column. Per row: log-softmax
4A + A+1 transcendentals, its backward 3A + A, the ratio, advantage normalisation, clipped
surrogate and value losses (about 25 FLOPs) and their backward (12); entropy terms only
where their gradient is taken (ent_coef > 0). Statistics the trainer computes for its record
are not PPO's arithmetic and are not counted.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

ADAM_FLOPS = 16
POINTWISE_FLOPS = 3  # operant.cext.arithmetic.pointwise's FLOPs per element
TRANSCENDENTAL_MIN_ELEMENTS = 32_768


@dataclass(frozen=True)
class Gemm:
    """(m x k) @ (k x n)."""

    m: int
    k: int
    n: int

    @property
    def flops(self) -> int:
        return 2 * self.m * self.k * self.n


@dataclass(frozen=True)
class Pointwise:
    elements: int
    flops_per_element: int

    @property
    def flops(self) -> int:
        return self.elements * self.flops_per_element


@dataclass(frozen=True)
class Transcendental:
    elements: int

    @property
    def flops(self) -> int:
        return self.elements


@dataclass(frozen=True)
class Adam:
    params: int

    @property
    def flops(self) -> int:
        return ADAM_FLOPS * self.params


Work = Gemm | Pointwise | Transcendental | Adam


@dataclass(frozen=True)
class Layer:
    """A dense layer applied to `rows` rows per sample (a convolution as im2col: rows = output
    positions, inputs = channels x 3 x 3)."""

    inputs: int
    outputs: int
    rows: int = 1
    activation: str | None = None  # "relu", "tanh" or None (an output layer)
    first: bool = False  # its input is the observation: no input gradient


def _forward(layers: list[Layer], batch: int) -> list[Work]:
    work: list[Work] = []
    for layer in layers:
        rows = batch * layer.rows
        work += [Gemm(rows, layer.inputs, layer.outputs), Pointwise(rows * layer.outputs, 1)]
        if layer.activation == "tanh":
            work.append(Transcendental(rows * layer.outputs))
        elif layer.activation == "relu":
            work.append(Pointwise(rows * layer.outputs, 1))
    return work


def _backward(layers: list[Layer], batch: int) -> list[Work]:
    work: list[Work] = []
    for layer in reversed(layers):
        rows = batch * layer.rows
        if layer.activation == "tanh":
            work.append(Pointwise(rows * layer.outputs, 3))
        elif layer.activation == "relu":
            work.append(Pointwise(rows * layer.outputs, 1))
        work += [Gemm(layer.inputs, rows, layer.outputs), Pointwise(rows * layer.outputs, 1)]
        if not layer.first:
            work.append(Gemm(rows, layer.outputs, layer.inputs))
            if layer.rows > 1:  # col2im: each patch's gradient added back into the map
                work.append(Pointwise(rows * layer.inputs, 1))
    return work


def _head(actions: int, batch: int, continuous: bool, train: bool, entropy: bool) -> list[Work]:
    """Log-probabilities (and sampling, in the rollout) of `actions` logits or Gaussian
    dimensions; in training also their backward and the entropy's where it has a gradient."""
    rows = batch * actions
    if continuous:
        work: list[Work] = [Pointwise(rows, 6), Transcendental(actions)]
        return work + [Pointwise(rows, 4)] if train else work + [Pointwise(rows, 2)]
    work = [Pointwise(rows, 4), Transcendental(rows + batch)]
    if not train:
        return work + [Pointwise(rows, 2)]  # the CDF and its search
    work += [Pointwise(rows, 3), Transcendental(rows)]
    if entropy:
        work += [Pointwise(rows, 2), Transcendental(rows), Pointwise(rows, 4)]
    return work


def _losses(batch: int, clip_vloss: bool) -> list[Work]:
    return [
        Pointwise(batch, 1),
        Transcendental(batch),
        Pointwise(batch, 6 + 8 + (10 if clip_vloss else 4) + 12),
    ]


@dataclass(frozen=True)
class PolicyShape:
    """A policy's networks as layers: `nets` each a list of Layers (one shared trunk and heads,
    or an actor and a critic), `actions` (logits or Gaussian dimensions), `params`."""

    nets: tuple[tuple[Layer, ...], ...]
    actions: int
    continuous: bool
    params: int


def policy_shape(policy: Any) -> PolicyShape | None:
    """The layers of a built-in policy (the MLP actor-critic, the CNN), or None for a policy
    this module does not know how to count."""
    import torch

    from operant.trainer.policies.cnn import CNNPolicy
    from operant.trainer.policies.mlp import ActorCritic

    params = sum(p.numel() for p in policy.parameters() if p.requires_grad)
    if isinstance(policy, ActorCritic):
        widths = [int(w.shape[-2]) for w in policy.weights] + [int(policy.weights[-1].shape[-1])]
        activation = "tanh" if policy.activation is torch.tanh else "relu"
        actions = policy.num_actions

        def net(last: int) -> tuple[Layer, ...]:
            sizes = [*widths[:-1], last]
            return tuple(
                Layer(
                    inputs,
                    outputs,
                    activation=None if index == len(sizes) - 2 else activation,
                    first=index == 0,
                )
                for index, (inputs, outputs) in enumerate(zip(sizes[:-1], sizes[1:]))
            )

        nets = (net(actions + 1),) if policy.shared else (net(actions), net(1))
        return PolicyShape(nets, actions, policy.continuous, params)
    if isinstance(policy, CNNPolicy):
        channels, height, width = policy.obs_shape
        layers = []
        for index, module in enumerate(policy.convs):
            conv = cast(torch.nn.Conv2d, module)
            kernel, stride = policy.kernels[index], policy.strides[index]
            height, width = (height - kernel) // stride + 1, (width - kernel) // stride + 1
            layers.append(
                Layer(
                    channels * kernel * kernel,
                    int(conv.out_channels),
                    rows=height * width,
                    activation="relu",
                    first=index == 0,
                )
            )
            channels = int(conv.out_channels)
        dense = policy.dense
        layers.append(Layer(dense.in_features, dense.out_features, activation="relu"))
        layers.append(Layer(dense.out_features, policy.num_actions + 1))
        return PolicyShape((tuple(layers),), policy.num_actions, False, params)
    return None


@dataclass(frozen=True)
class StepWork:
    rollout: list[Work]  # one policy forward over `num_envs` observations
    num_envs: int
    minibatch: list[Work]  # one PPO minibatch step
    minibatch_size: int
    epochs: int


def step_work(shape: PolicyShape, config: Any, minibatch_size: int) -> StepWork:
    """The work of one rollout forward and of one minibatch step of `config`'s PPO."""
    ppo, num_envs = config.ppo, config.env.num_envs
    rollout: list[Work] = []
    minibatch: list[Work] = []
    for net in shape.nets:
        rollout += _forward(list(net), num_envs)
        minibatch += _forward(list(net), minibatch_size)
    rollout += _head(shape.actions, num_envs, shape.continuous, train=False, entropy=False)
    minibatch += _head(
        shape.actions, minibatch_size, shape.continuous, train=True, entropy=ppo.ent_coef > 0
    )
    minibatch += _losses(minibatch_size, ppo.clip_vloss)
    for net in shape.nets:
        minibatch += _backward(list(net), minibatch_size)
    minibatch.append(Adam(shape.params))
    return StepWork(rollout, num_envs, minibatch, minibatch_size, ppo.update_epochs)


# -- rates ----------------------------------------------------------------------------------


def _best_rate(run: Callable[[int], None], units: float, seconds: float) -> float:
    """Units/s of `run(repeats)`, the best of 3 calls after one that sizes `repeats` so that
    a call lasts about `seconds` (a ceiling: this VM's speed drifts)."""
    repeats = 1
    while True:
        started = time.perf_counter()
        run(repeats)
        elapsed = time.perf_counter() - started
        if elapsed >= seconds / 4 or repeats >= 1 << 24:
            break
        repeats *= max(2, min(64, int(seconds / 4 / max(elapsed, 1e-7))))
    repeats = max(1, int(repeats * seconds / max(elapsed, 1e-9)))
    best = 0.0
    for _ in range(3):
        started = time.perf_counter()
        run(repeats)
        best = max(best, units * repeats / (time.perf_counter() - started))
    return best


def _gemm_rates(item: Gemm, seconds: float) -> dict[str, float]:
    """FLOP/s of each way to compute this product: torch.mm and the C loops."""
    import numpy as np
    import torch

    import operant.cext.arithmetic as arithmetic

    rng = np.random.default_rng(0)
    a = rng.standard_normal((item.m, item.k), dtype=np.float32)
    b = rng.standard_normal((item.k, item.n), dtype=np.float32)
    c = np.empty((item.m, item.n), np.float32)
    bt, at = np.ascontiguousarray(b.T), np.ascontiguousarray(a.T)
    ct = np.empty((item.n, item.m), np.float32)
    ta, tb, tc = torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(c)

    def torch_mm(repeats: int) -> None:
        for _ in range(repeats):
            torch.mm(ta, tb, out=tc)

    ways: dict[str, Callable[[int], None]] = {
        "torch.mm": torch_mm,
        "c_nn": lambda repeats: arithmetic.gemm_nn(a, b, c, repeats),
        "c_nn_transposed": lambda repeats: arithmetic.gemm_nn(bt, at, ct, repeats),
        "c_dot": lambda repeats: arithmetic.gemm_nt(a, bt, c, repeats),
    }
    return {name: _best_rate(run, item.flops, seconds) for name, run in ways.items()}


def _rate(item: Work, seconds: float) -> tuple[float, str]:
    """(units of the item per second, how it was measured): FLOP/s for Gemm, Pointwise and
    Adam; elements/s for Transcendental."""
    import numpy as np
    import torch

    import operant.cext.arithmetic as arithmetic

    if isinstance(item, Gemm):
        rates = _gemm_rates(item, seconds)
        way = max(rates, key=lambda name: rates[name])
        return rates[way], way
    if isinstance(item, Pointwise):
        x = np.full(item.elements, 0.5, np.float32)
        y = np.zeros(item.elements, np.float32)
        flops = POINTWISE_FLOPS * item.elements
        return _best_rate(lambda r: arithmetic.pointwise(x, y, -1.0, r), flops, seconds), "c"
    if isinstance(item, Adam):
        arrays = [np.full(item.params, 0.01, np.float32) for _ in range(4)]
        return _best_rate(
            lambda r: arithmetic.clip_adam(*arrays, r), ADAM_FLOPS * item.params, seconds
        ), "c"
    count = max(item.elements, TRANSCENDENTAL_MIN_ELEMENTS)
    inputs, outputs = torch.full((count,), 0.5), torch.empty(count)

    def tanh(repeats: int) -> None:
        for _ in range(repeats):
            torch.tanh(inputs, out=outputs)

    return _best_rate(tanh, count, seconds), "torch.tanh"


def _key(item: Work) -> Work:
    """Pointwise passes are measured per element count (their FLOPs scale the time)."""
    return Pointwise(item.elements, POINTWISE_FLOPS) if isinstance(item, Pointwise) else item


def measure_rates(items: list[Work], seconds: float = 0.02) -> dict[Work, tuple[float, str]]:
    """Each distinct item's rate, measured once on one torch thread."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        rates: dict[Work, tuple[float, str]] = {}
        for item in items:
            key = _key(item)
            if key not in rates:
                rates[key] = _rate(key, seconds)
        return rates
    finally:
        torch.set_num_threads(threads)


def seconds_of(items: list[Work], rates: dict[Work, tuple[float, str]]) -> float:
    return sum(item.flops / rates[_key(item)][0] for item in items)


def flops_of(items: list[Work]) -> int:
    return sum(item.flops for item in items)


def arithmetic_bound(
    config: Any, policy: Any, minibatch_size: int, seconds: float = 0.02
) -> dict[str, Any] | None:
    """The record's `arithmetic_bound` for a config and its built policy: FLOPs per sample,
    the rates reached at their shapes, and the steps/s they allow; None for a policy whose
    layers this module cannot read. `seconds`: the length of each timed call."""
    shape = policy_shape(policy)
    if shape is None:
        return None
    work = step_work(shape, config, minibatch_size)
    rates = measure_rates(work.rollout + work.minibatch, seconds)
    rollout_s, minibatch_s = seconds_of(work.rollout, rates), seconds_of(work.minibatch, rates)
    forward_sps = work.num_envs / rollout_s
    train_sps = work.minibatch_size / minibatch_s
    bound = 1.0 / (1.0 / forward_sps + work.epochs / train_sps)
    rollout_flops, minibatch_flops = flops_of(work.rollout), flops_of(work.minibatch)
    matmul = sum(item.flops for item in work.minibatch if isinstance(item, Gemm))
    return {
        "forward_flops_per_sample": round(rollout_flops / work.num_envs, 1),
        "train_flops_per_sample": round(minibatch_flops / work.minibatch_size, 1),
        "train_matmul_share": round(matmul / minibatch_flops, 3),
        "forward_samples_per_s": round(forward_sps, 1),
        "train_samples_per_s": round(train_sps, 1),
        "forward_gflops": round(rollout_flops / rollout_s / 1e9, 2),
        "train_gflops": round(minibatch_flops / minibatch_s / 1e9, 2),
        "epochs": work.epochs,
        "bound_steps_per_s": round(bound, 1),
        "gemms": [
            {
                "m": key.m,
                "k": key.k,
                "n": key.n,
                "gflops": round(rate / 1e9, 2),
                "way": way,
            }
            for key, (rate, way) in rates.items()
            if isinstance(key, Gemm)
        ],
    }

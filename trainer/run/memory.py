"""How much memory a config will allocate, estimated before anything is allocated, and the
memory this machine (or its cgroup) has for it.

A run allocates most of its memory once, from its shapes: the envs' buffers and state, the
rollout storage (operant.trainer.loop.storage: `(num_steps, rows, ...)` per tensor, in the dtypes
that module names), the policy's activations while it acts on every row, and the update's
minibatch tensors and the activations its backward pass keeps. `estimate` adds these up from
the config and the env's specs (one row's observation and action: operant.envs.contract), so a
config that cannot fit (`env.num_envs = 200000000`) is refused in one line before a byte of it
is allocated, instead of being killed by the kernel's OOM killer after taking the machine's
memory (and, under systemd, restarted into the same death).

The estimate aims at the peak resident growth within a factor of two (tests/test_memory.py
measures a real trainer); it is a refusal threshold, not an accounting. Memory on a GPU is
estimated alike and compared with what the device has free.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

ENV_STATE_BYTES = {"native": 128, "torch": 128, "reference": 4096}
"""Each env's own state besides its buffers: a C kernel's structure-of-arrays fields, RNG and
episode accounting (CartPole measured 161 bytes per env in all, buffers included), a torch
env's state tensors, or a whole Gymnasium env object per env (measured 3.6 KiB for CartPole)."""
ROLLOUT_FLOAT_TENSORS = 6
"""float32 per row per step in the storage: logprobs, rewards, dones, values, advantages,
returns."""
STEP_FLOAT_TENSORS = 3
"""float32 per row, once: truncated, final_values, next_value."""
FORWARD_COPIES = 3
"""Activations alive at once per hidden unit while the policy acts on all rows (a layer's
output, its activation, and the next layer's output)."""
BACKWARD_COPIES = 3
"""Per hidden unit and minibatch sample in the update: the forward activations autograd keeps
(pre- and post-activation) and their gradients. The native update keeps none of these
(`takes_native_update`): at 65,536 CartPole envs a real trainer grew 123 MB against the 1.13 GB
this counted for torch (tests/test_memory.py, 2026-11-26)."""
PARAMETER_COPIES = 5
"""float32 per CNN parameter: the weights, their gradients, Adam's two moments and one working
copy (the rollout's transposed dense weight, the update's). The MLP's are a few thousand, not
counted; a CNN over 84 x 84 frames has millions (13.8M for MinAtar's network there)."""
RUNTIME_BYTES = 400 << 20
"""The trainer process before any of this: Python, torch, numpy, Gymnasium (measured ~350 MiB
on CPU). Counted only where those are not loaded yet."""


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes a config will allocate, by what allocates them, on the host and on the policy's
    device (the same place on CPU)."""

    envs: int
    storage: int
    acting: int
    update: int
    host: int
    device: int
    """What lives on a GPU (0 when the device is the CPU)."""
    env_each: int = 0
    """A Python env's own memory as measured (0: counted, not measured)."""

    @property
    def total(self) -> int:
        return self.envs + self.storage + self.acting + self.update

    def breakdown(self) -> str:
        each = f" ({size_text(self.env_each)} each, measured)" if self.env_each else ""
        return (
            f"rollout storage {size_text(self.storage)}, envs {size_text(self.envs)}{each}, "
            f"policy workspaces {size_text(self.acting + self.update)}"
        )


def size_text(size: float) -> str:
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{int(size)} bytes"


@dataclass(frozen=True)
class CNNShape:
    """What the built-in CNN (operant.trainer.policies.cnn) holds per row and in all, in floats."""

    activations: int
    """Its feature maps and its dense layer, per row."""
    patches: int
    """The largest layer's im2col patches, per row."""
    parameters: int


def cnn_shape(config: Any, obs_spec: Any, act_spec: Any) -> CNNShape | None:
    """The built-in CNN's sizes where this config trains it on these specs (image observations
    and discrete actions, policy.kind "auto" or "cnn"), told from the config alone; else None."""
    policy = config.policy
    if len(obs_spec.shape) != 3 or not act_spec.discrete or policy.kind not in ("auto", "cnn"):
        return None
    channels, height, width = (int(size) for size in obs_spec.shape)
    layers = len(policy.conv_channels)
    kernels = policy.conv_kernels or [3] * layers
    strides = policy.conv_strides or [1] * layers
    maps = patches = parameters = 0
    for out, kernel, stride in zip(policy.conv_channels, kernels, strides):
        height, width = (height - kernel) // stride + 1, (width - kernel) // stride + 1
        if min(height, width) < 1:
            return None  # refused when the policy is built
        patches = max(patches, height * width * channels * kernel * kernel)
        maps += height * width * out
        parameters += out * (channels * kernel * kernel + 1)
        channels = out
    dense = policy.conv_dense
    parameters += dense * (channels * height * width + 1) + (dense + 1) * (act_spec.num_actions + 1)
    return CNNShape(maps + dense, patches, parameters)


def takes_native_update(config: Any, obs_spec: Any, act_spec: Any) -> bool:
    """Whether the run will take the native update (operant.trainer.loop.fused: the MLP, over
    float32 or byte rows, with discrete actions or a Gaussian head of at most 16 dimensions,
    on the CPU, unless `ppo.update_impl = "torch"`), told without building it (nor importing
    torch). "auto" picks the MLP for flat float32 observations only."""
    import importlib.util
    import math

    flat = len(obs_spec.shape) == 1 and str(obs_spec.dtype) == "float32"
    mlp = (config.policy.kind == "auto" and flat) or (
        config.policy.kind == "mlp" and str(obs_spec.dtype) in ("float32", "uint8")
    )
    return (
        config.ppo.update_impl != "torch"
        and (act_spec.discrete or math.prod(act_spec.shape) <= 16)
        and mlp
        and config.train.device.split(":")[0] in ("cpu", "")
        and importlib.util.find_spec("operant.cext.fused_mlp") is not None
    )


def estimate(
    config: Any,
    impl: str,
    obs_spec: Any,
    act_spec: Any,
    agents_per_env: int = 1,
    env_bytes: int | None = None,
) -> MemoryEstimate:
    """What training `config` allocates, from the env's specs (operant.envs.contract) and,
    for a Python env, what one env was measured to take (`env_bytes`, the preflight's)."""
    rows = config.env.num_envs * agents_per_env
    steps = config.ppo.num_steps
    obs_bytes = obs_spec.row_bytes
    obs_elements = int(math.prod(obs_spec.shape))
    act_elements = int(math.prod(act_spec.shape)) if act_spec.shape else 1
    act_bytes = 8 if act_spec.discrete else 4 * act_elements
    # Env buffers: observations and the final observations of SAME_STEP autoreset, actions,
    # rewards, two flags; then each env's own state.
    each = ENV_STATE_BYTES.get(impl, ENV_STATE_BYTES["reference"])
    envs = rows * (2 * obs_bytes + act_bytes + 4 + 2) + config.env.num_envs * max(
        each, env_bytes or 0
    )
    # Per step and row: the observation and the final one, the action, the float tensors,
    # V of the final observation, and two flags (terminated, truncated).
    storage = steps * rows * (
        2 * obs_bytes + act_bytes + 4 * ROLLOUT_FLOAT_TENSORS + 4 + 2
    ) + rows * (1 + 4 * STEP_FLOAT_TENSORS + (0 if act_spec.discrete else act_bytes))
    widths = sum(config.policy.hidden_sizes) * (1 if config.policy.shared else 2)
    heads = act_spec.num_actions + 1 + act_elements  # logits or means, value, the sample
    native = takes_native_update(config, obs_spec, act_spec)
    cnn = cnn_shape(config, obs_spec, act_spec)
    # Activations per row while acting and per minibatch sample in the update: torch keeps
    # whole layers (and autograd their gradients); the native path works through blocks of
    # rows in a scratch of about one float per input and row besides its input; the CNN's
    # layers are its feature maps and dense layer, beside one layer's im2col patches.
    if cnn is not None:
        widths, patches = cnn.activations, cnn.patches
        forward = obs_elements + patches + FORWARD_COPIES * widths
        backward = patches + BACKWARD_COPIES * widths
    else:
        forward = obs_elements + 1 if native else obs_elements + FORWARD_COPIES * widths
        backward = obs_elements + 1 if native else BACKWARD_COPIES * widths
    # Acting: the policy's input (observations as float32), its activations, its heads.
    acting = rows * 4 * (forward + 2 * heads)
    batch = steps * rows
    minibatch = batch // config.ppo.num_minibatches
    # The update: the shuffled indices over the batch, one minibatch's gathered rollout, the
    # activations and gradients of its forward and backward passes.
    update = (
        batch * 8
        + minibatch * (obs_bytes + 4 * obs_elements + act_bytes + 4 * ROLLOUT_FLOAT_TENSORS)
        + minibatch * 4 * (backward + 2 * heads)
        + (PARAMETER_COPIES * 4 * cnn.parameters if cnn is not None else 0)
    )
    on_gpu = config.train.device.split(":")[0] not in ("cpu", "")
    device = storage + acting + update if on_gpu else 0
    env_on_device = on_gpu and impl == "torch"
    host = (0 if env_on_device else envs) + (0 if on_gpu else storage + acting + update)
    return MemoryEstimate(
        envs=envs,
        storage=storage,
        acting=acting,
        update=update,
        host=host,
        device=device + (envs if env_on_device else 0),
        env_each=env_bytes if env_bytes is not None and env_bytes > each else 0,
    )


def cgroup_available(root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """Bytes this process's cgroup (v2) may still use: memory.max less memory.current; None
    without a limit (or without cgroup v2)."""
    try:
        cgroup = Path("/proc/self/cgroup").read_text().strip().splitlines()
        relative = next(line.split("::", 1)[1] for line in cgroup if line.startswith("0::"))
    except (OSError, StopIteration, IndexError):
        relative = "/"
    for directory in (root / relative.lstrip("/"), root):
        try:
            limit = (directory / "memory.max").read_text().strip()
            current = int((directory / "memory.current").read_text().strip())
        except (OSError, ValueError):
            continue
        if limit == "max":
            return None
        return max(0, int(limit) - current)
    return None


def available() -> tuple[int, str]:
    """Bytes of memory a new allocation can have, and where that figure comes from."""
    free = psutil.virtual_memory().available
    limited = cgroup_available()
    if limited is not None and limited < free:
        return limited, "the cgroup's memory.max less its use"
    return free, "available on this machine"


def runtime_bytes() -> int:
    """What the trainer's runtime will add that is not loaded yet (torch, mostly)."""
    return 0 if "torch" in sys.modules else RUNTIME_BYTES


def check(
    config: Any,
    impl: str,
    obs_spec: Any,
    act_spec: Any,
    agents_per_env: int = 1,
    what: str = "this config",
    env_bytes: int | None = None,
) -> str | None:
    """One line refusing a config whose estimate does not fit in the memory available (host,
    and the GPU's when the policy is on one); None when it fits."""
    needed = estimate(config, impl, obs_spec, act_spec, agents_per_env, env_bytes)
    shape = f"env.num_envs = {config.env.num_envs:,} x ppo.num_steps = {config.ppo.num_steps:,}"
    host = needed.host + runtime_bytes()
    free, source = available()
    # Where the envs themselves are most of it (a heavy Python env), fewer steps save nothing.
    lower = "env.num_envs" if 2 * needed.envs > needed.total else "env.num_envs or ppo.num_steps"
    if host > free:
        return (
            f"{what} needs about {size_text(host)} of memory ({shape}: "
            f"{needed.breakdown()}), and {size_text(free)} is {source}; lower {lower}"
        )
    if needed.device:
        device_free = _device_free(config.train.device)
        if device_free is not None and needed.device > device_free:
            return (
                f"{what} needs about {size_text(needed.device)} on "
                f"{config.train.device} ({shape}: {needed.breakdown()}), and "
                f"{size_text(device_free)} is free there; lower env.num_envs or "
                "ppo.num_steps"
            )
    return None


def _device_free(device: str) -> int | None:
    import torch

    if not device.startswith("cuda"):
        return None
    free, _ = torch.cuda.mem_get_info(torch.device(device))
    return int(free)

"""The CNN policy: what "auto" chooses for image observations, (C, H, W) of any dtype with
discrete actions (MinAtar's uint8 (C, 10, 10) frames), registered as "cnn".

The default network is MinAtar's (Young & Tian 2019, its examples' AC/DQN network): one 3x3
convolution of 16 channels, stride 1, no padding, ReLU, flatten, a 128-unit layer, ReLU, then an
actor head and a critic head on the shared trunk. `policy.conv_channels` lists one width per
layer (`[16]` is MinAtar's; `[32, 64]` a deeper option), `policy.conv_kernels` and
`policy.conv_strides` their kernels and strides (3 and 1 by default; Nature DQN's network is
[32, 64, 64], [8, 4, 3], [4, 2, 1]) and `policy.conv_dense` the width of the layer after the
flatten. Initialisation is CleanRL's Atari PPO (orthogonal,
sqrt(2) gain for the trunk, 0.01 for the actor head, 1 for the critic's).

Observations enter as their values times the spec's `scale` (MinAtar's cells are 0 or 1,
scale 1; a Python env's 0-255 byte images 1/255, operant.envs.reference.obs_rows), converted to
float inside the forward pass: the rollout storage keeps the env's uint8 frames, and no float copy
of a frame batch is made on the host beside the network's own input.

Two paths compute the same function:
- `heads` (the PPO update, evaluation): `conv2d` with autograd;
- `act` / `value` (the rollout): for frames up to 32x32 and stride-1 layers (MinAtar's),
  each convolution as im2col + one matmul into a workspace kept per batch shape; larger
  frames and strided layers run `heads`, torch's convolutions, faster there. The first
  layer's im2col reads the uint8 frame batch and writes float32 patches into that buffer (the
  dtype conversion happens in that one pass): operant.cext.im2col for C-contiguous frames on
  the host, else torch's copy of a strided view (any device, any strides, deeper layers).
  Nothing is allocated per step once a batch shape was seen (tests/test_rollout_alloc.py).
In both, a first layer over sparse uint8 frames on the host (MinAtar's: a few percent of cells
set) runs from the set cells instead (`SparseConvReLU` below, an autograd Function in
`heads`, into the workspace in the rollout): the same function to float32 rounding, about 1.16x the
trainer's steps/s on Breakout (docs/journal/2026-11-22-training-end-to-end.md).
Both multiply by the dense layer's weight transposed into a contiguous copy, which MKL
multiplies faster than the transposed view (`DenseNN`, `transposed_for_rollout` below).
Feature maps in the rollout path are laid out (B, H, W, channels); `heads` flattens its conv
output in the same order, so both paths feed the dense layer the same vector.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import partial
from typing import Any, cast

import torch
from torch import nn
from torch.nn import functional

from operant.envs.contract import ActSpec, ObsSpec
from operant.trainer.config import Config, ConfigError
from operant.trainer.policies.registry import WorkspaceHeadsPolicy, register_policy
from operant.trainer.policies.sampling import categorical_workspace

try:
    from operant.cext.im2col import patches_u8, refresh_transposed
except ImportError:  # an unbuilt checkout: torch's strided copy and nn.Linear's product do the same
    patches_u8 = refresh_transposed = None
try:
    import operant.cext.sparse_conv as _sparse_native
except ImportError:  # an unbuilt checkout: torch's convolution does the same
    _sparse_native = None

KERNEL = 3
WORKSPACE_MAX_CELLS = 32 * 32
"""The largest frame (height x width) whose rollout forward runs in the workspace: 64 frames
of 4 channels, 3x3 stride-1 convolutions, one torch thread, 10x10 0.76 against 1.10 ms for
torch's convolutions, 24x24 4.6 against 5.8, 32x32 6.9 against 6.6, 48x48 21 against 14
(2-core Xeon VM, 2026-11-27); strided layers always run as torch's (Nature's network on
84x84 frames: 5.4 against 10.9 ms for 16 frames)."""


class CNNPolicy(WorkspaceHeadsPolicy):
    """Convolutions without padding (3x3, stride 1, unless `kernels` and `strides` say
    otherwise) with ReLU, a dense layer with ReLU, and actor and critic heads on that shared
    trunk."""

    def __init__(
        self,
        obs_shape: tuple[int, int, int],
        num_actions: int,
        conv_channels: tuple[int, ...] = (16,),
        dense: int = 128,
        scale: float = 1.0,
        kernels: tuple[int, ...] = (),
        strides: tuple[int, ...] = (),
    ):
        super().__init__()
        channels, height, width = obs_shape
        self.kernels = tuple(kernels) or (KERNEL,) * len(conv_channels)
        self.strides = tuple(strides) or (1,) * len(conv_channels)
        if feature_size(height, width, self.kernels, self.strides) is None:
            raise ValueError(
                f"convolutions of kernels {list(self.kernels)} and strides "
                f"{list(self.strides)} do not fit a {height}x{width} frame"
            )
        self.num_actions = num_actions
        self.obs_shape = obs_shape
        self.scale = float(scale)
        """What observations are multiplied by on entry (ObsSpec.scale: 1/255 for byte images
        from 0 to 255): in `heads` a scaled float copy of the frames, in the rollout the first
        matmul's `alpha`; the storage keeps the env's values."""
        gain = math.sqrt(2)
        self.convs = nn.ModuleList()
        for out_channels, kernel, stride in zip(conv_channels, self.kernels, self.strides):
            conv = nn.Conv2d(channels, out_channels, kernel, stride)
            nn.init.orthogonal_(conv.weight, gain)
            nn.init.zeros_(_bias(conv))
            self.convs.append(conv)
            channels = out_channels
            height, width = (height - kernel) // stride + 1, (width - kernel) // stride + 1
        self.feature_shape = (height, width, channels)
        self.dense = nn.Linear(height * width * channels, dense)
        nn.init.orthogonal_(self.dense.weight, gain)
        nn.init.zeros_(self.dense.bias)
        self.actor = nn.Linear(dense, num_actions)
        nn.init.orthogonal_(self.actor.weight, 0.01)
        nn.init.zeros_(self.actor.bias)
        self.critic = nn.Linear(dense, 1)
        nn.init.orthogonal_(self.critic.weight, 1.0)
        nn.init.zeros_(self.critic.bias)
        self._workspaces: dict[tuple[int, torch.device], dict[str, torch.Tensor]] = {}
        self.rollout_in_workspace = (
            all(stride == 1 for stride in self.strides)
            and obs_shape[1] * obs_shape[2] <= WORKSPACE_MAX_CELLS
        )
        """The rollout's forward as im2col + matmul in a workspace (allocating nothing); else
        torch's convolutions, as `heads` (strided layers, large frames: faster there)."""

    def _conv_layers(self) -> Sequence[nn.Conv2d]:
        """The convolutions, as the Conv2d layers `__init__` put in the ModuleList (whose items
        mypy knows only as modules)."""
        return cast("Sequence[nn.Conv2d]", self.convs)

    def heads(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.head_features(obs)
        return self.actor(x), self.critic(x).squeeze(-1)

    def head_features(self, obs: torch.Tensor) -> torch.Tensor:
        """The shared features the actor and critic heads read: the dense layer's ReLU.
        (PPO's update applies the heads itself, inside its loss: operant.trainer.loop.ppo_loss.)"""
        # Channels-last from the input on: the convolutions' outputs are then already in the
        # (B, H, W, C) order the dense layer reads (the permute below is a view, not a copy),
        # and their gradients come back in the layout of the saved activations. With NCHW
        # tensors the ReLU's backward met a gradient in channels-last strides and took torch's
        # mixed-stride path: 3.8 ms of a 31 ms minibatch step at 1,024 Breakout rows; the step
        # is 19.5 ms this way, with the same forward values (tests/test_cnn_policy.py).
        # The ReLUs work in place: neither a convolution's nor a linear layer's backward reads
        # its output, so the output's buffer can hold the activation, and the step does not
        # allocate and fill a second one (4 MB for the first feature maps of 1,024 Breakout
        # rows): 1.10x the minibatch step, with bit-identical values and gradients.
        # A first convolution on sparse uint8 frames (MinAtar's) runs from their set cells
        # (`sparse_conv_relu`): its output is (B, H, W, C), channels-last already.
        convs = list(self._conv_layers())
        if self.scale == 1.0 and sparse_applies(obs, convs[0]):
            x = sparse_conv_relu(obs, convs[0]).permute(0, 3, 1, 2)
            convs = convs[1:]
        else:
            x = obs.float() if self.scale == 1.0 else obs.float() * self.scale
            x = x.contiguous(memory_format=torch.channels_last)
        for conv in convs:
            x = functional.relu_(conv(x))
        # (B, C, H, W) -> (B, H, W, C) order, as the rollout path lays its feature maps out.
        x = x.permute(0, 2, 3, 1).reshape(x.shape[0], -1)
        return functional.relu_(dense_product(x, self.dense))

    # -- the rollout path (act, value: WorkspaceHeadsPolicy): no allocation after the first
    # call for a batch size ----------------------------------------------------------------
    def _workspace(self, obs: torch.Tensor) -> dict[str, torch.Tensor]:
        batch = obs.shape[0]
        key = (batch, obs.device)
        workspace = self._workspaces.get(key)
        if workspace is None:
            if len(self._workspaces) >= 4:
                self._workspaces.clear()
            with torch.inference_mode(False):
                empty = partial(torch.empty, device=obs.device)
                workspace = {**categorical_workspace(batch, self.num_actions, obs.device)}
                height, width = self.obs_shape[1:]
                for index, conv in enumerate(self.convs):
                    kernel, stride = self.kernels[index], self.strides[index]
                    height = (height - kernel) // stride + 1
                    width = (width - kernel) // stride + 1
                    workspace[f"cols{index}"] = empty(
                        (batch, height, width, conv.in_channels, kernel, kernel)
                    )
                    workspace[f"conv{index}"] = empty((batch * height * width, conv.out_channels))
                first, kernel = self.convs[0], self.kernels[0]
                workspace["weight_t0"] = empty(
                    (first.in_channels, kernel, kernel, first.out_channels)
                )
                workspace["dense"] = empty((batch, self.dense.out_features))
                weight = self.dense.weight
                # NaN in both until the first refresh: no weight's bytes match the copy's
                # unless the copy already is that weight transposed.
                workspace["dense_seen"] = torch.full_like(weight, math.nan)
                workspace["dense_t"] = torch.full(
                    (weight.shape[1], weight.shape[0]), math.nan, device=obs.device
                )
                workspace["values"] = empty((batch, 1))
            self._workspaces[key] = workspace
        return workspace

    def _heads_into(
        self, obs: torch.Tensor, workspace: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`heads` as im2col + matmul per convolution, into the workspace."""
        if not self.rollout_in_workspace:
            return self.heads(obs)
        batch = obs.shape[0]
        x = obs  # (B, C, H, W) in any dtype and any strides
        for index, conv in enumerate(self._conv_layers()):
            kernel, stride = self.kernels[index], self.strides[index]
            if index == 0 and self.scale == 1.0 and sparse_applies(x, conv):
                height, width = x.shape[2] - kernel + 1, x.shape[3] - kernel + 1
                features = workspace["conv0"]
                sparse_forward_into(x, conv.weight, _bias(conv), workspace["weight_t0"], features)
                x = features.view(batch, height, width, -1).permute(0, 3, 1, 2)
                continue
            # (B, C, H', W', 3, 3) view -> (B, H', W', C, 3, 3) copied (and converted to
            # float) into the workspace: the row of a position is its receptive field in
            # conv.weight's (C, kh, kw) order.
            cols = workspace[f"cols{index}"]
            if stride != 1 or not _native_patches(x, cols, kernel):
                patches = x.unfold(2, kernel, stride).unfold(3, kernel, stride)
                cols.copy_(patches.permute(0, 2, 3, 1, 4, 5))
            height, width = cols.shape[1], cols.shape[2]
            features = torch.addmm(
                _bias(conv),
                cols.view(batch * height * width, -1),
                conv.weight.view(conv.out_channels, -1).t(),
                alpha=self.scale if index == 0 else 1.0,
                out=workspace[f"conv{index}"],
            ).relu_()
            x = features.view(batch, height, width, -1).permute(0, 3, 1, 2)
        flat = workspace[f"conv{len(self.convs) - 1}"].view(batch, -1)
        dense = self.dense
        weight_t = transposed_for_rollout(
            dense.weight, workspace["dense_t"], workspace["dense_seen"]
        )
        x = torch.addmm(dense.bias, flat, weight_t, out=workspace["dense"]).relu_()
        logits = torch.addmm(self.actor.bias, x, self.actor.weight.t(), out=workspace["logits"])
        values = torch.addmm(self.critic.bias, x, self.critic.weight.t(), out=workspace["values"])
        return logits, values.view(-1)


def _bias(conv: nn.Conv2d) -> torch.Tensor:
    """A convolution's bias: every one of the policy's is built with one."""
    return cast(torch.Tensor, conv.bias)


def _native_patches(frames: torch.Tensor, cols: torch.Tensor, kernel: int) -> bool:
    """The first layer's im2col by operant.cext.im2col where it applies (C-contiguous uint8
    frames on the host: the env's buffer or a storage row), 9x the speed of torch's strided
    copy for 64 Breakout frames (64 against 590 us); False leaves it to that copy."""
    if (
        patches_u8 is None
        or frames.dtype != torch.uint8
        or frames.device.type != "cpu"
        or not frames.is_contiguous()
        or not cols.is_contiguous()
    ):
        return False
    batch, channels, height, width = frames.shape
    expected = (batch, height - kernel + 1, width - kernel + 1, channels, kernel, kernel)
    if tuple(cols.shape) != expected or cols.dtype != torch.float32:
        return False
    patches_u8(frames.data_ptr(), cols.data_ptr(), batch, channels, height, width, kernel)
    return True


def reads_images(obs_spec: ObsSpec, act_spec: ActSpec) -> bool:
    """(C, H, W) observations of any dtype, and discrete actions."""
    return len(obs_spec.shape) == 3 and act_spec.discrete


def feature_size(
    height: int, width: int, kernels: tuple[int, ...], strides: tuple[int, ...]
) -> tuple[int, int] | None:
    """The feature maps' height and width after these convolutions (no padding), or None
    where a kernel no longer fits."""
    for kernel, stride in zip(kernels, strides):
        if min(height, width) < kernel:
            return None
        height, width = (height - kernel) // stride + 1, (width - kernel) // stride + 1
    return height, width


def build_cnn_policy(config: Config, obs_spec: ObsSpec, act_spec: ActSpec) -> CNNPolicy:
    shape = tuple(int(size) for size in obs_spec.shape)
    policy = config.policy
    channels = tuple(policy.conv_channels)
    if not channels:
        raise ConfigError("policy.conv_channels must name at least one convolution's width")
    for name in ("conv_kernels", "conv_strides"):
        given = getattr(policy, name)
        if given and len(given) != len(channels):
            raise ConfigError(
                f"policy.{name} = {list(given)}: give one per convolution of "
                f"policy.conv_channels = {list(channels)} (or none: "
                f"{'3' if name == 'conv_kernels' else '1'} for each)"
            )
    kernels = tuple(policy.conv_kernels) or (KERNEL,) * len(channels)
    strides = tuple(policy.conv_strides) or (1,) * len(channels)
    if feature_size(shape[1], shape[2], kernels, strides) is None:
        if not policy.conv_kernels and not policy.conv_strides:
            raise ConfigError(
                f"policy.conv_channels = {list(channels)}: {len(channels)} 3x3 convolutions "
                f"without padding do not fit the env's {shape[1]}x{shape[2]} frames; use at "
                f"most {(min(shape[1:]) - 1) // (KERNEL - 1)} layers"
            )
        raise ConfigError(
            f"policy.conv_channels = {list(channels)} with kernels {list(kernels)} and strides "
            f"{list(strides)}: the convolutions (no padding) do not fit the env's "
            f"{shape[1]}x{shape[2]} frames; use fewer layers, smaller kernels or strides"
        )
    return CNNPolicy(
        (shape[0], shape[1], shape[2]),
        act_spec.num_actions,
        channels,
        policy.conv_dense,
        obs_spec.scale,
        kernels,
        strides,
    )


# -- The first convolution from the frames' set cells (operant.cext.sparse_conv) ------------------
# For the update (an autograd Function) and the rollout.
#
# MinAtar's frames are 0/1 cells of which 1-8% are set (Breakout: about 33 of 400, most of them
# bricks; Seaquest about 12 of 1,000). A dense convolution multiplies every cell's weights
# whether it is set or not; walking the set cells and adding their weights to the positions they
# reach does a tenth (Breakout) to a hundredth (Seaquest) of that arithmetic and needs no
# im2col. The walk's cost grows with the cells set, so frames more than a quarter set
# (other image envs) keep torch's dense product: `sparse_applies` decides per batch.
#
# Values agree with torch's conv2d to float32 rounding (sums in another order;
# tests/test_cnn_policy.py compares outputs and gradients); the frames get no gradient (they are
# the observation).

# Above this share of nonzero cells the dense product is the faster one: the walk costs about
# k x k x O multiply-adds per set cell, against a dense product's rate several times higher.
DENSITY_LIMIT = 0.25


def sparse_applies(frames: torch.Tensor, conv: nn.Conv2d) -> bool:
    """Whether `conv` on `frames` can run here: C-contiguous uint8 frames on the host, a
    float32 host convolution of stride 1 without padding, and few enough cells set."""
    if (
        _sparse_native is None
        or frames.dtype != torch.uint8
        or frames.device.type != "cpu"
        or frames.dim() != 4
        or not frames.is_contiguous()
        or conv.weight.dtype != torch.float32
        or conv.weight.device.type != "cpu"
        or conv.bias is None
        or not conv.weight.is_contiguous()
        or not conv.bias.is_contiguous()
        or conv.stride != (1, 1)
        or conv.padding != (0, 0)
        or conv.dilation != (1, 1)
        or conv.groups != 1
        or conv.kernel_size[0] != conv.kernel_size[1]
        or frames.shape[1] != conv.in_channels
        or min(frames.shape[2:]) < conv.kernel_size[0]
    ):
        return False
    cells = frames.numel()
    return (
        cells == 0
        or _sparse_native.count_nonzero(frames.data_ptr(), cells) <= DENSITY_LIMIT * cells
    )


def _conv_shape(frames: torch.Tensor, weight: torch.Tensor) -> tuple[int, int, int, int, int, int]:
    batch, channels, height, width = frames.shape
    return batch, channels, height, width, int(weight.shape[2]), int(weight.shape[0])


def sparse_forward_into(
    frames: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    weight_t: torch.Tensor,
    out: torch.Tensor,
) -> torch.Tensor:
    """ReLU(conv(frames)) into `out`, C-contiguous float32 (B, H', W', O); `weight_t` is
    (C, k, k, O) scratch. For the rollout's workspace: allocates nothing."""
    _sparse_native.forward(
        frames.data_ptr(),
        weight.data_ptr(),
        bias.data_ptr(),
        weight_t.data_ptr(),
        out.data_ptr(),
        *_conv_shape(frames, weight),
    )
    return out


class SparseConvReLU(torch.autograd.Function):
    """ReLU(conv2d(frames, weight, bias)) as (B, H', W', O) feature maps (channels-last), with
    the weight's and bias's gradients; `sparse_applies` must hold for the frames and convolution."""

    @staticmethod
    def forward(ctx: Any, frames: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor):
        weight = weight.detach().contiguous()
        bias = bias.detach().contiguous()
        batch, channels, height, width, kernel, outs = _conv_shape(frames, weight)
        out = torch.empty((batch, height - kernel + 1, width - kernel + 1, outs))
        weight_t = torch.empty((channels, kernel, kernel, outs))
        sparse_forward_into(frames, weight, bias, weight_t, out)
        ctx.save_for_backward(frames, out)
        ctx.conv_shape = (batch, channels, height, width, kernel, outs)
        return out

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor):
        frames, out = ctx.saved_tensors
        batch, channels, height, width, kernel, outs = ctx.conv_shape
        grad = grads[0].contiguous()
        grad_weight = torch.empty((outs, channels, kernel, kernel))
        grad_bias = torch.empty(outs)
        grad_weight_t = torch.empty((channels, kernel, kernel, outs))
        masked = torch.empty(out[0].numel() if batch else 1)
        _sparse_native.backward(
            frames.data_ptr(),
            out.data_ptr(),
            grad.data_ptr(),
            grad_weight.data_ptr(),
            grad_bias.data_ptr(),
            grad_weight_t.data_ptr(),
            masked.data_ptr(),
            batch,
            channels,
            height,
            width,
            kernel,
            outs,
        )
        return None, grad_weight, grad_bias


def sparse_conv_relu(frames: torch.Tensor, conv: nn.Conv2d) -> torch.Tensor:
    """SparseConvReLU of `conv` on `frames`: (B, H', W', O)."""
    return SparseConvReLU.apply(frames, conv.weight, conv.bias)


# -- The dense layer by its weight transposed (operant.cext.im2col.refresh_transposed) ------------
# The CNN policy's dense layer (the flattened feature maps times a (out, in) weight) with the
# weight transposed into (in, out) first, in both of the policy's paths.
#
# MKL multiplies a row-major batch by a row-major (in, out) matrix (NN) faster than by the
# transposed view of nn.Linear's (out, in) weight (NT): for MinAtar's 1024 -> 128 layer on this
# VM's Xeon, 113 against 214 us at the rollout's 64 rows and 2.33 against 2.77 ms at a
# minibatch's 1,024 (docs/journal/2026-11-22-training-end-to-end.md). The transpose costs a
# copy of the weight:
# - the rollout (`transposed_for_rollout`) keeps one in its workspace and makes it again only
#   when the weight's bytes changed, which it learns by comparing them with the copy it was
#   made from (operant.cext.im2col.refresh_transposed: 10 us; once an update they differ);
# - the update (`DenseNN`, an autograd Function) transposes the weight each call (torch's
#   copy of the transposed view, 0.12-0.16 ms here, about 2x a tiled C loop's speed; the weight
#   changed since the last minibatch), and computes the input's and the weight's gradients from
#   the weight as it is, the layouts torch's own backward of the NT product uses.
# Values agree with nn.Linear's to float32 rounding (tests/test_cnn_policy.py). Elsewhere (other
# devices, dtypes, an unbuilt checkout) both fall back to nn.Linear's product.

TRANSPOSE_MAX_ELEMENTS = 1 << 20
"""Weights up to this size (4 MB) are transposed; a larger one's copy costs more than the
faster product saves (a 107,584 -> 128 layer over 84x84 frames, 55 MB, made the update about
3x slower than nn.Linear's product)."""


def _transposes(weight: torch.Tensor) -> bool:
    return (
        refresh_transposed is not None
        and weight.device.type == "cpu"
        and weight.dtype == torch.float32
        and weight.is_contiguous()
        and weight.numel() <= TRANSPOSE_MAX_ELEMENTS
    )


def transposed_for_rollout(weight: torch.Tensor, copy: torch.Tensor, seen: torch.Tensor):
    """The weight as the (in, out) matrix the rollout's product reads: `copy` (in, out), made
    again only where the weight's bytes differ from `seen` (out, in), the weight it was last
    made from; the transposed view where the copy does not apply. Allocates nothing."""
    if not _transposes(weight) or seen.shape != weight.shape or copy.shape != weight.t().shape:
        return weight.t()
    rows, cols = weight.shape
    refresh_transposed(weight.data_ptr(), seen.data_ptr(), copy.data_ptr(), rows, cols)
    return copy


class DenseNN(torch.autograd.Function):
    """x @ weight.T + bias with the weight transposed into a contiguous copy first."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor):
        weight_t = weight.t().contiguous()
        ctx.save_for_backward(x, weight)
        return torch.addmm(bias, x, weight_t)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor):
        x, weight = ctx.saved_tensors
        grad = grads[0]
        grad_x = grad.mm(weight) if ctx.needs_input_grad[0] else None
        grad_weight = _weight_grad(grad, x) if ctx.needs_input_grad[1] else None
        grad_bias = grad.sum(0) if ctx.needs_input_grad[2] else None
        return grad_x, grad_weight, grad_bias


def dense_product(x: torch.Tensor, layer: nn.Linear) -> torch.Tensor:
    """`layer(x)` for the update: DenseNN where it applies (float32 2-D input on the host)."""
    if (
        not _transposes(layer.weight)
        or layer.bias is None
        or x.dtype != torch.float32
        or x.dim() != 2
    ):
        return layer(x)
    return DenseNN.apply(x, layer.weight, layer.bias)


KBLOCK = 256
"""Rows a block of the weight gradient's sum (0: one product)."""


def _weight_grad(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """grad.T @ x summed over blocks of KBLOCK rows. MKL took longer over 1,024 rows at once
    than over four blocks of 256 accumulated (dense layer of MinAtar's network, 1,024-row
    minibatch, this VM's Xeon: the whole update step 1.049x, and 1.025x with blocks of 128,
    median of nine alternating rounds each; the product alone about 1.1x). The same sum in
    another order."""
    if KBLOCK <= 0 or x.shape[0] <= KBLOCK:
        return grad.t().mm(x)
    out = grad[:KBLOCK].t().mm(x[:KBLOCK])
    for start in range(KBLOCK, x.shape[0], KBLOCK):
        out.addmm_(grad[start : start + KBLOCK].t(), x[start : start + KBLOCK])
    return out


register_policy("cnn", reads_images, build_cnn_policy)

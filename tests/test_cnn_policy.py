"""The "cnn" policy (operant.trainer.policies.cnn): chosen for image observations, its rollout
path (im2col into workspaces, uint8 read in place) computing what its training path computes,
and refused in one line where it cannot read the observations."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from operant.envs.contract import ActSpec, ObsSpec
from operant.trainer.config import ConfigError, load_config
from operant.trainer.policies.cnn import CNNPolicy
from operant.trainer.policies.registry import build_policy, choose_policy

DISCRETE = ActSpec((), np.dtype(np.int64), 3)


def test_auto_chooses_the_cnn_for_frames_and_the_mlp_for_flat_observations():
    frames = ObsSpec((4, 10, 10), np.dtype(np.uint8))
    flat = ObsSpec((4,), np.dtype(np.float32))
    assert choose_policy("auto", frames, DISCRETE).name == "cnn"
    assert choose_policy("auto", flat, DISCRETE).name == "mlp"
    policy = build_policy(load_config(None, []), frames, DISCRETE)
    # MinAtar's network: 16 3x3 filters over 4 channels, 8x8x16 features into 128 units.
    assert isinstance(policy, CNNPolicy)
    assert policy.convs[0].weight.shape == (16, 4, 3, 3)
    assert policy.dense.weight.shape == (128, 8 * 8 * 16)
    assert policy.actor.out_features == 3 and policy.critic.out_features == 1


def test_a_cnn_on_flat_observations_is_refused_naming_policy_kind():
    flat = ObsSpec((4,), np.dtype(np.float32))
    with pytest.raises(ConfigError, match=r"policy.kind = 'cnn' cannot read float32 \(4,\)"):
        build_policy(load_config(None, ["policy.kind=cnn"]), flat, DISCRETE)


def test_too_many_layers_for_the_frame_are_refused_naming_the_field():
    frames = ObsSpec((4, 10, 10), np.dtype(np.uint8))
    config = load_config(None, ["policy.conv_channels=[8, 8, 8, 8, 8]"])
    with pytest.raises(ConfigError, match=r"policy.conv_channels = \[8, 8, 8, 8, 8\].*at most 4"):
        build_policy(config, frames, DISCRETE)


@pytest.mark.parametrize("conv_channels", [(16,), (8, 12)], ids=["minatar", "deeper"])
def test_the_rollout_path_computes_the_training_path(conv_channels):
    torch.manual_seed(0)
    policy = CNNPolicy((4, 10, 10), 5, conv_channels, dense=32)
    obs = (torch.rand(64, 4, 10, 10) < 0.2).to(torch.uint8)
    logits, values = policy.heads(obs)
    out = (torch.empty(64, dtype=torch.long), torch.empty(64), torch.empty(64))
    actions, logprob, rollout_values = policy.act(obs, torch.Generator().manual_seed(1), out)
    torch.testing.assert_close(rollout_values, values.detach())
    expected = torch.log_softmax(logits.detach(), -1).gather(-1, actions[:, None])[:, 0]
    torch.testing.assert_close(logprob, expected)
    torch.testing.assert_close(policy.value(obs), values.detach())
    # The rollout path reads any strides (a non-contiguous batch) as the training path does.
    strided = obs.repeat_interleave(2, dim=0)[::2]
    torch.testing.assert_close(policy.value(strided), values.detach())


def test_the_nature_network_on_atari_frames_from_the_config():
    # kernels and strides: the Nature DQN network (SB3's and CleanRL's Atari CNN) over 0-255
    # (4, 84, 84) frames; the rollout's path (strided patches, the scale as the first
    # matmul's alpha) computes the training path's values
    frames = ObsSpec((4, 84, 84), np.dtype(np.uint8), 1 / 255)
    config = load_config(
        None,
        [
            "policy.conv_channels=[32, 64, 64]",
            "policy.conv_kernels=[8, 4, 3]",
            "policy.conv_strides=[4, 2, 1]",
            "policy.conv_dense=512",
        ],
    )
    torch.manual_seed(0)
    policy = build_policy(config, frames, DISCRETE)
    assert isinstance(policy, CNNPolicy)
    assert [tuple(conv.weight.shape) for conv in policy.convs] == [
        (32, 4, 8, 8), (64, 32, 4, 4), (64, 64, 3, 3)
    ]  # fmt: skip
    assert policy.dense.weight.shape == (512, 7 * 7 * 64)  # 3,136 inputs, as Nature's
    obs = torch.randint(0, 256, (6, 4, 84, 84), dtype=torch.uint8)
    logits, values = policy.heads(obs)
    _, _, rollout_values = policy.act(obs, torch.Generator().manual_seed(1))
    torch.testing.assert_close(rollout_values, values.detach(), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(policy.value(obs), values.detach(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["policy.conv_channels=[32, 64]", "policy.conv_kernels=[8]"],
            r"policy.conv_kernels = \[8\]: give one per convolution of policy.conv_channels "
            r"= \[32, 64\] \(or none: 3 for each\)",
        ),
        (
            ["policy.conv_strides=[2, 2]"],
            r"policy.conv_strides = \[2, 2\]: give one per convolution .*\(or none: 1 for each\)",
        ),
        (
            [
                "policy.conv_channels=[8, 8]",
                "policy.conv_kernels=[8, 4]",
                "policy.conv_strides=[4, 2]",
            ],
            r"kernels \[8, 4\] and strides \[4, 2\]: the convolutions \(no padding\) do not fit "
            r"the env's 10x10 frames",
        ),
    ],
)
def test_kernels_and_strides_that_do_not_fit_are_one_line(overrides, message):
    frames = ObsSpec((4, 10, 10), np.dtype(np.uint8))
    with pytest.raises(ConfigError, match=message):
        build_policy(load_config(None, overrides), frames, DISCRETE)


def test_the_rollout_sees_every_change_of_the_dense_weight():
    """The rollout multiplies by a transposed copy of the dense weight, made again when the
    weight's bytes change: in place through the flat buffer (an optimiser step), by a state
    dict (a checkpoint), or in one element only."""
    from operant.trainer.loop.flat import FlatParameters

    torch.manual_seed(0)
    policy = CNNPolicy((4, 10, 10), 5)
    flat = FlatParameters(policy)
    obs = (torch.rand(64, 4, 10, 10) < 0.1).to(torch.uint8)

    def agrees() -> None:
        with torch.no_grad():
            expected = policy.heads(obs)[1]
        torch.testing.assert_close(policy.value(obs), expected)

    agrees()
    with torch.no_grad():
        flat.param.add_(torch.randn_like(flat.param) * 1e-2)  # what FlatAdam's step does
    agrees()
    state = {k: v.clone() for k, v in policy.state_dict().items()}
    state["dense.weight"] = torch.randn_like(state["dense.weight"])
    policy.load_state_dict(state)
    agrees()
    with torch.no_grad():
        policy.dense.weight[7, 300] += 5.0
    agrees()


def test_refresh_transposed_copies_only_on_a_change():
    from operant.cext.im2col import refresh_transposed

    weight = torch.randn(37, 70)
    seen = torch.full_like(weight, float("nan"))
    transposed = torch.empty(70, 37)
    args = (weight.data_ptr(), seen.data_ptr(), transposed.data_ptr(), 37, 70)
    assert refresh_transposed(*args) is True
    assert torch.equal(transposed, weight.t()) and torch.equal(seen, weight)
    assert refresh_transposed(*args) is False
    weight[36, 69] = -weight[36, 69]
    assert refresh_transposed(*args) is True
    assert torch.equal(transposed, weight.t())


@pytest.mark.parametrize("conv_channels", [(16,), (8, 12)], ids=["minatar", "deeper"])
def test_training_gradients_are_the_plain_networks(conv_channels):
    # `heads` runs channels-last with its ReLUs in place; the same network written plainly
    # (NCHW, out-of-place ReLUs, flattened in the same (H, W, C) order) has the same values and
    # the same gradient for every parameter.
    torch.manual_seed(0)
    policy = CNNPolicy((4, 10, 10), 5, conv_channels, dense=32)
    obs = (torch.rand(128, 4, 10, 10) < 0.2).to(torch.uint8)

    def plain(obs):
        x = obs.float()
        for conv in policy.convs:
            x = torch.relu(torch.nn.functional.conv2d(x, conv.weight, conv.bias))
        x = torch.relu(policy.dense(x.permute(0, 2, 3, 1).reshape(x.shape[0], -1)))
        return policy.actor(x), policy.critic(x).squeeze(-1)

    grads = []
    for heads in (policy.heads, plain):
        policy.zero_grad()
        logits, values = heads(obs)
        (torch.log_softmax(logits, -1)[:, 1].sum() + values.square().sum()).backward()
        grads.append([parameter.grad.clone() for parameter in policy.parameters()])
    for ours, reference in zip(*grads):
        torch.testing.assert_close(ours, reference, rtol=1e-5, atol=1e-6)
    assert any(grad.abs().sum() > 0 for grad in grads[0])


def test_operant_train_refuses_a_cnn_on_a_flat_env_in_one_line(tmp_path, capsys):
    from operant.trainer.run.main import main

    status = main(["--env", "CartPole-v1", "--set", "policy.kind=cnn", "--runs-dir", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert status == 2
    assert len(err.splitlines()) == 1
    assert "policy.kind = 'cnn' cannot read float32 (4,) observations" in err


@pytest.mark.parametrize(
    "batch, channels, size, kernel", [(64, 4, 10, 3), (3, 10, 10, 3), (5, 6, 7, 2)]
)
def test_native_patches_equal_torchs_unfold(batch, channels, size, kernel):
    """operant.cext.im2col (the rollout's first-layer im2col for uint8 frames) writes what
    torch's copy of the unfolded view writes, for MinAtar's 3x3 (unrolled) and another kernel."""
    from operant.cext.im2col import patches_u8

    frames = (torch.rand(batch, channels, size, size) < 0.3).to(torch.uint8) * 7
    out = size - kernel + 1
    cols = torch.full((batch, out, out, channels, kernel, kernel), -1.0)
    patches_u8(frames.data_ptr(), cols.data_ptr(), batch, channels, size, size, kernel)
    unfolded = frames.unfold(2, kernel, 1).unfold(3, kernel, 1).permute(0, 2, 3, 1, 4, 5)
    torch.testing.assert_close(cols, unfolded.float(), rtol=0, atol=0)
    with pytest.raises(ValueError, match="no 3x3 patches"):
        patches_u8(frames.data_ptr(), cols.data_ptr(), batch, channels, 2, 2, 3)


@pytest.mark.parametrize(
    "batch, channels, height, width, out_channels, kernel, density, top",
    [
        (256, 4, 10, 10, 16, 3, 0.08, 1),  # Breakout-like frames, MinAtar's network
        (9, 10, 10, 10, 32, 3, 0.05, 1),  # Seaquest's channels, the deeper option's first layer
        (5, 3, 7, 11, 12, 2, 0.2, 9),  # not square, another kernel, 12 channels, values > 1
        (4, 2, 12, 5, 8, 4, 0.15, 255),
        (6, 4, 10, 10, 24, 3, 0.1, 1),  # 16 channels a vector, then 8, in every pass
        (3, 2, 5, 5, 5, 3, 0.0, 1),  # empty frames: bias and ReLU only
    ],
)
def test_the_sparse_convolution_is_torchs(
    batch, channels, height, width, out_channels, kernel, density, top
):
    """operant.trainer.policies.cnn.sparse_conv_relu (the first layer from the frames' set
    cells) gives torch's conv2d + ReLU and the same weight and bias gradients, to float32
    rounding."""
    from operant.trainer.policies import cnn

    torch.manual_seed(0)
    conv = torch.nn.Conv2d(channels, out_channels, kernel)
    set_cells = torch.rand(batch, channels, height, width) < density
    frames = (set_cells * torch.randint(1, top + 1, set_cells.shape)).to(torch.uint8)
    assert cnn.sparse_applies(frames, conv)
    reference = torch.relu(conv(frames.float())).permute(0, 2, 3, 1)
    ours = cnn.sparse_conv_relu(frames, conv)
    scale = float(reference.detach().abs().max()) + 1.0
    torch.testing.assert_close(ours, reference, rtol=1e-5, atol=1e-6 * scale)
    weights = torch.randn(reference.shape)
    expected = torch.autograd.grad((reference * weights).sum(), [conv.weight, conv.bias])
    got = torch.autograd.grad((ours * weights).sum(), [conv.weight, conv.bias])
    for mine, theirs in zip(got, expected):
        torch.testing.assert_close(
            mine, theirs, rtol=1e-5, atol=1e-5 * (float(theirs.abs().max()) + 1)
        )


def test_the_sparse_convolution_leaves_other_inputs_to_torch():
    from operant.trainer.policies import cnn

    conv = torch.nn.Conv2d(4, 16, 3)
    sparse = (torch.rand(8, 4, 10, 10) < 0.1).to(torch.uint8)
    dense = (torch.rand(8, 4, 10, 10) < 0.5).to(torch.uint8)
    assert cnn.sparse_applies(sparse, conv)
    assert not cnn.sparse_applies(dense, conv)  # more than a quarter of the cells set
    assert not cnn.sparse_applies(sparse.float(), conv)
    assert not cnn.sparse_applies(sparse.transpose(2, 3), conv)  # not C-contiguous
    assert not cnn.sparse_applies(sparse, torch.nn.Conv2d(4, 16, 3, padding=1))
    assert not cnn.sparse_applies(sparse, torch.nn.Conv2d(4, 16, 3, bias=False))
    # Both paths give the policy the same values.
    torch.manual_seed(0)
    policy = CNNPolicy((4, 10, 10), 5)
    for obs in (sparse, dense):
        logits, values = policy.heads(obs)
        torch.testing.assert_close(policy.value(obs), values.detach())


@pytest.mark.parametrize("rows", [64, 600, 1024])
def test_the_dense_layer_through_its_transposed_weight_is_linears(rows):
    """operant.trainer.policies.cnn.dense_product (the product by a transposed copy, the weight's
    gradient summed in blocks of rows) gives nn.Linear's values and gradients."""
    from operant.trainer.policies import cnn

    torch.manual_seed(0)
    layer = torch.nn.Linear(1024, 128)
    x = torch.relu(torch.randn(rows, 1024)).requires_grad_(True)
    grad = torch.randn(rows, 128)
    expected = layer(x)
    expected.backward(grad)
    wants = [x.grad.clone(), layer.weight.grad.clone(), layer.bias.grad.clone()]
    x.grad = layer.weight.grad = layer.bias.grad = None
    got = cnn.dense_product(x, layer)
    got.backward(grad)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    for have, want in zip([x.grad, layer.weight.grad, layer.bias.grad], wants):
        torch.testing.assert_close(have, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("size", [0, 7, 255, 256, 511, 40_000])
def test_count_nonzero_counts_every_nonzero_byte(size):
    """operant.cext.sparse_conv.count_nonzero (applies()'s density), whose blocks of 255 bytes
    count in a byte: all-set blocks included."""
    from operant.cext.sparse_conv import count_nonzero

    generator = torch.Generator().manual_seed(size)
    for data in (
        (torch.rand(size, generator=generator) < 0.1).to(torch.uint8) * 3,
        torch.full((size,), 255, dtype=torch.uint8),
        torch.zeros(size, dtype=torch.uint8),
    ):
        assert count_nonzero(data.data_ptr(), size) == int((data != 0).sum())


def test_a_large_cnn_at_the_mlps_learning_rate_is_warned_about():
    from types import SimpleNamespace

    from torch import nn

    from operant.trainer.config import load_config
    from operant.trainer.run.console import large_cnn_warning

    def trainer(name: str, parameters: int) -> SimpleNamespace:
        return SimpleNamespace(policy_name=name, policy=nn.Linear(parameters - 1, 1))

    default = load_config(None, [])
    said = large_cnn_warning(default, trainer("cnn", 13_800_000))
    assert said == (
        "a 13.8M-parameter CNN at ppo.learning_rate = 0.003 (the default, the CartPole MLP's) "
        "tends to diverge; large frames train with Nature's network and a rate like "
        "CleanRL's 2.5e-4 (the config is in docs/envs.md)"
    )
    nature = load_config(None, ["policy.conv_strides=[4, 2, 1]"])
    assert "train with a rate like CleanRL's" in large_cnn_warning(
        nature, trainer("cnn", 1_700_000)
    )
    slow = load_config(None, ["ppo.learning_rate=2.5e-4"])
    assert large_cnn_warning(slow, trainer("cnn", 13_800_000)) is None
    assert large_cnn_warning(default, trainer("cnn", 600_000)) is None  # MinAtar's: 0.6M
    assert large_cnn_warning(default, trainer("mlp", 13_800_000)) is None

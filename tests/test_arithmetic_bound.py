"""The arithmetic bound of `operant bench trainer`: its rate loops compute what they claim, and
its FLOP counts for the shipped networks are the ones worked out by hand."""

from pathlib import Path

import numpy as np
import pytest
import torch

from operant.cext import arithmetic
from operant.trainer.bench.arithmetic import (
    Gemm,
    Pointwise,
    arithmetic_bound,
    flops_of,
    policy_shape,
    step_work,
)
from operant.trainer.config import derive, load_config
from operant.trainer.loop.flat import FlatAdam, FlatParameters
from operant.trainer.policies.cnn import CNNPolicy
from operant.trainer.policies.mlp import ActorCritic

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


@pytest.mark.parametrize("m, k, n", [(1, 1, 1), (5, 3, 70), (9, 130, 3), (4, 4, 128), (7, 17, 81)])
def test_gemm_loops_compute_the_product(m, k, n):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    expected = a.astype(np.float64) @ b.astype(np.float64)
    c = np.full((m, n), np.nan, np.float32)
    arithmetic.gemm_nn(a, b, c, 2)
    np.testing.assert_allclose(c, expected, rtol=1e-4, atol=1e-4)
    c[:] = np.nan
    arithmetic.gemm_nt(a, np.ascontiguousarray(b.T), c, 1)
    np.testing.assert_allclose(c, expected, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError):
        arithmetic.gemm_nn(a, b, np.empty((m + 1, n), np.float32), 1)


def test_pointwise_and_clipped_adam_do_the_trainers_arithmetic():
    x = np.linspace(-1, 1, 37, dtype=np.float32)
    y = np.full(37, 0.25, np.float32)
    arithmetic.pointwise(x, y, -2.0, 1)
    np.testing.assert_allclose(y, np.maximum(x * -2.0 + 0.25, 0), rtol=1e-6)

    rng = np.random.default_rng(1)
    param = rng.standard_normal(1027).astype(np.float32)
    grad = rng.standard_normal(1027).astype(np.float32)
    # The trainer's clip to 0.5 and its first FlatAdam step at lr 1e-3, the loop's constants.
    module = torch.nn.Linear(1027, 1, bias=False)
    flat = FlatParameters(module)
    flat.param.data.copy_(torch.from_numpy(param))
    flat.grad.copy_(torch.from_numpy(grad))
    optimizer = FlatAdam(flat.param, lr=1e-3)
    flat.clip_grad_norm_(0.5)
    optimizer.step()
    exp_avg, exp_avg_sq = np.zeros_like(param), np.zeros_like(param)
    arithmetic.clip_adam(param, grad, exp_avg, exp_avg_sq, 1)
    np.testing.assert_allclose(exp_avg, optimizer.exp_avg.numpy(), rtol=1e-5, atol=1e-10)
    # (1 - beta2 is 0.001 to 1e-5 relative in float32, however it is rounded)
    np.testing.assert_allclose(exp_avg_sq, optimizer.exp_avg_sq.numpy(), rtol=1e-4, atol=1e-12)
    np.testing.assert_allclose(param, flat.param.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_flops_of_the_throughput_config_by_hand():
    config = load_config(str(CONFIGS / "throughput" / "CartPole-v1.toml"), [])
    policy = ActorCritic(4, 2, [128], "relu", shared=True)
    work = step_work(policy_shape(policy), config, derive(config).minibatch_size)
    assert work.minibatch_size == 1024 and work.num_envs == 512 and work.epochs == 1
    matmuls = 2 * (4 * 128 + 128 * 3) + 2 * (128 * 3) + 2 * 128 * 3 + 2 * 4 * 128
    assert sum(i.flops for i in work.minibatch if isinstance(i, Gemm)) == 1024 * matmuls
    assert matmuls == 4352
    # bias 128 + 3, ReLU 128, log-softmax 8, its backward 6, losses 1 + 36, backward: bias
    # 3 + 128, ReLU 128; transcendentals: 3 + 2 + 1; Adam 16 per parameter (1,027).
    per_sample = 4352 + (131 + 128 + 8 + 6 + 37 + 131 + 128) + 6 + 16 * 1027 / 1024
    assert flops_of(work.minibatch) / 1024 == pytest.approx(per_sample)
    # The rollout: the forward (1,792 + 131 + 128) and sampling's log-softmax and CDF.
    assert flops_of(work.rollout) / 512 == 1792 + 131 + 128 + 8 + 3 + 4


def test_flops_of_the_default_config_count_the_critics_one_column():
    config = load_config(str(CONFIGS / "CartPole-v1.toml"), [])
    policy = ActorCritic(4, 2, [64, 64], "tanh")
    work = step_work(policy_shape(policy), config, derive(config).minibatch_size)
    assert work.minibatch_size == 512 and work.epochs == 2
    forward = 2 * (4 * 64 + 64 * 64 + 64 * 2) + 2 * (4 * 64 + 64 * 64 + 64 * 1)
    gemm = [i for i in work.rollout if isinstance(i, Gemm)]
    assert sum(i.flops for i in gemm) == 128 * forward
    # 3 FLOPs an element: tanh's backward over both nets' two hidden layers, and the
    # log-softmax's backward over the two logits
    three = [i for i in work.minibatch if isinstance(i, Pointwise) and i.flops_per_element == 3]
    assert sum(i.elements for i in three) == 512 * 64 * 4 + 512 * 2


def test_cnn_counts_the_convolution_as_im2col():
    config = load_config(str(CONFIGS / "minatar" / "Breakout.toml"), [])
    policy = CNNPolicy((4, 10, 10), 3)
    work = step_work(policy_shape(policy), config, derive(config).minibatch_size)
    conv = Gemm(1024 * 64, 4 * 9, 16)
    assert conv in work.minibatch  # forward
    assert Gemm(36, 1024 * 64, 16) in work.minibatch  # its weights' gradient
    assert Gemm(1024 * 64, 16, 36) not in work.minibatch  # no gradient for the frames
    assert Gemm(1024, 1024, 128) in work.minibatch
    assert Gemm(1024, 128, 4) in work.minibatch  # both heads in one product


def test_bound_is_consistent_with_its_rates():
    config = load_config(str(CONFIGS / "throughput" / "CartPole-v1.toml"), [])
    policy = ActorCritic(4, 2, [128], "relu", shared=True)
    bound = arithmetic_bound(config, policy, 1024, seconds=0.002)
    forward, train = bound["forward_samples_per_s"], bound["train_samples_per_s"]
    assert bound["bound_steps_per_s"] == pytest.approx(1 / (1 / forward + 1 / train), rel=1e-3)
    assert bound["train_flops_per_sample"] == pytest.approx(4943.0, abs=0.1)
    assert all(gemm["gflops"] > 0 for gemm in bound["gemms"])
    assert {gemm["way"] for gemm in bound["gemms"]} <= {
        "torch.mm",
        "c_nn",
        "c_nn_transposed",
        "c_dot",
    }

"""The native update (operant.cext.fused_mlp via operant.trainer.loop.fused) against torch autograd,
the reference: the loss's gradient on random batches for every supported network shape and
loss option, whole updates (clip and Adam included), the rollout's sampling from the same
uniforms, and which runs `ppo.update_impl` sends where."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from operant.trainer.config import Config, ConfigError, PPOConfig
from operant.trainer.loop.flat import FlatAdam, FlatParameters
from operant.trainer.loop.fused import NativeUpdate, make_native, native_unsupported
from operant.trainer.loop.ppo import _losses, ppo_update, update_path
from operant.trainer.loop.storage import Batch
from operant.trainer.policies.mlp import ActorCritic

pytest.importorskip("operant.cext.fused_mlp")

OBS_DIM, ACTIONS = 5, 3
# (shared, hidden sizes, activation): both layouts, depths 1 and 2, both activations, and
# widths that leave remainders after the kernels' 16-wide tiles.
NETWORKS = [
    (True, [32], "tanh"),
    (True, [24, 40], "relu"),
    (False, [32], "relu"),
    (False, [20, 33], "tanh"),
    (False, [64, 64], "tanh"),
]
LOSS_OPTIONS = {
    "defaults": {},
    "no value clipping": {"clip_vloss": False},
    "entropy bonus": {"ent_coef": 0.01},
    "raw advantages": {"norm_adv": False},
    "given moments": {},
}
GIVEN_MOMENTS = (0.3, 1.7)


def make_policy(
    shared: bool, hidden: list[int], activation: str, seed: int = 0, actions: int = ACTIONS
):
    torch.manual_seed(seed)
    policy = ActorCritic(OBS_DIM, actions, hidden, activation, shared=shared)
    return policy, FlatParameters(policy)


def random_batch(policy: ActorCritic, rows: int, seed: int) -> tuple[torch.Tensor, ...]:
    """A rollout whose ratios and value changes fall on both sides of the clip range."""
    generator = torch.Generator().manual_seed(seed)
    obs = torch.randn(rows, OBS_DIM, generator=generator) * 1.5
    actions = torch.randint(0, policy.num_actions, (rows,), generator=generator)
    with torch.no_grad():
        logprob, _, value = policy.evaluate(obs, actions)
    logprobs = logprob + 0.3 * torch.randn(rows, generator=generator)
    advantages = 2.0 * torch.randn(rows, generator=generator) + 0.5
    values = value + 0.3 * torch.randn(rows, generator=generator)
    returns = values + torch.randn(rows, generator=generator)
    return tuple(t.contiguous() for t in (obs, actions, logprobs, advantages, returns, values))


def torch_gradient(policy, flat, config: PPOConfig, batch, moments) -> torch.Tensor:
    """ppo_update's minibatch gradient through autograd (as _torch_epoch computes it)."""
    obs, actions, logprobs, advantages, returns, values = batch
    logprob, entropy, value = policy.evaluate(obs, actions, entropy=config.ent_coef > 0)
    log_ratio = logprob - logprobs
    given = None if moments is None else torch.tensor(moments)
    policy_loss, value_loss = _losses(
        config, log_ratio.exp(), advantages, value, returns, values, given
    )
    loss = policy_loss + config.vf_coef * value_loss
    if config.ent_coef > 0:
        loss = loss - config.ent_coef * entropy.mean()
    flat.zero_grad()
    loss.backward()
    return flat.grad.clone()


def native_gradient(policy, flat, config: PPOConfig, batch, moments) -> torch.Tensor:
    native = NativeUpdate(policy, flat, config)
    rows = batch[0].shape[0]
    grad = torch.full_like(flat.grad, float("nan"))  # every entry must be written
    stats = np.zeros(5, dtype=np.float32)
    native.kernel.gradient(
        *(t.numpy() for t in batch),
        np.arange(rows, dtype=np.int64),
        moments,
        native.scratch(rows),
        flat.param.detach().numpy(),
        grad.numpy(),
        stats,
    )
    return grad


def assert_parameterwise_close(flat, native, reference, relative: float) -> None:
    """Each parameter's gradient within `relative` of that parameter's largest entry."""
    at = 0
    for parameter in flat.params:
        count = parameter.numel()
        want, got = reference[at : at + count], native[at : at + count]
        scale = float(want.abs().max())
        error = float((got - want).abs().max())
        assert error <= relative * scale + 1e-12, (tuple(parameter.shape), error, scale)
        at += count


@pytest.mark.parametrize("network", NETWORKS, ids=lambda n: f"{n}")
@pytest.mark.parametrize("option", list(LOSS_OPTIONS))
def test_gradient_matches_autograd(network, option):
    policy, flat = make_policy(*network)
    config = PPOConfig(**LOSS_OPTIONS[option])
    moments = GIVEN_MOMENTS if option == "given moments" else None
    for seed, rows in ((1, 256), (2, 37), (3, 100)):  # blocks of 32: whole, short, both
        batch = random_batch(policy, rows, seed)
        reference = torch_gradient(policy, flat, config, batch, moments)
        native = native_gradient(policy, flat, config, batch, moments)
        assert torch.isfinite(native).all()
        assert float(reference.abs().max()) > 1e-3  # a batch that exercises the loss
        assert_parameterwise_close(flat, native, reference, 1e-5)


@pytest.mark.parametrize("actions", [2, 5, 18])
@pytest.mark.parametrize("shared", [True, False], ids=["shared", "separate"])
def test_other_action_counts_match_torch(actions, shared):
    """The softmax, loss and heads run along the rows in 16-row vectors over per-action
    columns, and the narrow layer four outputs at a time: action counts on either side of
    those (2: CartPole; 5: a group of four and one; 18: MinAtar's full set) give torch's
    gradient and sample torch's actions, for row counts that leave a short vector (37, 100)."""
    policy, flat = make_policy(shared, [24], "relu", actions=actions)
    config = PPOConfig(ent_coef=0.01)
    for seed, rows in ((4, 37), (5, 100)):
        batch = random_batch(policy, rows, seed)
        reference = torch_gradient(policy, flat, config, batch, None)
        native = native_gradient(policy, flat, config, batch, None)
        assert torch.isfinite(native).all()
        assert_parameterwise_close(flat, native, reference, 1e-5)
    native_update = NativeUpdate(policy, flat, config)
    obs = torch.randn(101, OBS_DIM) * 2
    results = []
    for attached in (None, native_update.act):
        policy.attach_native(attached)
        out = (torch.empty(101, dtype=torch.long), torch.empty(101), torch.empty(101))
        policy.act(obs, torch.Generator().manual_seed(9), out=out)
        results.append(out)
    assert torch.equal(results[1][0], results[0][0])
    torch.testing.assert_close(results[1][1], results[0][1], rtol=0, atol=1e-5)


def test_confident_policies_and_far_ratios_match_torch():
    """A policy so confident that some actions' shifted logits fall below -87 (where the
    softmax holds them, at the bottom of exp's range), and old log-probabilities 30 away on
    both sides (ratios of e^30 and e^-30): the gradient is torch's, relatively."""
    policy, flat = make_policy(True, [16], "relu")
    with torch.no_grad():
        policy.weights[-1][:, :ACTIONS].mul_(4000.0)  # the logits only, not the value
    config = PPOConfig()
    obs, actions, logprobs, advantages, returns, values = random_batch(policy, 64, 6)
    with torch.no_grad():
        logits = torch.relu(obs @ policy.weights[0] + policy.biases[0]) @ policy.weights[-1]
        shifted = logits[:, :ACTIONS] - logits[:, :ACTIONS].max(dim=1, keepdim=True).values
    assert float(shifted.min()) < -87.0
    far = torch.where(torch.arange(64) % 2 == 0, logprobs + 30.0, logprobs - 30.0)
    for old in (logprobs, far):
        batch = (obs, actions, old, advantages, returns, values)
        native = native_gradient(policy, flat, config, batch, None)
        reference = torch_gradient(policy, flat, config, batch, None)
        assert torch.isfinite(native).all() and torch.isfinite(reference).all()
        assert_parameterwise_close(flat, native, reference, 1e-4)


def test_gradient_clip_statuses_are_all_exercised():
    """The random batches put rows on every branch of both clips (else the test above would
    check only one subgradient)."""
    policy, _ = make_policy(False, [32], "tanh")
    obs, actions, logprobs, advantages, returns, values = random_batch(policy, 256, 1)
    with torch.no_grad():
        logprob, _, value = policy.evaluate(obs, actions)
    ratio = (logprob - logprobs).exp()
    assert ((ratio - 1).abs() > 0.2).any() and ((ratio - 1).abs() < 0.2).any()
    assert ((value - values).abs() > 0.2).any() and ((value - values).abs() < 0.2).any()


class OneRankGroup:
    """operant.trainer.distributed.group's group as one rank sees it alone: its collectives count
    their calls and leave the tensors as they are."""

    world_size = 1

    def __init__(self):
        self.averaged = 0

    def average_(self, tensor, what=""):
        self.averaged += 1

    def sum_(self, tensor, what=""):
        pass


def run_update(network, native: bool, config: PPOConfig, group=None):
    policy, flat = make_policy(*network, seed=3)
    optimizer = FlatAdam(flat.param, lr=3e-3, eps=1e-5)
    fused = NativeUpdate(policy, flat, config) if native else None
    batch = random_batch(policy, 512, 4)
    generator = torch.Generator().manual_seed(5)
    path = update_path(policy, flat, optimizer, config, 128, torch.device("cpu"), group, fused)
    stats = [ppo_update(path, Batch(*batch), generator) for _ in range(2)]
    return flat.param.detach().clone(), optimizer, stats


@pytest.mark.parametrize(
    "network, grouped",
    [(network, False) for network in NETWORKS[:4]] + [(NETWORKS[3], True)],
    ids=lambda value: f"{value}",
)
def test_whole_update_matches_torch(network, grouped):
    """Two ppo_update calls of 2 epochs x 4 minibatches: parameters, Adam's state and the
    statistics agree with torch's to float32 rounding's effect; also under torchrun's
    per-minibatch path (a one-rank group: global advantage moments, the gradient averaged
    between backward and clip)."""
    config = PPOConfig(update_epochs=2, ent_coef=0.01 if network[0] else 0.0)
    start = make_policy(*network, seed=3)[1].param.detach().clone()
    torch_group, native_group = (OneRankGroup(), OneRankGroup()) if grouped else (None, None)
    reference, torch_adam, torch_stats = run_update(network, False, config, torch_group)
    native, native_adam, native_stats = run_update(network, True, config, native_group)
    if grouped:
        assert native_group.averaged == torch_group.averaged == 16
    moved = float((reference - start).abs().max())
    assert moved > 1e-3
    assert float((native - reference).abs().max()) <= 1e-3 * moved
    assert native_adam.steps == torch_adam.steps == 16
    assert int(native_adam.step_count) == 16
    torch.testing.assert_close(native_adam.exp_avg_sq, torch_adam.exp_avg_sq, rtol=1e-3, atol=1e-9)
    for got, want in zip(native_stats, torch_stats):
        for field in ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction"):
            assert getattr(got, field) == pytest.approx(getattr(want, field), rel=1e-3, abs=1e-6)
        assert got.epochs == want.epochs


@pytest.mark.parametrize("network", NETWORKS[:4], ids=lambda n: f"{n}")
def test_act_samples_what_torch_samples_from_the_same_uniforms(network):
    policy, flat = make_policy(*network)
    native = NativeUpdate(policy, flat, PPOConfig())
    obs = torch.randn(300, OBS_DIM) * 2
    results = []
    for attached in (None, native.act):
        policy.attach_native(attached)
        out = (torch.empty(300, dtype=torch.long), torch.empty(300), torch.empty(300))
        generator = torch.Generator().manual_seed(7)
        policy.act(obs, generator, out=out)
        results.append((out, generator.get_state()))
    (torch_out, torch_state), (native_out, native_state) = results
    assert torch.equal(native_state, torch_state)  # one uniform per row, drawn the same way
    assert torch.equal(native_out[0], torch_out[0])
    assert len(set(native_out[0].tolist())) == ACTIONS
    torch.testing.assert_close(native_out[1], torch_out[1], rtol=0, atol=1e-5)
    torch.testing.assert_close(native_out[2], torch_out[2], rtol=0, atol=1e-5)


@pytest.mark.parametrize("network", NETWORKS, ids=lambda n: f"{n}")
def test_value_matches_torch(network):
    """The truncation bootstrap's value pass (ActorCritic.value) served natively: the critic
    tower alone (separate) or the whole net (shared), within float32 rounding of torch's;
    rows past the tiles' 8 and a strided input (served by torch) included."""
    policy, flat = make_policy(*network)
    native = NativeUpdate(policy, flat, PPOConfig())
    obs = torch.randn(203, OBS_DIM) * 2
    policy.attach_native(None, None)
    want = policy.value(obs, out=torch.empty(203))
    policy.attach_native(native.act, native.value)
    got = torch.full((203,), float("nan"))
    assert policy.value(obs, out=got) is got
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert not native.value(torch.randn(OBS_DIM, 203).t(), torch.empty(203))
    # The bootstrap's gathered pass: the flagged rows' values as the full pass's, bit for bit
    # (a row sums in one order wherever it falls), the others 0.
    where = (torch.arange(203) % 7 == 3).numpy().astype(np.uint8)
    gathered = torch.full((203,), float("nan"))
    assert policy.value_where(obs, where, gathered)
    flagged = torch.from_numpy(where.astype(bool))
    assert torch.equal(gathered[flagged], got[flagged])
    assert torch.equal(gathered[~flagged], torch.zeros(int((~flagged).sum())))
    assert policy.value_where(obs, np.zeros(203, np.uint8), gathered)
    assert torch.equal(gathered, torch.zeros(203))
    # The bootstrap's form: scale * value added to the flagged rows of add_to, in the call.
    rewards = np.linspace(-1, 1, 203, dtype=np.float32)
    added = rewards.copy()
    assert policy.value_where(obs, where, gathered, added, 0.99)
    want_added = rewards + np.float32(0.99) * got.numpy() * where
    np.testing.assert_allclose(added, want_added, rtol=1e-6, atol=1e-7)
    assert np.array_equal(added[where == 0], rewards[where == 0])
    torch.testing.assert_close(
        policy.value(obs.t().contiguous().t(), out=torch.empty(203)), want, rtol=1e-5, atol=1e-5
    )


def test_act_falls_back_to_torch_for_what_it_does_not_read():
    policy, flat = make_policy(True, [16], "relu")
    native = NativeUpdate(policy, flat, PPOConfig())
    out = (torch.empty(8, dtype=torch.long), torch.empty(8), torch.empty(8))
    generator = torch.Generator().manual_seed(0)
    strided = torch.randn(OBS_DIM, 8).t()
    assert not native.act(strided, generator, out)
    assert torch.equal(generator.get_state(), torch.Generator().manual_seed(0).get_state())


def test_update_impl_selects_and_refuses():
    discrete, flat = make_policy(True, [16], "relu")
    continuous = ActorCritic(OBS_DIM, 2, [16], continuous=True)
    continuous_flat = FlatParameters(continuous)
    cpu = torch.device("cpu")
    native_config = Config(ppo=PPOConfig(update_impl="native"))
    wide = ActorCritic(OBS_DIM, 17, [16], continuous=True)
    wide_flat = FlatParameters(wide)
    assert native_unsupported(discrete, cpu) is None
    assert native_unsupported(continuous, cpu) is None
    assert "16 action dimensions" in native_unsupported(wide, cpu)
    assert "CPU" in native_unsupported(discrete, torch.device("meta"))
    assert make_native(Config(), wide, wide_flat, cpu) is None
    assert make_native(Config(ppo=PPOConfig(update_impl="torch")), discrete, flat, cpu) is None
    assert isinstance(make_native(Config(), discrete, flat, cpu), NativeUpdate)
    assert isinstance(make_native(Config(), continuous, continuous_flat, cpu), NativeUpdate)
    with pytest.raises(ConfigError, match='ppo.update_impl = "native"'):
        make_native(native_config, wide, wide_flat, cpu)


def test_the_kernel_refuses_indices_outside_the_rollout():
    policy, flat = make_policy(True, [16], "relu")
    native = NativeUpdate(policy, flat, PPOConfig())
    optimizer = FlatAdam(flat.param, lr=1e-3)
    batch = list(random_batch(policy, 64, 0))
    order = torch.randperm(64)
    order[3] = 64
    before = flat.param.detach().clone()
    with pytest.raises(ValueError, match="outside"):
        native.epoch(optimizer, PPOConfig(), tuple(batch), order, 16, True, torch.zeros(5))
    batch[1] = batch[1].clone()
    batch[1][0] = ACTIONS
    with pytest.raises(ValueError, match="outside"):
        native.epoch(
            optimizer, PPOConfig(), tuple(batch), torch.randperm(64), 16, True, torch.zeros(5)
        )
    assert torch.equal(flat.param.detach(), before)


def test_a_copied_policy_keeps_its_own_parameters():
    """deepcopy (evaluation's snapshots) copies the attached native act with the module; the
    copy must not sample from the original's flat buffer after the original trains on."""
    policy, flat = make_policy(True, [16], "relu")
    make_native(Config(), policy, flat, torch.device("cpu"))
    clone = copy.deepcopy(policy)
    obs = torch.randn(4, OBS_DIM)
    with torch.no_grad():
        flat.param.add_(1.0)
    out = (torch.empty(4, dtype=torch.long), torch.empty(4), torch.empty(4))
    clone.act(obs, torch.Generator().manual_seed(0), out=out)
    torch.testing.assert_close(out[2], clone.heads(obs)[1].detach(), rtol=0, atol=1e-5)


# -- byte rows: frames and tokens, read sparse by the first layer -------------------------------
# (shape, share of bytes set, values, scale, shared, hidden): MinAtar's 0/1 frames (few cells
# set), dense bytes up to 255 scaled by 1/255 (a Python env's images, tokens), and a first
# layer narrower than the kernels' 16-wide tiles.
BYTE_NETWORKS = [
    ((4, 10, 10), 0.08, 2, 1.0, False, [64, 64]),
    ((7, 3), 0.9, 256, 1 / 255, True, [24]),
    ((4, 10, 10), 0.08, 2, 1.0, False, [8]),
]


def byte_policy(shape, scale, shared, hidden, seed=0):
    torch.manual_seed(seed)
    dim = int(np.prod(shape))
    policy = ActorCritic(dim, 6, hidden, "relu", shared=shared, byte_obs=True, obs_scale=scale)
    return policy, FlatParameters(policy)


def byte_batch(policy, shape, density, values, rows, seed):
    """A rollout of byte observations (rows, *shape), its other columns as random_batch's."""
    generator = torch.Generator().manual_seed(seed)
    set_cells = torch.rand(rows, *shape, generator=generator) < density
    obs = (set_cells * torch.randint(1, values, (rows, *shape), generator=generator)).to(
        torch.uint8
    )
    actions = torch.randint(0, policy.num_actions, (rows,), generator=generator)
    return rollout_columns(policy, obs, actions, generator)


def rollout_columns(policy, obs, actions, generator) -> tuple[torch.Tensor, ...]:
    """(obs, actions, logprobs, advantages, returns, values) around the policy's own
    log-probabilities and values, noised so that ratios and value changes fall on both
    sides of the clip range."""
    with torch.no_grad():
        logprob, _, value = policy.evaluate(obs, actions)
    noise = [torch.randn(obs.shape[0], generator=generator) for _ in range(4)]
    return (
        obs,
        actions,
        logprob + 0.3 * noise[0],
        2.0 * noise[1] + 0.5,
        value + noise[2],
        value + 0.3 * noise[3],
    )


@pytest.mark.parametrize("network", BYTE_NETWORKS, ids=lambda n: f"{n[0]}-{n[5]}")
def test_byte_rows_gradient_sample_and_value_match_torch(network):
    """The first layer over packed byte rows: the gradient within 1e-5 of autograd over the
    flattened float rows, the same samples from the same uniforms, the values and the
    bootstrap's gathered values as torch's, for whole and short blocks."""
    shape, density, values, scale, shared, hidden = network
    policy, flat = byte_policy(shape, scale, shared, hidden)
    config = PPOConfig(ent_coef=0.01)
    native = NativeUpdate(policy, flat, config)
    for seed, rows in ((1, 256), (2, 37)):
        batch = byte_batch(policy, shape, density, values, rows, seed)
        obs = batch[0]
        reference = torch_gradient(policy, flat, config, batch, None)
        got = native_gradient(policy, flat, config, (obs.view(rows, -1), *batch[1:]), None)
        assert torch.isfinite(got).all() and float(reference.abs().max()) > 1e-3
        assert_parameterwise_close(flat, got, reference, 1e-5)
        outs = []
        for attached in (None, native.act):
            policy.attach_native(attached, None)
            out = (torch.empty(rows, dtype=torch.long), torch.empty(rows), torch.empty(rows))
            policy.act(obs, torch.Generator().manual_seed(seed), out=out)
            outs.append(out)
        assert torch.equal(outs[0][0], outs[1][0])
        for want, have in zip(outs[0][1:], outs[1][1:]):
            torch.testing.assert_close(have, want, rtol=0, atol=1e-5)
        want_values = outs[0][2]
        where = (torch.arange(rows) % 3 == 0).numpy().astype(np.uint8)
        gathered = torch.full((rows,), float("nan"))
        assert native.value(obs, gathered, where)
        flagged = torch.from_numpy(where.astype(bool))
        torch.testing.assert_close(gathered[flagged], want_values[flagged], rtol=0, atol=1e-5)
        assert torch.equal(gathered[~flagged], torch.zeros(int((~flagged).sum())))


def test_byte_rows_whole_update_matches_torch():
    """ppo_update over a MinAtar-shaped byte rollout, native against torch: the same
    parameters after two epochs (float32 rounding apart) and the same statistics."""
    shape, density, values, scale, shared, hidden = BYTE_NETWORKS[0]
    results = []
    for impl in ("torch", "native"):
        policy, flat = byte_policy(shape, scale, shared, hidden, seed=3)
        batch = byte_batch(policy, shape, density, values, 512, seed=4)
        config = PPOConfig(update_epochs=2, ent_coef=0.01)
        native = NativeUpdate(policy, flat, config) if impl == "native" else None
        optimizer = FlatAdam(flat.param, lr=1e-3, eps=config.adam_eps)
        path = update_path(policy, flat, optimizer, config, 128, torch.device("cpu"), None, native)
        stats = ppo_update(path, Batch(*batch), torch.Generator().manual_seed(5))
        results.append((flat.param.detach().clone(), stats))
    (torch_param, torch_stats), (native_param, native_stats) = results
    assert float((native_param - torch_param).abs().max()) < 1e-5
    assert native_stats.approx_kl == pytest.approx(torch_stats.approx_kl, rel=1e-3, abs=1e-6)
    assert native_stats.entropy == pytest.approx(torch_stats.entropy, rel=1e-4)


def test_threads_share_a_minibatch_and_sum_in_a_fixed_order():
    """ppo.update_threads: the minibatch's blocks shared among worker threads give the
    one-thread gradient to float32 rounding, the same bits on every call with the same count
    (a resume reproduces a run), and the rollout's samples the same bits whatever the count."""
    shape, density, values, scale, shared, hidden = BYTE_NETWORKS[0]
    policy, flat = byte_policy(shape, scale, shared, hidden)
    batch = byte_batch(policy, shape, density, values, 300, seed=6)
    rows = batch[0].shape[0]
    grads = {}
    for threads in (1, 2, 3):
        native = NativeUpdate(policy, flat, PPOConfig(ent_coef=0.01, update_threads=threads))
        assert native.kernel.threads == threads
        runs = []
        for _ in range(2):
            grad = torch.full_like(flat.grad, float("nan"))
            native.kernel.gradient(
                batch[0].view(rows, -1).numpy(),
                *(t.numpy() for t in batch[1:]),
                np.arange(rows, dtype=np.int64),
                None,
                native.scratch(rows),
                flat.param.detach().numpy(),
                grad.numpy(),
                np.zeros(5, dtype=np.float32),
            )
            runs.append(grad)
        assert torch.equal(runs[0], runs[1])
        grads[threads] = runs[0]
    reference = torch_gradient(policy, flat, PPOConfig(ent_coef=0.01), batch, None)
    for threads in (2, 3):
        assert_parameterwise_close(flat, grads[threads], grads[1], 1e-6)
        assert_parameterwise_close(flat, grads[threads], reference, 1e-5)
    # The rollout's samples: a row's depends on that row alone, so every count gives the
    # same bits (100 rows: four blocks, the last short).
    samples = []
    for threads in (1, 2, 3):
        native = NativeUpdate(policy, flat, PPOConfig(update_threads=threads))
        out = (torch.empty(100, dtype=torch.long), torch.empty(100), torch.empty(100))
        assert native.act(batch[0][:100], torch.Generator().manual_seed(8), out)
        samples.append(out)
    for other in samples[1:]:
        assert all(torch.equal(a, b) for a, b in zip(samples[0], other))
    assert len(set(samples[0][0].tolist())) > 1


# -- Gaussian heads: continuous actions ---------------------------------------------------------
# (shared, hidden, action dimensions, activation): Pendulum's separate 64-64 tanh network, a
# shared one over three dimensions, and widths off the kernels' tiles.
GAUSSIAN_NETWORKS = [
    (False, [64, 64], 1, "tanh"),
    (True, [32], 3, "relu"),
    (False, [20, 33], 2, "tanh"),
]


def gaussian_batch(policy, rows, seed):
    """A rollout of continuous actions near the policy's means, its other columns as
    random_batch's."""
    generator = torch.Generator().manual_seed(seed)
    obs = torch.randn(rows, OBS_DIM, generator=generator)
    with torch.no_grad():
        mean = policy.heads(obs)[0]
    noise = torch.randn(rows, policy.num_actions, generator=generator)
    return rollout_columns(policy, obs, (mean + 0.8 * noise).contiguous(), generator)


@pytest.mark.parametrize("network", GAUSSIAN_NETWORKS, ids=lambda n: f"{n}")
def test_gaussian_gradient_and_samples_match_torch(network):
    """A Gaussian head natively: the loss's gradient (means, log standard deviations with and
    without the entropy bonus, the rest of the network) within 1e-5 of autograd, and the
    rollout's samples from the same standard normal draws as torch's."""
    shared, hidden, dims, activation = network
    torch.manual_seed(0)
    policy = ActorCritic(OBS_DIM, dims, hidden, activation, continuous=True, shared=shared)
    with torch.no_grad():
        policy.log_std.fill_(-0.3)
    flat = FlatParameters(policy)
    for seed, rows in ((1, 256), (2, 37)):
        batch = gaussian_batch(policy, rows, seed)
        for ent_coef in (0.0, 0.01):
            config = PPOConfig(ent_coef=ent_coef)
            reference = torch_gradient(policy, flat, config, batch, None)
            got = native_gradient(policy, flat, config, batch, None)
            assert float(reference[: policy.num_actions].abs().max()) > 1e-3  # log std's
            assert_parameterwise_close(flat, got, reference, 1e-5)
        native = NativeUpdate(policy, flat, PPOConfig())
        outs = []
        for attached in (None, native.act):
            policy.attach_native(attached, None)
            out = (torch.empty(rows, dims), torch.empty(rows), torch.empty(rows))
            generator = torch.Generator().manual_seed(seed)
            policy.act(batch[0], generator, out=out)
            outs.append((out, generator.get_state()))
        (want, want_state), (have, have_state) = outs
        assert torch.equal(have_state, want_state)  # the same draws
        for expected, actual in zip(want, have):
            torch.testing.assert_close(actual, expected, rtol=0, atol=1e-5)

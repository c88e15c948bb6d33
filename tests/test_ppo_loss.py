"""The fused PPO loss over a policy's heads (operant.trainer.loop.ppo_loss) against the torch path
of ppo._torch_epoch: the same loss, gradients at the logits and values, and statistics, to
float32 rounding, in every setting that changes the arithmetic; and whole updates that agree."""

from __future__ import annotations

import pytest
import torch

from operant.trainer.config import PPOConfig
from operant.trainer.loop import ppo, ppo_loss


def _torch_path(config, logits, values, batch, moments):
    actions, old_logp, advantages, returns, old_values = batch
    log_probs = torch.log_softmax(logits, -1)
    logprob = log_probs.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
    entropy = -(log_probs.exp() * log_probs).sum(-1)
    log_ratio = logprob - old_logp
    ratio = log_ratio.exp()
    policy_loss, value_loss = ppo._losses(
        config, ratio, advantages, values, returns, old_values, moments
    )
    loss = policy_loss + config.vf_coef * value_loss
    if config.ent_coef > 0:
        loss = loss - config.ent_coef * entropy.mean()
    statistics = ppo._minibatch_statistics(
        config, policy_loss, value_loss, entropy.detach(), ratio.detach(), log_ratio.detach()
    )
    return loss, statistics.detach()


def _batch(rows: int, actions: int, seed: int):
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, actions, generator=generator) * 2
    values = torch.randn(rows, generator=generator)
    taken = torch.randint(0, actions, (rows,), generator=generator)
    old_logp = torch.log_softmax(logits, -1).gather(-1, taken[:, None])[:, 0]
    # Ratios inside, on and outside the clip range; a third of the rows exactly at ratio 1.
    old_logp = old_logp + torch.randn(rows, generator=generator) * 0.3 * (
        torch.arange(rows) % 3 > 0
    )
    old_values = values + torch.randn(rows, generator=generator) * 0.3
    old_values[::5] = values[::5] - 0.2  # value - old exactly at the clip bound
    returns = values + torch.randn(rows, generator=generator)
    advantages = torch.randn(rows, generator=generator) * 3 + 0.5
    return logits, values, (taken, old_logp, advantages, returns, old_values)


@pytest.mark.parametrize("clip_vloss", [True, False])
@pytest.mark.parametrize("norm_adv", [True, False])
@pytest.mark.parametrize("ent_coef", [0.01, 0.0])
@pytest.mark.parametrize("rows, actions", [(1024, 6), (37, 3), (64, 70)])
def test_fused_loss_is_the_torch_paths(clip_vloss, norm_adv, ent_coef, rows, actions):
    config = PPOConfig(clip_vloss=clip_vloss, norm_adv=norm_adv, ent_coef=ent_coef, clip_coef=0.2)
    logits, values, batch = _batch(rows, actions, seed=rows + actions)
    results = []
    for way in ("torch", "fused"):
        lg = logits.clone().requires_grad_(True)
        vs = values.clone().requires_grad_(True)
        if way == "torch":
            loss, statistics = _torch_path(config, lg, vs, batch, None)
        else:
            loss, statistics = ppo_loss.losses(config, lg, vs, batch, None)
        (loss * 3.0).backward()  # the gradient scaled on the way in, as any caller may
        results.append((loss.detach(), lg.grad, vs.grad, statistics))
    (loss_t, dl_t, dv_t, st_t), (loss_f, dl_f, dv_f, st_f) = results
    torch.testing.assert_close(loss_f, loss_t, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(dl_f, dl_t, rtol=1e-4, atol=1e-7)
    torch.testing.assert_close(dv_f, dv_t, rtol=1e-4, atol=1e-7)
    torch.testing.assert_close(st_f, st_t, rtol=1e-5, atol=1e-6)
    assert float(st_t[4]) > 0  # some rows were clipped: both sides of the clip were exercised


def test_fused_loss_with_given_moments():
    config = PPOConfig(norm_adv=True)
    logits, values, batch = _batch(128, 4, seed=3)
    moments = torch.tensor([0.25, 2.5])
    grads = []
    for fused in (False, True):
        lg = logits.clone().requires_grad_(True)
        path = ppo_loss.losses if fused else _torch_path
        loss, _ = path(config, lg, values, batch, moments)
        loss.backward()
        grads.append(lg.grad)
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-4, atol=1e-7)


def test_an_update_through_the_fused_loss_is_the_torch_updates(monkeypatch):
    """Whole PPO updates of the CNN (two epochs of four minibatches) from the same start, with
    the fused loss and with the torch path, end at the same parameters to float32 rounding
    and report the same statistics."""
    from operant.trainer.loop.flat import FlatAdam, FlatParameters
    from operant.trainer.loop.storage import Batch
    from operant.trainer.policies.cnn import CNNPolicy

    generator = torch.Generator().manual_seed(0)
    rows = 256
    obs = (torch.rand(rows, 4, 10, 10, generator=generator) < 0.1).to(torch.uint8)
    actions = torch.randint(0, 3, (rows,), generator=generator)
    logprobs = torch.full((rows,), -1.1)
    advantages, returns, values = (torch.randn(rows, generator=generator) for _ in range(3))
    config = PPOConfig(update_epochs=2, ent_coef=0.01)
    ends, records = [], []
    native = ppo_loss._native
    for fused in (True, False):
        monkeypatch.setattr(ppo_loss, "_native", native if fused else None)
        torch.manual_seed(1)
        policy = CNNPolicy((4, 10, 10), 3)
        flat = FlatParameters(policy)
        optimizer = FlatAdam(flat.param, 1e-3)
        path = ppo.update_path(policy, flat, optimizer, config, 64, torch.device("cpu"))
        batch = Batch(obs, actions, logprobs, advantages, returns, values)
        record = ppo.ppo_update(path, batch, torch.Generator().manual_seed(2))
        ends.append(flat.param.detach().clone())
        records.append(record)
    assert not torch.equal(ends[0], ends[1])  # the two paths did run differently
    torch.testing.assert_close(ends[0], ends[1], rtol=1e-4, atol=1e-6)
    for name in ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction"):
        assert getattr(records[0], name) == pytest.approx(
            getattr(records[1], name), rel=1e-4, abs=1e-6
        )


@pytest.mark.parametrize("ent_coef", [0.01, 0.0])
def test_the_heads_inside_the_loss_give_every_parameter_the_torch_paths_gradient(ent_coef):
    """For a policy with a trunk and linear heads (the CNN), minibatch_loss applies the heads
    inside its Function: every parameter's gradient and the statistics are the torch path's."""
    from operant.trainer.policies.cnn import CNNPolicy

    torch.manual_seed(0)
    policy = CNNPolicy((4, 10, 10), 5)
    obs = (torch.rand(200, 4, 10, 10) < 0.1).to(torch.uint8)
    with torch.no_grad():
        logits, _ = policy.heads(obs)
    _, _, batch = _batch(200, 5, seed=9)
    taken = batch[0]
    old_logp = torch.log_softmax(logits, -1).gather(-1, taken[:, None])[:, 0] + 0.1 * torch.randn(
        200
    )
    batch = (taken, old_logp, *batch[2:])
    config = PPOConfig(ent_coef=ent_coef)
    results = []
    for fused in (False, True):
        policy.zero_grad()
        if fused:
            loss, statistics = ppo_loss.minibatch_loss(config, policy, obs, batch, None)
        else:
            logits, values = policy.heads(obs)
            loss, statistics = _torch_path(config, logits, values, batch, None)
        loss.backward()
        results.append(([p.grad.clone() for p in policy.parameters()], statistics))
    for torch_grad, fused_grad in zip(results[0][0], results[1][0]):
        torch.testing.assert_close(fused_grad, torch_grad, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(results[1][1], results[0][1], rtol=1e-5, atol=1e-6)


def test_an_action_out_of_range_is_refused_as_torchs_gather_refuses_it():
    logits, values, batch = _batch(16, 4, seed=5)
    actions = batch[0].clone()
    actions[3] = 4
    with pytest.raises(ValueError, match="1 of 16 actions are not in"):
        ppo_loss.losses(PPOConfig(), logits, values, (actions, *batch[1:]), None)
    with pytest.raises(RuntimeError):
        _torch_path(PPOConfig(), logits, values, (actions, *batch[1:]), None)

"""The rollout path allocates nothing after warm-up: no tensor storage (torch's profiler sees
every allocation its CPU allocator makes) and no array data (numpy reports its buffers to
tracemalloc). Covered: the policy's forward and sampling, storage writes, the env step, the
truncation bootstrap (a short time limit makes it run every few steps) and the observation
and reward normalisers, in the plain and the overlapped rollout; the grid world's agents
as rows with the token encoder policy; and MinAtar's uint8 frames with the CNN policy and
with the MLP (flattened, read natively)."""

from __future__ import annotations

import pytest
import torch
import traced
from torch.profiler import ProfilerActivity, profile

from operant.trainer.config import load_config
from operant.trainer.loop.train import Trainer

NUM_ENVS = 4096  # one float32 per env is 16 KiB: far above the tracemalloc bound below


def storage_allocations(run) -> list[tuple[str, int]]:
    """(op, bytes) for every tensor storage allocated while `run()` ran."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        run()
    return [
        (row.key, row.self_cpu_memory_usage)
        for row in prof.key_averages()
        if row.self_cpu_memory_usage > 0
    ]


@pytest.mark.parametrize(
    "env_id, extra",
    [
        ("CartPole-v1", []),
        ("CartPole-v1", ["policy.shared=true"]),
        ("Pendulum-v1", []),
        ("CartPole-v1", ["env.overlap=true"]),
        ("Pendulum-v1", ["env.overlap=true"]),
        ("Pendulum-v1", ["normalize.obs=true", "normalize.reward=true"]),
        ("Acrobot-v1", ["normalize.obs=true", "env.overlap=true"]),
        # 512 worlds of 8 agents: NUM_ENVS rows, uint8 token rows, the token encoder policy.
        (
            "Grid-v0",
            ["env.num_envs=512", "env.options.tokens=40", "env.options.window=5"],
        ),
        # uint8 (4, 10, 10) frames read in place by the CNN policy (im2col into workspaces).
        ("MinAtar-Breakout-v1", []),
        ("MinAtar-Breakout-v1", ["policy.kind=mlp"]),
        # The generic frame stack (operant.envs.face.frame_stack) sliding its stacks in C.
        ("CartPole-v1", ["env.frame_stack=4"]),
    ],
    ids=lambda value: value if isinstance(value, str) else ",".join(value) or "plain",
)
def test_rollout_allocates_nothing_after_warm_up(env_id, extra):
    config = load_config(
        None,
        [
            f"env.id={env_id}",
            "env.impl=auto" if env_id == "Grid-v0" else "env.impl=native",
            f"env.num_envs={NUM_ENVS}",
            "env.max_episode_steps=5",
            "ppo.num_steps=16",
            "train.total_steps=1_000_000",
            *extra,
        ],
    )
    trainer = Trainer(config)
    trainer.collect()  # warm-up: workspaces and lazily made buffers

    # tracemalloc first: the profiler below leaves work behind it (its own threads and
    # buffers) that would show up in a traced window after it. Each window's traced warm-up
    # rollout lets the interpreter grow its tables for tracing outside the window.
    found = traced.windows(
        traced.repeat(trainer.collect, 3), until=(1024, 8 * 1024), warm=trainer.collect
    )
    assert storage_allocations(trainer.collect) == []

    # Transient Python objects (tensor wrappers, ints) come and go; one array of the rollout
    # (16 KiB per float32 per env) would not fit in either bound: (held over 3 rollouts,
    # peak during them) in bytes, one window of three clean.
    assert traced.clean(found, held_below=1024, peak_below=8 * 1024), found
    # The bootstrap path ran: episodes were truncated at 5 steps during the rollout.
    assert int(trainer.storage.dones.sum()) >= NUM_ENVS * 3


def test_sampling_matches_the_categorical_distribution():
    """Inverse-CDF sampling draws each action with its probability (chi-square-free check:
    200K draws, every frequency within 1% absolute of the softmax)."""
    from operant.trainer.policies.mlp import ActorCritic

    policy = ActorCritic(3, 4, [8])
    with torch.no_grad():
        policy.weights[-1][0].copy_(torch.randn_like(policy.weights[-1][0]))
    obs = torch.randn(1, 3).expand(200_000, 3).contiguous()
    generator = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        actions, logprob, _ = policy.act(obs, generator)
        expected = torch.softmax(policy.heads(obs[:1])[0], -1)[0]
    frequencies = torch.bincount(actions, minlength=4).double() / len(actions)
    torch.testing.assert_close(frequencies, expected.double(), atol=0.01, rtol=0)
    torch.testing.assert_close(logprob, expected.log()[actions])

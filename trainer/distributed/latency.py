"""Whether ranks pay for a run: a minibatch's gradient all-reduce against its own arithmetic.

Every minibatch step of a K-rank run waits for one all-reduce of the flat gradient
(operant.trainer.distributed.group). Where that wait is longer than the minibatch's arithmetic
(CartPole's 4-64-64 MLP: a few hundred microseconds of collective against tens of arithmetic),
the update is latency-bound and K ranks train slower than one process stepping all the envs
(docs/distributed.md, "When ranks pay"). Each rank measures both at start, on its own
trainer: the median of a few all-reduces of its gradient buffer, and one local minibatch's
gradient computed on the (still empty) rollout storage, natively where the run's update is
native. Neither touches the parameters, the optimiser or a generator, so a run's draws and
results are those of a run that did not measure. Rank 0 then says in one line whether ranks
will slow the run; training goes on either way.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np
import torch

from operant.trainer.loop.fused import kernel_views

ROUNDS = 5


def allreduce_seconds(trainer: Any, group: Any) -> float:
    """The median time of an all-reduce of the trainer's flat gradient over the group."""
    times = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        group.average_(trainer.flat.grad, "the ranks' latency probe")
        times.append(time.perf_counter() - start)
    trainer.flat.zero_grad()
    return statistics.median(times)


def minibatch_seconds(trainer: Any) -> float:
    """The time of one local minibatch's gradient on the rollout storage's rows (zeros at
    start): the native kernel's where the update is native, else autograd's."""
    rows = trainer.derived.local_minibatch_size
    batch = tuple(tensor[:rows] for tensor in trainer.storage.flat())
    native = trainer.native
    times = []
    for _ in range(2):  # the second: the first also pays for its scratch's first touch
        start = time.perf_counter()
        if native is not None and rows > 1:
            native.kernel.gradient(
                *kernel_views(batch),
                np.arange(rows, dtype=np.int64),
                None,
                native.scratch(rows),
                native.param(),
                trainer.flat.grad.numpy(),
                np.zeros(5, dtype=np.float32),
            )
        else:
            logprob, _, value = trainer.policy.evaluate(batch[0], batch[1], entropy=True)
            (logprob.sum() + value.sum()).backward()
        times.append(time.perf_counter() - start)
    trainer.flat.zero_grad()
    return times[-1]


def verdict(world_size: int, allreduce_s: float, minibatch_s: float, steps: int) -> str | None:
    """The warning rank 0 says when the all-reduce outlasts the arithmetic it averages (None:
    ranks can pay)."""
    if allreduce_s <= minibatch_s:
        return None
    return (
        f"warning: {world_size} ranks will slow this run: each of its {steps} minibatch steps "
        f"an update waits {allreduce_s * 1e3:.2f} ms for the gradient's all-reduce, longer than "
        f"the step's own arithmetic ({minibatch_s * 1e3:.2f} ms here); one process stepping "
        'all the envs trains faster (docs/distributed.md, "When ranks pay"); training on'
    )


def probe(trainer: Any, group: Any) -> str | None:
    """Measure on every rank (the all-reduce is collective) and return the verdict on the
    ranks' mean times (the same on every rank: rank 0 says it)."""
    with torch.no_grad():
        allreduce_s = allreduce_seconds(trainer, group)
    minibatch_s = minibatch_seconds(trainer)
    means = torch.tensor([minibatch_s, allreduce_s], dtype=torch.float64)
    group.sum_(means, "the ranks' latency probe")
    steps = trainer.config.ppo.update_epochs * trainer.config.ppo.num_minibatches
    world = group.world_size
    return verdict(world, float(means[1]) / world, float(means[0]) / world, steps)

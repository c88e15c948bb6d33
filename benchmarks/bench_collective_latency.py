"""What one gloo all-reduce costs between two ranks on this machine, in a loop and between
computations as the trainer makes them (docs/journal/issue-15-several-ranks.md).

    torchrun --standalone --nproc-per-node 2 benchmarks/bench_collective_latency.py

Prints, for rank 0, microseconds per iteration of: a minibatch-sized computation alone (8
matmuls of 256 x 128 by 128 x 128), an all-reduce of the throughput config's gradient (1,027
floats) alone, the two in turn with a blocking all-reduce, and the two in turn with the
all-reduce's completion polled in a spin. Their difference is the collective's cost where
the trainer pays it.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.set_num_threads(1)
    a, w = torch.randn(256, 128), torch.randn(128, 128)
    gradient = torch.zeros(1027)

    def work() -> None:
        for _ in range(8):
            a @ w

    def all_reduce() -> None:
        dist.all_reduce(gradient)

    def blocking() -> None:
        work()
        dist.all_reduce(gradient)

    def spinning() -> None:
        work()
        handle = dist.all_reduce(gradient, async_op=True)
        while not handle.is_completed():
            pass
        handle.wait()

    for label, step in (
        ("computation", work),
        ("all-reduce in a loop", all_reduce),
        ("computation, then all-reduce", blocking),
        ("computation, then all-reduce polled", spinning),
    ):
        for _ in range(20):
            step()
        dist.barrier()
        started, count = time.perf_counter(), 300
        for _ in range(count):
            step()
        if rank == 0:
            print(f"{label}: {(time.perf_counter() - started) / count * 1e6:.0f} us", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

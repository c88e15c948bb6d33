"""What publishing into the metrics file costs training: the same Trainer with a real
Publisher (a real metrics.bin, heartbeat thread on) and without, alternating in one process,
same seed and budget.

    python benchmarks/bench_publish_overhead.py [--rounds 6] [--total-steps 100000]

In-process on purpose: separate `operant-train` processes differ by several percent from
run to run on their own (address layout, scheduling), which hides a sub-1% effect. Prints
each round, the medians, their ratio, and the median cost of one publish call.
"""

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from operant.trainer.config import load_config
from operant.trainer.telemetry import Publisher
from operant.trainer.train import Trainer


def run(publish: bool, total_steps: int, seed: int, costs: list[float]) -> float:
    config = load_config(overrides=[f"train.total_steps={total_steps}", f"train.seed={seed}"])
    trainer = Trainer(config)
    publisher = None
    if publish:
        directory = Path(tempfile.mkdtemp())
        publisher = Publisher(
            directory / "metrics.bin",
            "bench",
            config.env.id,
            trainer.impl,
            config.train.device,
            total_steps,
        )
        publisher.start()

        def log(record):
            started = time.perf_counter()
            publisher.publish(record)
            costs.append(time.perf_counter() - started)

        trainer.log = log
    started = time.perf_counter()
    last = trainer.run()
    steps_per_second = last.global_step / (time.perf_counter() - started)
    if publisher is not None:
        publisher.finish()
        publisher.close()
    return steps_per_second


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--total-steps", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    on, off, costs = [], [], []
    for round_index in range(args.rounds):
        order = (True, False) if round_index % 2 == 0 else (False, True)
        for publish in order:
            (on if publish else off).append(run(publish, args.total_steps, args.seed, costs))
        print(
            f"round {round_index + 1}: on {on[-1]:,.0f} steps/s, off {off[-1]:,.0f} steps/s",
            flush=True,
        )
    median_on, median_off = statistics.median(on), statistics.median(off)
    print(
        f"median: publication on {median_on:,.0f} steps/s, off {median_off:,.0f} steps/s, "
        f"on/off {median_on / median_off:.4f} ({(median_on / median_off - 1) * 100:+.2f}%); "
        f"one publish call {statistics.median(costs) * 1e6:.0f} us"
    )


if __name__ == "__main__":
    main()

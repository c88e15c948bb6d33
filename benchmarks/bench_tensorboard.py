"""What writing TensorBoard event files costs training: the same Trainer with the session's
TensorBoard service (operant.trainer.services.tensorboard.WriteTensorBoard: real event files, its
writer thread running) and without, alternating in one process, same seed and budget.

    python benchmarks/bench_tensorboard.py [--rounds 6] [--total-steps 100000]
        [--config configs/CartPole-v1.toml] [--set key=value ...]

In-process on purpose, like bench_publish_overhead.py: separate processes differ by several
percent on their own, which hides a 1% effect. "Off" runs no per-update callback at all, so
the cost measured is the service's alone, against the bare loop. Issue 14's bar: the median
on/off ratio of steps/s at least 0.99. Prints each round on stderr and one JSON line on
stdout: the machine, each round's steps/s, the medians, the median of the rounds' on/off
ratios, and the median time one update's scalars take on the loop's thread.
"""

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from operant.trainer.bench.measure import machine
from operant.trainer.config import load_config
from operant.trainer.loop.train import Trainer
from operant.trainer.services.tensorboard import WriteTensorBoard

BAR = 0.99


def run(
    tensorboard: bool, config_path: str | None, overrides: list[str], costs: list[float]
) -> float:
    """One training run's steps/s, with or without the TensorBoard service."""
    config = load_config(config_path, overrides)
    trainer = Trainer(config)
    service = None
    if tensorboard:
        service = WriteTensorBoard(Path(tempfile.mkdtemp()) / "tensorboard", trainer)
        service.on_start()

        def log(record):
            started = time.perf_counter()
            service.on_update(record)
            costs.append(time.perf_counter() - started)

        trainer.log = log
    started = time.perf_counter()
    last = trainer.run()
    steps_per_second = last.global_step / (time.perf_counter() - started)
    if service is not None:
        service.close()
    return steps_per_second


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--total-steps", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--config", help="a trainer config file (default: the defaults)")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one config value",
    )
    args = parser.parse_args()
    overrides = [
        *args.overrides,
        f"train.total_steps={args.total_steps}",
        f"train.seed={args.seed}",
    ]
    on, off, costs = [], [], []
    for round_index in range(args.rounds):
        order = (True, False) if round_index % 2 == 0 else (False, True)
        for tensorboard in order:
            (on if tensorboard else off).append(run(tensorboard, args.config, overrides, costs))
        print(
            f"round {round_index + 1}: on {on[-1]:,.0f} steps/s, off {off[-1]:,.0f} steps/s",
            file=sys.stderr,
            flush=True,
        )
    ratio = statistics.median(a / b for a, b in zip(on, off))
    print(
        json.dumps(
            {
                "benchmark": "tensorboard",
                "date": time.strftime("%Y-%m-%d"),
                "machine": machine(),
                "config": args.config,
                "overrides": overrides,
                "rounds": args.rounds,
                "sps_on": [round(value, 1) for value in on],
                "sps_off": [round(value, 1) for value in off],
                "sps_on_median": round(statistics.median(on), 1),
                "sps_off_median": round(statistics.median(off), 1),
                "ratio_median": round(ratio, 4),
                "cost_percent": round((1 - ratio) * 100, 2),
                "within_bar": ratio >= BAR,
                "update_on_loop_us_median": round(statistics.median(costs) * 1e6, 1),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()

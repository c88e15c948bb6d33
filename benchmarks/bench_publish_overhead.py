"""What publishing into the metrics file costs training: the same Trainer with a real
Publisher (a real metrics.bin, heartbeat thread on) and without, alternating in one process,
same seed and budget.

    python benchmarks/bench_publish_overhead.py [--rounds 6] [--total-steps 100000]
    python benchmarks/bench_publish_overhead.py --compare frame \\
        --config configs/minatar/Breakout.toml --total-steps 65536 [--set KEY=VALUE ...]

`--compare publish` (the default): publication on vs off. `--compare frame`: publication with
the frame region (env 0's latest observation, a pixel env's: format 1.2) vs the same
publication without it, to see what the frame adds to the publish call and to the run.
`--paired`: one run instead, whose every update is published into two files, one with the
frame and one without, in alternating order, each call timed: the two publish calls of an
update see the same machine, so their difference is the frame's cost even where the
machine's speed drifts too much for whole-run A/Bs (a shared, loaded machine).

In-process on purpose: separate `operant-train` processes differ by several percent from
run to run on their own (address layout, scheduling), which hides a sub-1% effect. Prints
each round, the medians, their ratio, the median cost of one publish call per arm, and the
median time of one update.
"""

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from operant.trainer.config import load_config
from operant.trainer.loop.train import Trainer
from operant.trainer.services.telemetry import Publisher, frame_source

ARMS = {"publish": ("on", "off"), "frame": ("frame", "no frame")}


def run(arm: str, args: argparse.Namespace, costs: list[float], updates: list[float]) -> float:
    """Steps/s of one whole run in `arm`; appends each publish call's seconds to `costs` and
    the run's seconds per update to `updates`."""
    config = load_config(
        args.config,
        overrides=[
            *args.overrides,
            f"train.total_steps={args.total_steps}",
            f"train.seed={args.seed}",
        ],
    )
    trainer = Trainer(config)
    publisher = None
    if arm != "off":
        directory = Path(tempfile.mkdtemp())
        publisher = Publisher(
            directory / "metrics.bin",
            "bench",
            config.env.id,
            trainer.impl,
            config.train.device,
            args.total_steps,
            frame=frame_source(trainer.env) if arm == "frame" else None,
        )
        if arm == "frame" and publisher.frame is None:
            raise SystemExit(f"{config.env.id} has no frame to publish (not an image env)")
        publisher.start()

        def log(record):
            started = time.perf_counter()
            publisher.publish(record)
            costs.append(time.perf_counter() - started)

        trainer.log = log
    started = time.perf_counter()
    last = trainer.run()
    elapsed = time.perf_counter() - started
    updates.append(elapsed / trainer.update)
    if publisher is not None:
        publisher.finish()
        publisher.close()
    return last.global_step / elapsed


def paired(args: argparse.Namespace) -> None:
    """One run; each update published with and without the frame, alternating which first."""
    config = load_config(
        args.config,
        overrides=[
            *args.overrides,
            f"train.total_steps={args.total_steps}",
            f"train.seed={args.seed}",
        ],
    )
    trainer = Trainer(config)
    directory = Path(tempfile.mkdtemp())
    publishers = {
        arm: Publisher(
            directory / f"{arm}.bin",
            "bench",
            config.env.id,
            trainer.impl,
            config.train.device,
            args.total_steps,
            frame=frame_source(trainer.env) if arm == "frame" else None,
        )
        for arm in ("frame", "no frame")
    }
    if publishers["frame"].frame is None:
        raise SystemExit(f"{config.env.id} has no frame to publish (not an image env)")
    costs: dict[str, list[float]] = {arm: [] for arm in publishers}
    clock = time.perf_counter

    def log(record):
        order = list(publishers) if record.updates % 2 else list(publishers)[::-1]
        for arm in order:
            started = clock()
            publishers[arm].publish(record)
            costs[arm].append(clock() - started)

    for publisher in publishers.values():
        publisher.start()
    trainer.log = log
    started = clock()
    trainer.run()
    per_update = (clock() - started) / trainer.update
    for publisher in publishers.values():
        publisher.finish()
        publisher.close()
    for arm, values in costs.items():
        median = statistics.median(values) * 1e6
        print(f"{arm}: one publish call {median:.1f} us (median of {len(values)})")
    # The first publish after an update runs on caches the update left cold: the difference
    # of a pair is the frame's cost plus or minus that, by which went first. Their mean
    # cancels it.
    by_order = [
        statistics.median(
            a - b
            for index, (a, b) in enumerate(zip(costs["frame"], costs["no frame"]))
            if index % 2 == parity
        )
        for parity in (0, 1)
    ]
    print(
        f"frame - no frame, per update: {sum(by_order) / 2 * 1e6:+.2f} us (the mean of the "
        f"medians with frame first, {by_order[0] * 1e6:+.2f} us, and second, "
        f"{by_order[1] * 1e6:+.2f} us); one update {per_update * 1e3:.2f} ms (both publishes)"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--total-steps", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--config", metavar="FILE.toml", help="a trainer config (default: none)")
    parser.add_argument("--compare", choices=tuple(ARMS), default="publish")
    parser.add_argument("--paired", action="store_true", help="with --compare frame: one run")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    if args.paired:
        paired(args)
        return
    first, second = ARMS[args.compare]
    sps: dict[str, list[float]] = {first: [], second: []}
    costs: dict[str, list[float]] = {first: [], second: []}
    updates: dict[str, list[float]] = {first: [], second: []}
    for round_index in range(args.rounds):
        order = (first, second) if round_index % 2 == 0 else (second, first)
        for arm in order:
            sps[arm].append(run(arm, args, costs[arm], updates[arm]))
        print(
            f"round {round_index + 1}: {first} {sps[first][-1]:,.0f} steps/s, "
            f"{second} {sps[second][-1]:,.0f} steps/s",
            flush=True,
        )
    median = {arm: statistics.median(values) for arm, values in sps.items()}
    ratio = median[first] / median[second]
    print(
        f"median: {first} {median[first]:,.0f} steps/s, {second} {median[second]:,.0f} steps/s, "
        f"{first}/{second} {ratio:.4f} ({(ratio - 1) * 100:+.2f}%)"
    )
    for arm in (first, second):
        if costs[arm]:
            print(
                f"{arm}: one publish call {statistics.median(costs[arm]) * 1e6:.1f} us (median "
                f"of {len(costs[arm])}), one update {statistics.median(updates[arm]) * 1e3:.2f} ms"
            )


if __name__ == "__main__":
    main()

"""Cost of publishing into the metrics file: ns per counter store, gauge store, snapshot publish,
history append, heartbeat and frame publish (a Seaquest-sized 10 x 10 x 10 frame, format 1.2),
from Python (what the trainer's loop pays per call) and from C (a nogil loop over the same
stores), plus the reader's cost for comparison.

    python benchmarks/bench_metrics.py [--rounds 5] [--calls 200000] [--json]

Each figure is the median over rounds. Python figures include the method call; "loop" is an
empty Python loop of the same length, for reference. Run on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from operant.cext.metrics import MetricsWriter
from operant.shared import metrics_layout as fmt
from operant.shared.reader import MetricsReader

SNAPSHOT_WORDS = 16
HISTORY_FIELDS = 32
FRAME = fmt.FrameSpec(shape=(10, 10, 10))


def make_writer(directory: Path, frame: fmt.FrameSpec | None = None) -> MetricsWriter:
    schema = fmt.make_schema(
        "bench",
        counters=["global_step"],
        gauges=["sps"],
        snapshot=[f"s{i}" for i in range(SNAPSHOT_WORDS)],
        history=[f"h{i}" for i in range(HISTORY_FIELDS)],
        frame=frame,
    )
    name = "frame.bin" if frame is not None else "metrics.bin"
    return MetricsWriter.create(directory / name, schema, history_capacity=1024)


def frame_cases(writer: MetricsWriter) -> dict[str, object]:
    """The frame publish as the trainer calls it: a view of env memory, two counts."""
    frame = np.zeros(FRAME.nbytes, dtype=np.uint8)
    publish_frame = writer.publish_frame

    def frame_publish(calls):
        for i in range(calls):
            publish_frame(frame, i, i)

    return {"frame": frame_publish}


def python_cases(writer: MetricsWriter) -> dict[str, object]:
    counter = writer.schema.slot("global_step")
    gauge = writer.schema.slot("sps")
    snapshot = np.arange(SNAPSHOT_WORDS, dtype=np.float64)
    record = np.arange(HISTORY_FIELDS, dtype=np.float64)
    set_counter, add_counter, set_gauge = writer.set_counter, writer.add_counter, writer.set_gauge
    publish, append, heartbeat = writer.publish_snapshot, writer.append_history, writer.heartbeat

    def loop(calls):
        for _ in range(calls):
            pass

    def counter_set(calls):
        for i in range(calls):
            set_counter(counter, i)

    def counter_add(calls):
        for _ in range(calls):
            add_counter(counter, 1)

    def gauge_set(calls):
        for _ in range(calls):
            set_gauge(gauge, 1.5)

    def snapshot_publish(calls):
        for _ in range(calls):
            publish(snapshot)

    def history_append(calls):
        for _ in range(calls):
            append(record)

    def heartbeat_tick(calls):
        for _ in range(calls):
            heartbeat()

    return {
        "loop": loop,
        "counter_set": counter_set,
        "counter_add": counter_add,
        "gauge": gauge_set,
        "snapshot": snapshot_publish,
        "history": history_append,
        "heartbeat": heartbeat_tick,
    }


def reader_cases(reader: MetricsReader) -> dict[str, object]:
    def snapshot_block(calls):
        for _ in range(calls):
            reader.snapshot_block()

    def full_snapshot(calls):
        for _ in range(calls):
            reader.snapshot()

    return {"snapshot_block": snapshot_block, "snapshot": full_snapshot}


def median_ns(function, calls: int, rounds: int) -> float:
    per_call = []
    for _ in range(rounds):
        start = time.perf_counter_ns()
        function(calls)
        per_call.append((time.perf_counter_ns() - start) / calls)
    return statistics.median(per_call)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as directory:
        writer = make_writer(Path(directory))
        frame_writer = make_writer(Path(directory), FRAME)
        results: dict[str, dict[str, float]] = {"python_ns": {}, "c_ns": {}, "reader_ns": {}}
        cases = {**python_cases(writer), **frame_cases(frame_writer)}
        for name, function in cases.items():
            results["python_ns"][name] = median_ns(function, args.calls, args.rounds)
        c_calls = args.calls * 50
        slots = {
            "counter_set": writer.schema.slot("global_step"),
            "counter_add": writer.schema.slot("global_step"),
            "gauge": writer.schema.slot("sps"),
        }
        for name in ("counter_set", "counter_add", "gauge", "snapshot", "history", "heartbeat"):
            rounds = [
                writer._benchmark(name, c_calls, slots.get(name, 0)) / c_calls
                for _ in range(args.rounds)
            ]
            results["c_ns"][name] = statistics.median(rounds)
        rounds = [frame_writer._benchmark("frame", c_calls) / c_calls for _ in range(args.rounds)]
        results["c_ns"]["frame"] = statistics.median(rounds)
        frame_writer.publish_frame(np.ones(FRAME.nbytes, dtype=np.uint8), 1, 1)
        with MetricsReader(frame_writer.path) as reader:
            read_frame = reader.frame

            def frame_read(calls):
                for _ in range(calls):
                    read_frame()

            results["reader_ns"]["frame"] = median_ns(frame_read, args.calls // 20, args.rounds)
        frame_writer.close()
        with MetricsReader(writer.path) as reader:
            for name, function in reader_cases(reader).items():
                calls = args.calls if name == "snapshot_block" else args.calls // 20
                results["reader_ns"][name] = median_ns(function, calls, args.rounds)
        writer.close()
    results["config"] = {
        "rounds": args.rounds,
        "calls": args.calls,
        "snapshot_words": SNAPSHOT_WORDS,
        "history_fields": HISTORY_FIELDS,
        "frame_bytes": FRAME.nbytes,
    }
    if args.json:
        print(json.dumps(results))
        return 0
    print(
        f"median of {args.rounds} rounds; snapshot = {SNAPSHOT_WORDS} words, "
        f"history record = {HISTORY_FIELDS} fields, frame = {FRAME.nbytes} bytes"
    )
    print(f"{'operation':<14} {'python ns/call':>15} {'C ns/op':>10}")
    for name, python_ns in results["python_ns"].items():
        c_ns = results["c_ns"].get(name)
        print(f"{name:<14} {python_ns:>15.1f} {'' if c_ns is None else f'{c_ns:.2f}':>10}")
    for name, reader_ns in results["reader_ns"].items():
        print(f"reader {name:<16} {reader_ns:>7.0f} ns/call")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

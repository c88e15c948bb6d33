"""A writer process for the metrics-file tests (run as a script, not collected by pytest).

    python metrics_writer_proc.py snapshot PATH WORDS         hammer the seqlock block + a counter
    python metrics_writer_proc.py history PATH CAPACITY FIELDS  hammer the history ring
    python metrics_writer_proc.py frame PATH C H W            hammer the frame region
    python metrics_writer_proc.py live PATH INTERVAL [--no-heartbeat] [--rank R/W]
        a run (with --rank: rank R of a run of W processes, on node `node-R`) that heartbeats
        and then obeys stdin lines: finish | interrupt | fail REASON

Each mode prints `ready` once the file is in place. Hammer modes stop after MAX_SECONDS so a
test that dies never leaves a spinning process behind.
"""

import sys
import time

import numpy as np

from operant.cext.metrics import MetricsWriter
from operant.shared import metrics_layout as fmt

MAX_SECONDS = 60.0


def hammer_snapshot(path: str, words: int) -> None:
    schema = fmt.make_schema(
        "stress-snapshot", counters=["hammer_count"], snapshot=[f"w{i}" for i in range(words)]
    )
    writer = MetricsWriter.create(path, schema, history_capacity=1)
    writer.set_state(fmt.STATE_RUNNING)
    slot = schema.slot("hammer_count")
    values = np.zeros(words)
    print("ready", flush=True)
    deadline = time.monotonic() + MAX_SECONDS
    i = 0
    while True:
        i += 1
        values.fill(i)
        # Counter first: a reader that sees snapshot i must then see a counter >= i.
        writer.set_counter(slot, i)
        writer.publish_snapshot(values)
        if not i & 0xFFFF and time.monotonic() > deadline:
            break


def hammer_history(path: str, capacity: int, fields: int) -> None:
    schema = fmt.make_schema("stress-history", history=[f"f{i}" for i in range(fields)])
    writer = MetricsWriter.create(path, schema, history_capacity=capacity)
    writer.set_state(fmt.STATE_RUNNING)
    values = np.zeros(fields)
    print("ready", flush=True)
    deadline = time.monotonic() + MAX_SECONDS
    index = 0
    while True:
        # Every field of record `index` holds `index`: a torn record shows two values.
        values.fill(index)
        writer.append_history(values)
        index += 1
        if not index & 0xFFFF and time.monotonic() > deadline:
            break


def hammer_frame(path: str, channels: int, height: int, width: int) -> None:
    spec = fmt.FrameSpec(shape=(channels, height, width))
    schema = fmt.make_schema("stress-frame", counters=["updates"], frame=spec)
    writer = MetricsWriter.create(path, schema, history_capacity=1)
    writer.set_state(fmt.STATE_RUNNING)
    frame = np.zeros(spec.nbytes, dtype=np.uint8)
    print("ready", flush=True)
    deadline = time.monotonic() + MAX_SECONDS
    i = 0
    while True:
        i += 1
        # Every byte of publication i holds i mod 256: a torn frame shows two values, or
        # bytes that do not match its update count.
        frame.fill(i & 0xFF)
        writer.publish_frame(frame, i, 2 * i)
        if not i & 0xFFFF and time.monotonic() > deadline:
            break


def live(path: str, interval: float, heartbeat: bool, rank: int = 0, world_size: int = 1) -> None:
    schema = fmt.make_schema(
        "live-run",
        env_id="CartPole-v1",
        counters=[("global_step", "steps")],
        gauges=["sps"],
        rank=rank,
        world_size=world_size,
        node=f"node-{rank}" if world_size > 1 else "",
    )
    writer = MetricsWriter.create(path, schema, heartbeat_interval_s=interval)
    if heartbeat:
        writer.start_heartbeat()
    writer.set_state(fmt.STATE_RUNNING)
    writer.set_counter(schema.slot("global_step"), 1234)
    writer.set_gauge(schema.slot("sps"), 567.5)
    print("ready", flush=True)
    for line in sys.stdin:
        command, _, argument = line.strip().partition(" ")
        if command == "finish":
            writer.set_state(fmt.STATE_FINISHED)
            break
        if command == "interrupt":
            writer.set_state(fmt.STATE_FINISHED, "SIGINT", interrupted=True)
            break
        if command == "fail":
            writer.set_state(fmt.STATE_FAILED, argument)
            break
    writer.close()


if __name__ == "__main__":
    mode, target, *rest = sys.argv[1:]
    if mode == "snapshot":
        hammer_snapshot(target, int(rest[0]))
    elif mode == "history":
        hammer_history(target, int(rest[0]), int(rest[1]))
    elif mode == "frame":
        hammer_frame(target, *map(int, rest[:3]))
    else:
        ranks = rest[rest.index("--rank") + 1] if "--rank" in rest else "0/1"
        rank, world_size = map(int, ranks.split("/"))
        live(target, float(rest[0]), "--no-heartbeat" not in rest, rank, world_size)

"""Runs and views for the monitor's tests: real metrics files written by the real writer, and a
fake data source.

As a script it is a trainer stand-in (a process that owns a metrics file):

    python monitor_fixtures.py ROOT RUN_ID MODE [UPDATES]

MODE `live` publishes UPDATES updates, prints `ready`, then keeps heartbeating and appending
one update every 0.1 s until stdin closes or says `finish`/`fail`; `run` does the same until
it is killed; `crash` publishes and exits without a final state (what SIGKILL leaves behind).
Neither runs longer than RUN_AT_MOST_S, so a test that dies leaves nothing running for long.
"""

from __future__ import annotations

import io
import math
import os
import select
import sys
import time
from pathlib import Path

import numpy as np
from rich.console import Console

from operant.cext.metrics import MetricsWriter
from operant.monitor.listing import RunRow
from operant.monitor.source import MetricInfo, ProcessInfo, RunUpdate, RunView
from operant.shared import metrics_layout as fmt
from operant.shared.frame import frame_palette
from operant.shared.reader import Frame
from operant.shared.runs import METRICS_FILE, create_run_dir, update_latest

ENV_ID = "CartPole-v1"
COUNTERS = [("global_step", "steps"), ("episodes", "episodes"), ("updates", "updates")]
GAUGES = [
    ("sps", "1/s"),
    ("episode_return_mean", ""),
    ("episode_return_min", ""),
    ("episode_return_max", ""),
    ("episode_length_mean", "steps"),
    ("policy_loss", ""),
    ("value_loss", ""),
    ("entropy", ""),
    ("approx_kl", ""),
    ("clip_fraction", ""),
    ("explained_variance", ""),
    ("learning_rate", ""),
    ("total_steps", "steps"),
    ("cpu_percent", "%"),
    ("rss_bytes", "bytes"),
    # Not one of the names the monitor knows: it must still be listed.
    ("grad_norm_p99", "", "99th percentile of the gradient norm"),
]
TEXTS = [("optimizer_note", "")]
# Published together under the seqlock, as the trainer does, so the breakdown is coherent.
SNAPSHOT = [
    ("phase_env_s", "s"),
    ("phase_forward_s", "s"),
    ("phase_store_s", "s"),
    ("phase_gae_s", "s"),
    ("phase_update_s", "s"),
    ("phase_publish_s", "s"),
]
TOTAL_STEPS = 500 * 1024
RUN_AT_MOST_S = 120.0
HISTORY = [
    "global_step",
    "sps",
    "episode_return_mean",
    "episode_length_mean",
    "policy_loss",
    "value_loss",
    "entropy",
    "approx_kl",
    "clip_fraction",
    "elapsed_s",
]
STEPS_PER_UPDATE = 1024
PHASES = {
    "phase_env_s": 0.020,
    "phase_forward_s": 0.012,
    "phase_store_s": 0.002,
    "phase_gae_s": 0.001,
    "phase_update_s": 0.030,
    "phase_publish_s": 0.0001,
}


def schema(run_id: str) -> fmt.Schema:
    return fmt.make_schema(
        run_id,
        env_id=ENV_ID,
        counters=COUNTERS,
        gauges=GAUGES,
        texts=TEXTS,
        snapshot=SNAPSHOT,
        history=HISTORY,
        writer="operant tests",
    )


def values_at(update: int) -> dict[str, float]:
    """A plausible run after `update` updates (1-based): return climbs, losses fall."""
    progress = update / (update + 20.0)
    return {
        "global_step": update * STEPS_PER_UPDATE,
        "episodes": update * 40,
        "updates": update,
        "sps": 40_000.0 + 100.0 * (update % 7),
        "episode_return_mean": 20.0 + 480.0 * progress,
        "episode_return_min": 9.0 + 100.0 * progress,
        "episode_return_max": 500.0 * progress + 30,
        "episode_length_mean": 20.0 + 480.0 * progress,
        "policy_loss": -0.01 * (1 - progress),
        "value_loss": 50.0 * (1 - progress) + 1,
        "entropy": 0.69 - 0.3 * progress,
        "approx_kl": 0.01 + 0.002 * (update % 3),
        "clip_fraction": 0.1,
        "explained_variance": 0.9 * progress,
        "learning_rate": 2.5e-4,
        "cpu_percent": 97.0,
        "rss_bytes": 312.0 * 2**20,
        "grad_norm_p99": 1.5,
        "elapsed_s": update * 0.025,
        "total_steps": TOTAL_STEPS,
        **PHASES,
    }


class Run:
    """A run directory with a real metrics file, written in this process."""

    def __init__(
        self,
        root: Path,
        run_id: str = "cartpole-20250101-000000-beef",
        *,
        heartbeat_interval_s: float = 1.0,
        history_capacity: int = 512,
        latest: bool = True,
    ):
        self.root = root
        self.run_id = run_id
        self.dir = create_run_dir(root, run_id)
        self.path = self.dir / METRICS_FILE
        self.schema = schema(run_id)
        self.writer = MetricsWriter.create(
            self.path,
            self.schema,
            history_capacity=history_capacity,
            heartbeat_interval_s=heartbeat_interval_s,
        )
        if latest:
            update_latest(root, run_id)
        self.updates = 0
        self.writer.set_state(fmt.STATE_RUNNING)

    def publish(self, count: int = 1) -> None:
        history = np.zeros(len(HISTORY))
        for _ in range(count):
            self.updates += 1
            values = values_at(self.updates)
            for name, _unit in COUNTERS:
                self.writer.set_counter(self.schema.slot(name), int(values[name]))
            for name, *_ in GAUGES:
                self.writer.set_gauge(self.schema.slot(name), values[name])
            for index, name in enumerate(HISTORY):
                history[index] = values[name]
            self.writer.append_history(history)
            self.writer.publish_snapshot(np.array([values[name] for name, _ in SNAPSHOT]))
        self.writer.set_text(self.schema.slot("optimizer_note"), "adam, no decay")
        self.writer.heartbeat()

    def finish(self, interrupted: bool = False) -> None:
        self.writer.set_state(fmt.STATE_FINISHED, interrupted=interrupted)

    def fail(self, reason: str) -> None:
        self.writer.set_state(fmt.STATE_FAILED, reason)

    def close(self) -> None:
        self.writer.close()


# --- fake source ------------------------------------------------------------------------

FROZEN_NOW = 1_750_000_000.0
"""The fake clock: every view is taken at this Unix time."""


def make_view(
    *,
    updates: int = 120,
    status: str = "running",
    run_id: str = "cartpole-20250615-120000-beef",
    **changes,
) -> RunView:
    """A view as ReaderSource would build it for a run `updates` updates in, at FROZEN_NOW."""
    values = values_at(updates)
    metrics: dict[str, int | float | str] = {}
    columns = []
    for name, unit in COUNTERS:
        metrics[name] = int(values[name])
        columns.append(MetricInfo(name, "counter", unit))
    for name, unit, *description in GAUGES:
        metrics[name] = values[name]
        columns.append(MetricInfo(name, "gauge", unit, description[0] if description else ""))
    metrics["optimizer_note"] = "adam, no decay"
    columns.append(MetricInfo("optimizer_note", "text"))
    for name, unit in SNAPSHOT:
        metrics[name] = values[name]
        columns.append(MetricInfo(name, "snapshot", unit))
    history = {name: tuple(values_at(u)[name] for u in range(1, updates + 1)) for name in HISTORY}
    fields = dict(
        run_id=run_id,
        run_dir=f"/runs/{run_id}",
        env_id=ENV_ID,
        status=status,
        state={"finished": "finished", "failed": "failed"}.get(status, "running"),
        pid=4242,
        hostname="trainer-host",
        uptime_s=754.0,
        heartbeat_age_s=0.4,
        heartbeat_interval_s=1.0,
        metrics=metrics,
        columns=tuple(columns),
        history=history,
        history_head=updates,
        process=ProcessInfo(97.0, 312.0 * 2**20, "psutil"),
        taken_at=FROZEN_NOW,
    )
    fields.update(changes)
    return RunView(**fields)


def breakout_frame() -> Frame:
    """A MinAtar Breakout frame as a run publishes it: three rows of bricks with two gaps, the
    ball with its trail, the paddle on the bottom row."""
    data = bytearray(4 * 10 * 10)

    def set_square(channel: int, row: int, column: int) -> None:
        data[(channel * 10 + row) * 10 + column] = 1

    for row in (1, 2, 3):
        for column in range(10):
            if (row, column) not in ((3, 2), (3, 6)):
                set_square(3, row, column)
    set_square(1, 6, 5)
    set_square(2, 5, 4)
    set_square(0, 9, 4)
    return Frame(
        shape=(4, 10, 10),
        dtype="uint8",
        channels=("paddle", "ball", "trail", "brick"),
        colors=frame_palette(4),
        env=0,
        updates=120,
        global_step=122_880,
        data=bytes(data),
    )


def run_rows() -> list[RunRow]:
    return [
        RunRow(
            run_id="cartpole-20250615-110000-aaaa",
            env_id=ENV_ID,
            status="finished",
            global_step=500_000,
            sps=41_000.0,
            episode_return_mean=500.0,
            age_s=5400.0,
        ),
        RunRow(
            run_id="cartpole-20250615-120000-beef",
            env_id=ENV_ID,
            status="running",
            global_step=122_880,
            sps=40_100.0,
            episode_return_mean=400.0,
            age_s=754.0,
        ),
        RunRow(
            run_id="pendulum-20250615-123000-cafe",
            env_id="Pendulum-v1",
            status="crashed",
            global_step=8_192,
            sps=math.nan,
            episode_return_mean=-1200.0,
            age_s=60.0,
        ),
    ]


class FakeSource:
    """A SnapshotSource that posts the views a test gives it, when the test says so."""

    interval_s = 1.0

    def __init__(self, *views: RunView, rows: list[RunRow] | None = None):
        self.views = list(views) or [make_view()]
        self.rows = run_rows() if rows is None else rows
        self.target = None
        self.started = False
        self.stopped = False
        self.attached: list[str] = []

    def start(self, target) -> None:
        self.target, self.started = target, True
        target.post_message(RunUpdate(self.views[0]))

    def stop(self) -> None:
        self.stopped = True

    def attach(self, run_id: str) -> None:
        self.attached.append(run_id)
        self.push(make_view(run_id=run_id, updates=10))

    def runs(self) -> list[RunRow]:
        return self.rows

    def push(self, view: RunView) -> None:
        self.target.post_message(RunUpdate(view))


def screen_text(app) -> str:
    """What a terminal would show of the app's current screen, as plain text lines."""
    width, height = app.size
    console = Console(
        width=width,
        height=height,
        file=io.StringIO(),
        force_terminal=True,
        color_system=None,
        record=True,
        legacy_windows=False,
        safe_box=False,
    )
    console.print(
        app.screen._compositor.render_update(full=True, screen_stack=app._background_screens)
    )
    return console.export_text()


# --- the trainer stand-in ---------------------------------------------------------------


def _main(argv: list[str]) -> int:
    root, run_id, mode = Path(argv[0]), argv[1], argv[2]
    updates = int(argv[3]) if len(argv) > 3 else 30
    run = Run(root, run_id, heartbeat_interval_s=0.2)
    run.publish(updates)
    if mode == "crash":
        print("ready", flush=True)
        os._exit(0)
    run.writer.start_heartbeat()
    print("ready", flush=True)
    deadline = time.monotonic() + RUN_AT_MOST_S
    while time.monotonic() < deadline:
        if mode == "run":
            time.sleep(0.1)
            run.publish()
            continue
        ready, _, _ = select.select([sys.stdin], [], [], 0.1)
        if ready:
            line = sys.stdin.readline().strip()
            if line == "finish" or not line:
                run.finish()
                break
            if line.startswith("fail"):
                run.fail(line[5:] or "failed")
                break
        run.publish()
    else:
        run.finish()
    run.close()
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))

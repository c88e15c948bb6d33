"""What the trainer publishes into its run's metrics file, and when.

The schema is built here from the names below; readers (monitor, `operant runs`,
`--json`, exporter) render whatever it describes. Once per update the trainer stores counters
and gauges (one atomic word each), the per-phase times as one seqlocked snapshot (a coherent
breakdown), and one history record; a native thread ticks the heartbeat between updates,
so a long update never looks stalled. Nothing here runs per environment step.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from operant.shared import metrics_layout as layout
from operant.trainer.train import PHASES

COUNTERS = (
    ("global_step", "steps", "Environment steps taken, summed over envs."),
    ("episodes", "episodes", "Episodes finished."),
    ("updates", "updates", "PPO updates done."),
)
GAUGES = (
    ("sps", "steps/s", "Environment steps per second over the last update."),
    ("sps_mean", "steps/s", "Environment steps per second since training started."),
    ("elapsed_s", "s", "Seconds since training started."),
    ("total_steps", "steps", "The run's step budget."),
    ("episode_return_mean", "", "Mean return of the last 100 finished episodes."),
    ("episode_return_min", "", "Lowest return among episodes finished in the last update."),
    ("episode_return_max", "", "Highest return among episodes finished in the last update."),
    ("episode_length_mean", "steps", "Mean length of episodes finished in the last update."),
    ("policy_loss", "", "Clipped surrogate loss (last epoch's mean)."),
    ("value_loss", "", "Value loss (last epoch's mean)."),
    ("entropy", "nats", "Policy entropy (last epoch's mean)."),
    ("approx_kl", "", "Approximate KL between old and new policy."),
    ("clip_fraction", "", "Fraction of samples whose ratio was clipped."),
    ("explained_variance", "", "How much of the returns' variance the value function explains."),
    ("learning_rate", "", "Adam step size of the last update."),
    ("cpu_percent", "%", "The trainer process's CPU use (100 = one core)."),
    ("rss_bytes", "bytes", "The trainer process's resident memory."),
)
TEXTS = (
    ("env_id", "", "Environment id."),
    ("env_impl", "", "Environment implementation (native, torch, reference)."),
    ("device", "", "Torch device of the policy."),
)
PHASE_FIELDS = tuple((f"phase_{name}_s", "s", f"Seconds in the {name} phase during the last update.")
                     for name in PHASES)
HISTORY = (
    ("global_step", "steps"), ("elapsed_s", "s"), ("sps", "steps/s"),
    ("episode_return_mean", ""), ("episode_length_mean", "steps"),
    ("policy_loss", ""), ("value_loss", ""), ("entropy", "nats"), ("approx_kl", ""),
    ("clip_fraction", ""), ("explained_variance", ""), ("learning_rate", ""),
    *((name, unit) for name, unit, _ in PHASE_FIELDS),
)
# Metric name -> key of the progress record (progress.jsonl) it is published from.
RECORD_KEYS = {"updates": "update"}
HISTORY_CAPACITY = 8192
HEARTBEAT_INTERVAL_S = 0.5
RESOURCE_INTERVAL_S = 1.0


def build_schema(run_id: str, env_id: str) -> layout.Schema:
    from operant import __version__

    return layout.make_schema(run_id, env_id=env_id, counters=COUNTERS, gauges=GAUGES,
                              texts=TEXTS, snapshot=PHASE_FIELDS, history=HISTORY,
                              writer=f"operant {__version__}")


def _number(value: Any) -> float:
    return float("nan") if value is None else float(value)


class Publisher:
    """The trainer's side of the metrics file for one run."""

    def __init__(self, path: Path, run_id: str, env_id: str, impl: str, device: str,
                 total_steps: int):
        from operant.cext.metrics import MetricsWriter

        self.schema = build_schema(run_id, env_id)
        self.writer = MetricsWriter.create(path, self.schema, history_capacity=HISTORY_CAPACITY,
                                           heartbeat_interval_s=HEARTBEAT_INTERVAL_S)
        slot = self.schema.slot
        self._counter_slots = [(name, slot(name)) for name, _, _ in COUNTERS]
        self._gauge_slots = [(name, slot(name)) for name, _, _ in GAUGES
                             if name not in ("cpu_percent", "rss_bytes", "total_steps")]
        self._history_names = [name for name, _ in HISTORY]
        self._history = np.zeros(len(HISTORY), dtype=np.float64)
        self._phases = np.zeros(len(PHASE_FIELDS), dtype=np.float64)
        self._cpu_slot, self._rss_slot = slot("cpu_percent"), slot("rss_bytes")
        self._process = psutil.Process()
        self._process.cpu_percent()  # primes psutil's CPU-time baseline
        self._last_resources = 0.0
        self.writer.set_gauge(slot("total_steps"), float(total_steps))
        self.writer.set_text(slot("env_id"), env_id)
        self.writer.set_text(slot("env_impl"), impl)
        self.writer.set_text(slot("device"), device)

    def start(self) -> None:
        """The run is running: heartbeat thread on, state word last."""
        self.writer.start_heartbeat()
        self.writer.set_state(layout.STATE_RUNNING)

    def publish(self, record: dict[str, Any]) -> None:
        writer = self.writer
        for name, slot in self._counter_slots:
            writer.set_counter(slot, int(record[RECORD_KEYS.get(name, name)]))
        for name, slot in self._gauge_slots:
            writer.set_gauge(slot, _number(record.get(name)))
        phases = record["phase_s"]
        for index, name in enumerate(PHASES):
            self._phases[index] = phases[name]
        writer.publish_snapshot(self._phases)
        history = self._history
        for index, name in enumerate(self._history_names):
            if name.startswith("phase_"):
                history[index] = phases[name[len("phase_"):-len("_s")]]
            else:
                history[index] = _number(record.get(name))
        writer.append_history(history)
        now = time.monotonic()
        if now - self._last_resources >= RESOURCE_INTERVAL_S:
            # Two /proc reads: throttled so that even tiny updates pay for them rarely.
            self._last_resources = now
            writer.set_gauge(self._cpu_slot, self._process.cpu_percent())
            writer.set_gauge(self._rss_slot, float(self._process.memory_info().rss))

    def resume(self, records: list[dict[str, Any]]) -> None:
        """Continue a resumed run in this new file: number the history from the first of
        `records` (the run's newest progress records, oldest first, at most HISTORY_CAPACITY),
        replay them, and so show the last one's values, as if this file had been written all
        along. Readers of the run's previous file see it replaced and reopen."""
        if not records:
            return
        self.writer.skip_history(int(records[0][RECORD_KEYS["updates"]]) - 1)
        for record in records:
            self.publish(record)

    def finish(self, interrupted: bool = False, reason: str = "") -> None:
        self.writer.set_state(layout.STATE_FINISHED, reason, interrupted=interrupted)

    def fail(self, reason: str) -> None:
        self.writer.set_state(layout.STATE_FAILED, reason)

    def close(self) -> None:
        self.writer.close()

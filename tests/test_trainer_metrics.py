"""A real training run publishes into its metrics file what progress.jsonl records."""

import json
import math
import os
import subprocess
import sys

from operant.shared.reader import MetricsReader


def test_trainer_publishes_counters_gauges_phases_and_history(tmp_path):
    env = dict(os.environ, OPERANT_RUNS_DIR=str(tmp_path))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "operant.trainer.run.main",
            # The torch update: the CPU gauge is first sampled one update after start, and the
            # native update's first update takes less CPU than psutil's 10 ms clock tick (the
            # gauge would read 0 until the next sample, a second later, after this run ends).
            "--set",
            "ppo.update_impl=torch",
            "--total-steps",
            "20480",
            "--seed",
            "2",
            "--run-id",
            "published",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    run_dir = tmp_path / "published"
    progress = [json.loads(line) for line in (run_dir / "progress.jsonl").read_text().splitlines()]
    last = progress[-1]
    with MetricsReader(run_dir / "metrics.bin") as reader:
        snapshot = reader.snapshot()
        history = reader.history()
    assert snapshot.status == "finished" and snapshot.state == "finished"
    assert snapshot.run_id == "published" and snapshot.env_id == "CartPole-v1"
    assert snapshot.counters == {
        "global_step": 20480,
        "episodes": last["episodes"],
        "updates": 10,
        # A new run: its one process did all of it.
        "process_steps": 20480,
        "process_episodes": last["episodes"],
        "process_updates": 10,
        "trained_steps": 20480,
    }
    gauges = snapshot.gauges
    assert gauges["sps"] == last["sps"] and gauges["total_steps"] == 20480
    assert math.isclose(gauges["episode_return_mean"], last["episode_return_mean"])
    assert gauges["policy_loss"] == last["policy_loss"]
    assert gauges["rss_bytes"] > 10e6 and gauges["cpu_percent"] > 0
    assert snapshot.texts == {
        "env_id": "CartPole-v1",
        "env_impl": "native",
        "device": "cpu",
        "warning": "",
    }
    assert gauges["elapsed_before_s"] == 0.0  # a run that was never resumed
    # The last update's end, between the file's creation and the final heartbeat (stored
    # when the run finished): what readers tell a hung run by (operant.shared.progress).
    created, last_beat = snapshot.created_wall_ns / 1e9, snapshot.heartbeat_wall_ns / 1e9
    assert created < gauges["last_update_unix_s"] <= last_beat
    assert snapshot.schema.metric("last_update_unix_s").unit == "unix s"
    assert set(snapshot.snapshot) == {
        f"phase_{name}_s" for name in ("env", "forward", "store", "gae", "update", "publish")
    }
    assert snapshot.snapshot["phase_update_s"] == last["phase_s"]["update"]
    # One history record per update, whole curves from the first update on.
    fields = [field.name for field in snapshot.schema.history]
    steps = [record.values[fields.index("global_step")] for record in history.records]
    assert steps == [p["global_step"] for p in progress]
    returns = [record.values[fields.index("episode_return_mean")] for record in history.records]
    assert returns[-1] == last["episode_return_mean"]
    assert history.head == 10 and history.skipped == 0

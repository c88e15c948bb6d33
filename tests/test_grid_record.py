"""The trainer's record for many agents per env: env-level episode statistics and the env's
own step phases in progress.jsonl, the metrics file (`operant monitor --json`) and the
monitor's phase bar, and none of them in a single-agent run's record or file."""

import asyncio
import json
import os
import subprocess
import sys

SETS = ["env.num_envs=2", "ppo.num_steps=16", "env.max_episode_steps=8", "train.torch_threads=1"]
NEW_FIELDS = {"env_episodes", "env_episode_return_mean", "env_phase_s"}


def operant(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [sys.executable, "-m", "operant.cli", *args],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, **(env or {})},
    )
    assert result.returncode == 0, result.stderr
    return result


def train(runs, run_id: str, env_id: str, steps: int, **env: str) -> list[dict]:
    overrides = [item for value in SETS for item in ("--set", value)]
    operant(
        "train", "--env", env_id, "--run-id", run_id, "--runs-dir", str(runs), "--quiet",
        "--total-steps", str(steps), *overrides, env=env,
    )  # fmt: skip
    lines = (runs / run_id / "progress.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_grid_records_env_episodes_and_env_phases(tmp_path):
    from operant.cext.grid import PHASES

    agents = 8  # Grid-v0's default agents per env
    records = train(tmp_path, "grid", "Grid-v0", 2 * 2 * agents * 16, OPERANT_PROFILING="1")
    assert len(records) == 2
    last = records[-1]
    # Episodes of 8 steps in 16-step rollouts: every env ends two episodes per update.
    assert [record["env_episodes"] for record in records] == [4, 4]
    assert last["episodes_this_update"] == 4 * agents
    assert isinstance(last["env_episode_return_mean"], float)
    assert list(last["env_phase_s"]) == list(PHASES)
    assert sum(last["env_phase_s"].values()) > 0
    document = json.loads(
        operant("monitor", "grid", "--runs-dir", str(tmp_path), "--once", "--json").stdout
    )
    assert document["metrics"]["env_episodes"] == 4
    assert document["metrics"]["env_episode_return_mean"] == last["env_episode_return_mean"]
    # The env's own phases, as gauges of the metrics file (sub-phases of env).
    for phase in PHASES:
        assert document["metrics"][f"env_phase_{phase}_s"] == last["env_phase_s"][phase]
    # ...and in the monitor, a third line under the update's phases.
    text = asyncio.run(monitor_screen(tmp_path, "grid"))
    env_line = next(line for line in text.splitlines() if line.strip().startswith("env "))
    assert all(f"{phase} " in env_line for phase in PHASES), env_line


async def monitor_screen(runs, run_id: str) -> str:
    from monitor_fixtures import screen_text

    from operant.monitor.app import MonitorApp
    from operant.monitor.source import ReaderSource
    from operant.monitor.widgets import PhaseBar

    app = MonitorApp(ReaderSource(runs, run_id))
    async with app.run_test(size=(200, 50)) as pilot:
        for _ in range(200):
            bars = app.main.query(PhaseBar) if app.view is not None else []
            if bars and bars.first().env_phases:
                break
            await pilot.pause(0.05)
        await pilot.pause()
        assert app.main.query_one(PhaseBar).size.height == 3
        return screen_text(app)


def test_a_single_agent_record_has_no_env_level_fields(tmp_path):
    records = train(tmp_path, "cartpole", "CartPole-v1", 2 * 2 * 16, OPERANT_PROFILING="1")
    assert len(records) == 2
    assert all(not NEW_FIELDS & set(record) for record in records)
    document = json.loads(
        operant("monitor", "cartpole", "--runs-dir", str(tmp_path), "--once", "--json").stdout
    )
    assert not any(name.startswith("env_phase_") for name in document["metrics"])

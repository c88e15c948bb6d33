"""The monitor's run picker reaches a sweep's trials and shows its leaderboard line, read from
the sweep's summary file (real metrics files written here; no Optuna, no torch)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import msgspec
from monitor_fixtures import Run, screen_text

from operant.monitor.app import MonitorApp, RunPicker, sweep_lines
from operant.monitor.source import ReaderSource
from operant.shared.runs import RUN_FILE
from operant.shared.sweeps import SUMMARY_FILE, SweepSummary, TrialRow, sweep_dir


def _sweep(root: Path) -> Run:
    """A sweep `s` of one finished trial, beside an ordinary run."""
    directory = sweep_dir(root, "s")
    directory.mkdir(parents=True)
    trial = Run(directory, "s-t0000-s1", latest=False)
    trial.publish(5)
    trial.finish()
    (trial.dir / RUN_FILE).write_text(json.dumps({"run_id": "s-t0000-s1"}))
    best = TrialRow(
        number=0, state="complete", value=0.25, params={"ppo.learning_rate": 0.004},
        run_ids=["s-t0000-s1"],
    )  # fmt: skip
    summary = SweepSummary(
        name="s", metric="time_to_target", direction="minimize", n_trials=4, storage="sqlite",
        complete=1, pruned=2, failed=1, best=best, trials=[best],
    )  # fmt: skip
    (directory / SUMMARY_FILE).write_bytes(msgspec.json.encode(summary))
    return trial


def test_the_picker_lists_trials_with_their_sweeps_leaderboard(tmp_path: Path) -> None:
    own = Run(tmp_path, "cartpole-1")
    own.publish(3)
    trial = _sweep(tmp_path)
    app = MonitorApp(ReaderSource(tmp_path, "cartpole-1", interval_s=0.1))

    async def drive() -> None:
        async with app.run_test(size=(120, 30)) as pilot:
            while app.view is None:
                await pilot.pause(0.02)
            await pilot.press("r")
            while not isinstance(app.screen, RunPicker):
                await pilot.pause(0.02)
            text = screen_text(app)
            assert "s-t0000-s1" in text and "cartpole-1" in text
            line = (
                "sweep s: time_to_target (minimize); 1 complete, 2 pruned, 1 failed of 4; best "
                "0.25 (trial 0: ppo.learning_rate=0.004)"
            )
            assert sweep_lines(app.screen.rows) == line
            flat = " ".join(text.split())  # the picker wraps the line at its width
            assert "sweep s: time_to_target (minimize); 1 complete, 2 pruned" in flat
            assert "best 0.25 (trial 0:" in flat and "ppo.learning_rate=0.004)" in flat
            ids = [row.run_id for row in app.screen.rows][::-1]
            app.screen.query_one("#runs").move_cursor(row=ids.index("s-t0000-s1"))
            await pilot.press("enter")
            for _ in range(500):
                if app.view is not None and app.view.run_id == "s-t0000-s1":
                    break
                await pilot.pause(0.02)
            assert app.view.run_id == "s-t0000-s1" and app.view.status == "finished"

    try:
        asyncio.run(drive())
    finally:
        own.close()
        trial.close()

"""The monitor's run picker reaches a sweep's trials and shows its leaderboard line, read from
the sweep's summary file; its `latest` includes trials; detaching from a trial says what its
sweep made of it (real metrics files written here; no Optuna, no torch)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import msgspec
from monitor_fixtures import Run, screen_text

from operant.monitor.app import MonitorApp, RunPicker, detach_message, sweep_lines
from operant.monitor.source import ReaderSource, RunView
from operant.shared.runs import LATEST_NAME, RUN_FILE, resolve_run
from operant.shared.sweeps import SUMMARY_FILE, SweepSummary, TrialRow, resolve_newest, sweep_dir


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
                "0.25 (trial 0: ppo.learning_rate=0.004) (operant sweep show s)"
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


def test_the_latest_run_is_the_one_started_last_a_sweeps_trial_included(tmp_path: Path) -> None:
    """The monitor's `latest` (operant monitor, --latest, --follow): a sweep's trial once it
    started after the root's own newest run, or where the root has none; resolve_run, which
    `operant eval latest` and `--resume latest` use, keeps naming the root's own."""
    directory = sweep_dir(tmp_path, "s")
    trial = Run(directory, "s-t0000-s1")  # the trainer points its sweep directory's latest
    (trial.dir / RUN_FILE).write_text(json.dumps({"run_id": "s-t0000-s1"}))
    runs = [trial]
    try:
        assert resolve_newest(tmp_path, None) == trial.dir
        runs.append(own := Run(tmp_path, "cartpole-1"))  # started after the trial
        assert resolve_newest(tmp_path, "latest") == own.dir == resolve_run(tmp_path, None)
        os.utime(directory / LATEST_NAME, ns=(2**62, 2**62), follow_symlinks=False)
        assert resolve_newest(tmp_path, None) == trial.dir  # the trial is newer now
        assert resolve_run(tmp_path, None) == own.dir
        assert resolve_newest(tmp_path, "s-t0000-s1") == trial.dir  # by name, as resolve_run
    finally:
        for run in runs:
            run.close()


def test_detaching_from_a_trial_that_ended_early_says_what_its_sweep_made_of_it(
    tmp_path: Path,
) -> None:
    directory = sweep_dir(tmp_path, "s")
    directory.mkdir(parents=True)
    rows = [
        TrialRow(number=0, state="pruned", reason="pruned after 0.3 s of training",
                 run_ids=["s-t0000-s1"]),
        TrialRow(number=1, state="interrupted", reason="stopped by SIGTERM",
                 run_ids=["s-t0001-s1"]),
        TrialRow(number=2, state="failed", reason="run s-t0002-s1: non-finite loss",
                 run_ids=["s-t0002-s1"]),
    ]  # fmt: skip
    summary = SweepSummary(
        name="s", metric="final_return", direction="maximize", n_trials=3, storage="sqlite",
        pruned=1, failed=1, trials=rows,
    )  # fmt: skip
    (directory / SUMMARY_FILE).write_bytes(msgspec.json.encode(summary))

    def said(run_id: str, **fields: object) -> str:
        view = RunView(run_id=run_id, run_dir=str(directory / run_id), **fields)
        return detach_message(run_id, view, tmp_path)

    show = f"see operant sweep show s --runs-dir {tmp_path}"
    assert said("s-t0000-s1", status="finished", interrupted=True) == (
        f"detached from s-t0000-s1, trial 0 of sweep s (pruned: pruned after 0.3 s of "
        f"training); {show}"
    )
    assert said("s-t0001-s1", status="finished", interrupted=True) == (
        "detached from s-t0001-s1, trial 1 of sweep s (interrupted: stopped by SIGTERM); run "
        "the same operant sweep command to continue it"
    )
    assert said("s-t0002-s1", status="failed", reason="non-finite loss") == (
        f"detached from s-t0002-s1, trial 2 of sweep s (failed: run s-t0002-s1: non-finite "
        f"loss); {show}"
    )
    # a trial that finished its budget, or runs: as any run
    assert "which has finished. Evaluate it" in said("s-t0000-s1", status="finished")
    assert "training goes on" in said("s-t0000-s1", status="running")

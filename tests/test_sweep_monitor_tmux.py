"""The monitor on a live sweep, in a real terminal: a real `operant sweep` of two CartPole
trials (the first short, the second long) trains in the background while `operant monitor
--latest --follow` runs in tmux. The monitor follows the sweep onto its running trial; its run
picker shows the sweep's leaderboard with the values the sweep wrote, and the running trial's
steps growing while it is open; picking a trial attaches to it as to any run; q detaches."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from tmux_fixtures import Tmux, update_number

from operant.monitor.format import compact
from operant.shared.sweeps import describe, read_summary

pytest.importorskip("optuna")

# With this sampler seed TPE's random start-up gives trial 0 the short budget and trial 1 the
# long one: trial 0 completes within seconds, and trial 1 trains until the test stops it.
SWEEP = """
[sweep]
name = "live"
confirm = 0
n_trials = 2
sampler_seed = 6
pruner = "none"
[sweep.objective]
metric = "final_return"
[sweep.params]
"train.total_steps" = { categorical = [8192, 100_000_000] }
"ppo.learning_rate" = { log_uniform = [1e-3, 1e-2] }
[env]
num_envs = 8
[ppo]
num_minibatches = 2
"""
SHORT, LONG = "live-t0000-s1", "live-t0001-s1"


def operant(*args: str) -> list[str]:
    return [sys.executable, "-m", "operant", *args]


def flat(screen: str) -> str:
    """The pane's words, single-spaced: the picker wraps the leaderboard at its width."""
    return " ".join(screen.split())


def title_says(*words: str):
    """Whether the monitor's title line (the run watched) holds `words`."""
    return lambda screen: all(word in screen.splitlines()[0] for word in words)


def last_record(runs: Path, run_id: str) -> dict:
    lines = (runs / "sweeps" / "live" / run_id / "progress.jsonl").read_text().splitlines()
    return json.loads(lines[-1])


def picker_steps(screen: str, run_id: str) -> int:
    match = re.search(rf"{run_id}\s+CartPole-v1\s+running\s+([\d,]+)", screen)
    return int(match.group(1).replace(",", "")) if match else -1


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_the_monitor_shows_a_live_sweep_and_attaches_to_its_trials(tmp_path: Path) -> None:
    runs, log = tmp_path / "runs", tmp_path / "sweep.log"
    (tmp_path / "live.toml").write_text(SWEEP)
    with open(log, "w") as out:
        sweep = subprocess.Popen(
            operant("sweep", str(tmp_path / "live.toml"), "--runs-dir", str(runs)),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # no signal of the test's reaches it
        )
    # What a user types beside a sweep: the newest run, following each trial as it starts.
    monitor = ["monitor", "--latest", "--follow", "--refresh", "0.25", "--runs-dir", str(runs)]
    tmux = Tmux(operant(*monitor))
    try:
        tmux.until_true(title_says(LONG, "running"), timeout_s=40, what=f"{LONG} followed")
        _leaderboard(tmux, runs)
        _attach(tmux, runs)
        tmux.keys("q")
        tmux.until("MONITOR-EXIT=0")
        done = tmux.tmux("capture-pane", "-p", "-J", "-t", "monitor")  # -J: lines unwrapped
        hint = f"operant monitor {LONG} --runs-dir {runs}"
        assert f"detached from {LONG}; training goes on. Reattach: {hint}" in done
        sweep.send_signal(signal.SIGTERM)
        assert sweep.wait(timeout=30) == 0, log.read_text()
    finally:
        tmux.close()
        if sweep.poll() is None:
            sweep.kill()
            sweep.wait()
    said = log.read_text()
    assert "trial 0 complete" in said and "trial 1 interrupted: stopped by SIGTERM" in said


def _leaderboard(tmux: Tmux, runs: Path) -> None:
    """r: the picker lists both trials under the sweep's line, as the sweep wrote it, with its
    running trial counted; the running trial's steps grow while the picker is open."""
    summary = read_summary(runs / "sweeps" / "live")
    assert summary is not None and summary.best is not None and summary.complete == 1
    assert summary.best.params["train.total_steps"] == 8192, summary.best  # the seed's draw
    final_return = last_record(runs, SHORT)["episode_return_mean"]
    assert summary.best.value == final_return  # the objective: the run's last mean return
    line = describe(summary, running=1) + " (operant sweep show live)"
    assert "1 complete, 0 pruned, 0 failed of 2, 1 running; best" in line
    assert f"best {final_return:.4g} (trial 0: train.total_steps=8192, " in line
    tmux.keys("r")
    screen = tmux.until_true(lambda screen: line in flat(screen), what=line)
    assert "Attach to a run" in screen and SHORT in screen
    first = picker_steps(screen, LONG)
    assert first > 0, screen
    tmux.until_true(lambda screen: picker_steps(screen, LONG) > first, what="steps growing")


def _attach(tmux: Tmux, runs: Path) -> None:
    """The picker's cursor starts on the run watched (the newest, on top): down and enter
    attach to the finished trial, r, up and enter back to the running one, live. (The steps
    are read off the process line's update count and the steps box's budget: the notices of
    the attach cover the metrics table for seconds.)"""
    tmux.keys("Down", "Enter")
    last = last_record(runs, SHORT)
    screen = tmux.until_true(
        lambda s: title_says(SHORT, "finished")(s) and update_number(s) == last["update"],
        what=f"{SHORT} attached, update {last['update']}",
    )
    assert f"of {compact(last['global_step'])} (100" in screen  # all its 8,192 steps
    tmux.keys("r")
    tmux.until("Attach to a run", LONG)
    tmux.keys("Up", "Enter")
    screen = tmux.until_true(lambda s: title_says(LONG, "running")(s) and update_number(s) > 0)
    assert "of 100M (" in screen
    first = update_number(screen)
    tmux.until_true(lambda screen: update_number(screen) > first, what="updates growing")

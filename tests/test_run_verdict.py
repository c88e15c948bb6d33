"""How a run ends (issue 14, items 6 and 12): the default run (README's first command, with a
runs root of the test's) says whether it solved its env, when and against which target, in
its summary line and in the JSON summary; the best policy it saw is kept as best.pt beside
model.pt, in model.pt's format, said in the summary, and picked by `operant eval --best`; a
resumed run never replaces its best.pt with a worse policy."""

from __future__ import annotations

import json
import re

import pytest
import torch
from user_runs import run

from operant.trainer.checkpoint.file_format import content_digest
from operant.trainer.services.best import SOLVE_WINDOW

TARGET = 475.0  # CartPole-v1's reward threshold in Gymnasium's registry


def records(run_dir):
    return [json.loads(line) for line in (run_dir / "progress.jsonl").read_text().splitlines()]


def counted(rows):
    """Records whose mean is over a full window of 100 episodes."""
    return [
        row
        for row in rows
        if row["episodes"] >= SOLVE_WINDOW and row["episode_return_mean"] is not None
    ]


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("verdict") / "runs"
    result = run("operant-train", "--runs-dir", str(root), "--run-id", "default", timeout=600)
    assert result.returncode == 0, result.stderr
    return root / "default", result.stdout.strip().splitlines()


def test_the_default_run_ends_with_its_verdict(default_run):
    run_dir, lines = default_run
    rows = counted(records(run_dir))
    first = next(row for row in rows if row["episode_return_mean"] >= TARGET)
    assert lines[-2] == (
        f"solved at {first['elapsed_s']:.2f} s (step {first['global_step']:,}): "
        f"mean return of the last 100 episodes "
        f"{first['episode_return_mean']:.1f} >= target 475"
    )


def test_the_best_policy_is_kept_as_best_pt_and_said(default_run):
    run_dir, lines = default_run
    rows = counted(records(run_dir))
    best = max(row["episode_return_mean"] for row in rows)
    step = next(row["global_step"] for row in rows if row["episode_return_mean"] == best)
    assert lines[-1] == f"best mean return {best:.1f} at step {step:,} -> {run_dir / 'best.pt'}"
    saved = torch.load(run_dir / "best.pt", map_location="cpu", weights_only=True)
    model = torch.load(run_dir / "model.pt", map_location="cpu", weights_only=True)
    assert saved["global_step"] == step and saved["episode_return_mean"] == best
    assert saved["config"] == model["config"]
    assert saved["policy"].keys() == model["policy"].keys()
    assert all(
        saved["policy"][name].shape == tensor.shape for name, tensor in model["policy"].items()
    )
    evaluated = run("operant", "eval", str(run_dir), "--best", "--episodes", "2", timeout=240)
    assert evaluated.returncode == 0, evaluated.stderr
    assert f"best.pt at step {step:,}" in evaluated.stdout


def test_an_unsolved_run_says_so_in_both_summaries(tmp_path):
    root = tmp_path / "runs"
    result = run(
        "operant-train",
        "--runs-dir",
        str(root),
        "--run-id",
        "short",
        "--total-steps",
        "20480",
        "--log-format",
        "json",
        timeout=240,
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout.strip().splitlines()[-1])["summary"]
    rows = counted(records(root / "short"))
    best = max(row["episode_return_mean"] for row in rows)
    assert best < TARGET
    assert {
        key: summary[key]
        for key in ("target_return", "solved", "solved_at_s", "solved_at_step", "best_return_mean")
    } == {
        "target_return": TARGET,
        "solved": False,
        "solved_at_s": None,
        "solved_at_step": None,
        "best_return_mean": best,
    }
    assert summary["best_model"] == str(root / "short" / "best.pt")
    plain = run(
        "operant-train",
        "--runs-dir",
        str(root),
        "--run-id",
        "plain",
        "--total-steps",
        "20480",
        timeout=240,
    )
    assert plain.stdout.strip().splitlines()[-2] == (
        f"not solved: best mean return {best:.1f} < target 475"
    )


def test_a_resumed_run_keeps_a_better_best(tmp_path):
    root = tmp_path / "runs"
    first = run(
        "operant-train",
        "--runs-dir",
        str(root),
        "--run-id",
        "again",
        "--total-steps",
        "20480",
        "--quiet",
        timeout=240,
    )
    assert first.returncode == 0, first.stderr
    path = root / "again" / "best.pt"
    better = torch.load(path, map_location="cpu", weights_only=True)
    better["episode_return_mean"] = 1000.0
    better["digest"] = content_digest(better)  # as a previous process would have written it
    torch.save(better, path)
    resumed = run(
        "operant-train",
        "--resume",
        "again",
        "--runs-dir",
        str(root),
        "--total-steps",
        "40960",
        "--quiet",
        timeout=240,
    )
    assert resumed.returncode == 0, resumed.stderr
    kept = torch.load(path, map_location="cpu", weights_only=True)
    assert kept["episode_return_mean"] == 1000.0
    assert re.search(
        r"^best mean return 1000\.0 at step 20,480 -> ", resumed.stdout, re.MULTILINE
    ), resumed.stdout


def test_a_resume_replaces_a_damaged_best(tmp_path):
    # best.pt's content no longer matches its digest (here its mean edited, as a damaged file
    # would read): the resumed run does not take that mean as the best to beat.
    root = tmp_path / "runs"
    args = ["--runs-dir", str(root), "--run-id", "dent", "--quiet"]
    first = run("operant-train", *args, "--total-steps", "20480", timeout=240)
    assert first.returncode == 0, first.stderr
    path = root / "dent" / "best.pt"
    damaged = torch.load(path, map_location="cpu", weights_only=True)
    damaged["episode_return_mean"] = 1000.0
    torch.save(damaged, path)
    resumed = run("operant-train", "--resume", "dent", *args[:2], "--total-steps", "40960",
                  "--quiet", timeout=240)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    kept = torch.load(path, map_location="cpu", weights_only=True)
    assert kept["episode_return_mean"] < 1000.0
    assert kept["digest"] == content_digest(kept)


def test_a_run_with_no_finished_episode_says_so(tmp_path):
    # Pendulum's episodes last 200 steps: one update of 8 envs x 128 steps ends none. The
    # summary said "mean return of the last 100 episodes -"
    root = tmp_path / "runs"
    result = run(
        "operant-train", "--env", "Pendulum-v1", "--runs-dir", str(root), "--run-id", "none",
        "--total-steps", "1024", "--set", "env.num_envs=8", "--set", "ppo.num_steps=128",
        "--set", "ppo.num_minibatches=4", timeout=240,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    (done,) = [line for line in result.stdout.splitlines() if line.startswith("done: ")]
    assert done.endswith(f", no episode finished -> {root / 'none'}")

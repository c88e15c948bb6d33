"""operant bench's contract: the JSON record, baselines, exit codes. Speeds are never asserted."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


def bench(*args):
    return subprocess.run(
        [sys.executable, "-m", "operant.cli", "bench", *args],
        capture_output=True,
        text=True,
        timeout=240,
        env=dict(os.environ),
    )


def test_env_only_record_and_baseline_ratio(tmp_path):
    first = tmp_path / "first.json"
    result = bench(
        "env_only",
        "--num-envs",
        "64",
        "--rounds",
        "2",
        "--round-seconds",
        "0.05",
        "--output",
        str(first),
        "--max-cv",
        "10",
    )
    assert result.returncode == 0, result.stderr
    record = json.loads(first.read_text())
    assert record["mode"] == "env_only" and record["machine"]["cpus"] == os.cpu_count()
    row = record["results"][0]
    assert row["num_envs"] == 64 and len(row["native"]["rounds"]) == 2
    assert row["native"]["median"] > 0 and row["gymnasium"]["median"] > 0
    assert row["native_vs_gymnasium"] == round(
        row["native"]["median"] / row["gymnasium"]["median"], 2
    )
    second = tmp_path / "second.json"
    result = bench(
        "env_only",
        "--num-envs",
        "64",
        "--rounds",
        "2",
        "--round-seconds",
        "0.05",
        "--no-gymnasium",
        "--baseline",
        str(first),
        "--output",
        str(second),
        "--max-cv",
        "10",
    )
    assert result.returncode == 0, result.stderr
    compared = json.loads(second.read_text())["baselines"][0]
    assert compared["baseline"] == str(first) and set(compared["ratios"]) == {"native N=64"}
    assert f"vs {first}: native N=64" in result.stdout
    # another env's record gives no ratio (an Acrobot run read "1.07x" a CartPole record)
    result = bench(
        "env_only", "--env", "Acrobot-v1", "--num-envs", "64", "--rounds", "1",
        "--round-seconds", "0.05", "--no-gymnasium", "--baseline", str(first),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert f"vs {first}: it measured CartPole-v1, this run Acrobot-v1: no ratio" in result.stdout


def test_enforced_target_below_fails_with_1():
    result = bench(
        "env_only",
        "--num-envs",
        "16",
        "--rounds",
        "1",
        "--round-seconds",
        "0.05",
        "--no-gymnasium",
        "--target-sps",
        "1e15",
        "--enforce-target",
    )
    assert result.returncode == 1
    assert "below the target" in result.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["env_only", "--num-envs", "0"], "expected positive integers"),
        (["env_only", "--env", "Nope-v0", "--rounds", "1"], "unknown env id 'Nope-v0'"),
        (
            ["env_only", "--baseline", "/nonexistent.json"],
            "baseline /nonexistent.json does not exist",
        ),
        (["nonsense"], "invalid choice"),
        # checked before measuring (a traceback after it, the results lost)
        (["env_only", "--output", "/nonexistent/x.json"], "no folder /nonexistent; create it"),
        (["env_only", "--output", "/tmp"], "--output /tmp is a folder: give a file name"),
        (["env_only", "--plot", "/etc/hostname"], "is a file: give a folder for the plots"),
        # taken before: 0 or -1 seconds, a negative or NaN CV, no impl at all (exit 0)
        (["env_only", "--round-seconds", "0"], "--round-seconds 0: give seconds above 0"),
        (["env_only", "--round-seconds", "inf"], "--round-seconds inf: give seconds above 0"),
        (["env_only", "--max-cv", "nan"], "--max-cv nan: give a coefficient of variation"),
        (["env_only", "--impl", ","], "--impl names no implementation"),
        (["trainer", "--seeds", "-1"], "expected integers of at least 0, got '-1'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message):
    result = bench(*args)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr


def test_baseline_of_another_mode_is_refused(tmp_path):
    other = tmp_path / "trainer.json"
    other.write_text(json.dumps({"mode": "trainer"}))
    result = bench("env_only", "--baseline", str(other))
    assert result.returncode == 2
    assert "is a 'trainer' record, not 'env_only'" in result.stderr


def test_trainer_record_has_phases_memory_and_bound(tmp_path):
    out = tmp_path / "trainer.json"
    result = bench(
        "trainer",
        "--num-envs",
        "32",
        "--num-steps",
        "32",
        "--minibatches",
        "2",
        "--total-steps",
        "4096",
        "--seeds",
        "1",
        "--warmup",
        "1",
        "--max-cv",
        "10",
        "--bound-seconds",
        "0.001",
        "--output",
        str(out),
        "--plot",
        str(tmp_path / "plots"),
    )
    assert result.returncode == 0, result.stderr
    record = json.loads(out.read_text())
    (cell,) = record["cells"]
    assert cell["cell"] == {"num_envs": 32, "num_steps": 32, "num_minibatches": 2}
    (run,) = cell["runs"]
    assert run["seed"] == 1 and run["global_step"] == 4096 and run["updates"] == 4
    assert run["env_id"] == "CartPole-v1"  # the defaults' env: no --env, no config
    assert set(run["phase_s"]) == {"env", "forward", "store", "gae", "update", "publish"}
    assert all(seconds >= 0 for seconds in run["phase_s"].values()) and run["phase_s"]["update"] > 0
    assert run["mem_delta_mb"] is not None
    bound = record["bound"]
    assert bound["forward_samples_per_s"] > 0 and bound["train_samples_per_s"] > 0
    expected = 1 / (
        1 / bound["forward_samples_per_s"] + bound["epochs"] / bound["train_samples_per_s"]
    )
    assert abs(bound["bound_steps_per_s"] - expected) / expected < 1e-3
    assert bound["fraction"] == round(
        record["summary"]["sps"]["median"] / bound["bound_steps_per_s"], 3
    )
    arithmetic = record["arithmetic_bound"]  # the defaults' network: 4-64-64 tanh, separate
    assert arithmetic["forward_flops_per_sample"] == 18322 and arithmetic["epochs"] == 2
    assert arithmetic["fraction"] == round(
        record["summary"]["sps"]["median"] / arithmetic["bound_steps_per_s"], 3
    )
    assert record["summary"]["solved"] == "0/1" and not record["best"]["stable"]
    assert (tmp_path / "plots" / "phases_trainer.png").stat().st_size > 1000


def test_trainer_env_sets_the_trained_env_over_the_configs(tmp_path):
    out = tmp_path / "trainer.json"
    result = bench(
        "trainer", "--config", str(CONFIGS / "CartPole-v1.toml"), "--env", "Acrobot-v1",
        "--total-steps", "2048", "--seeds", "1", "--no-bound", "--max-cv", "10",
        "--output", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    (run,) = json.loads(out.read_text())["cells"][0]["runs"]
    assert run["env_id"] == "Acrobot-v1" and run["global_step"] == 2048


def test_trainer_judges_solved_as_operant_train_does(tmp_path):
    # Acrobot's registered threshold (-100), not CartPole's 475 for every env; the grid has
    # none: it trains its whole budget and says so instead of "NOT solved" against 475.
    runs = {}
    for name, args in {
        "acrobot": ["--env", "Acrobot-v1", "--total-steps", "2048"],
        "grid": ["--config", str(CONFIGS / "Grid-v0.toml"), "--total-steps", "8192"],
    }.items():
        out = tmp_path / f"{name}.json"
        result = bench(
            "trainer", *args, "--seeds", "1", "--no-bound", "--max-cv", "10",
            "--output", str(out),
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        runs[name] = (result.stdout, json.loads(out.read_text())["summary"])
    stdout, summary = runs["acrobot"]
    assert summary["target_return"] == -100.0 and summary["solved"] == "0/1"
    assert stdout.startswith("trainer Acrobot-v1:\n")
    stdout, summary = runs["grid"]
    assert summary["target_return"] is None and summary["solved"] == "no target"
    assert summary["all_solved"] and "; no target" in stdout
    assert "no target return, no episode finished" in stdout  # "last-100 mean None" before


def test_trainer_eval_matrix_picks_the_best_cell(tmp_path):
    out = tmp_path / "eval.json"
    result = bench(
        "trainer_eval",
        "--matrix",
        "--num-envs",
        "16,64",
        "--num-steps",
        "8",
        "--rounds",
        "2",
        "--round-seconds",
        "0.05",
        "--warmup",
        "1",
        "--max-cv",
        "10",
        "--output",
        str(out),
        "--plot",
        str(tmp_path / "plots"),
    )
    assert result.returncode == 0, result.stderr
    record = json.loads(out.read_text())
    cells = record["cells"]
    assert [cell["cell"] for cell in cells] == [
        {"num_envs": 16, "num_steps": 8},
        {"num_envs": 64, "num_steps": 8},
    ]
    best = max(cells, key=lambda cell: cell["summary"]["sps"]["median"])
    assert record["best"] == {"cell": best["cell"], "stable": True}
    assert abs(sum(cells[0]["summary"]["phase_fraction"].values()) - 1) < 0.01
    assert {"env", "forward", "store"} <= set(cells[0]["summary"]["phase_fraction"])
    assert "best stable configuration" in result.stdout
    assert (tmp_path / "plots" / "matrix_trainer_eval.png").stat().st_size > 1000


def test_validate_passes_and_is_recorded(tmp_path):
    out = tmp_path / "env.json"
    result = bench(
        "env_only",
        "--env",
        "Acrobot-v1",
        "--num-envs",
        "16",
        "--rounds",
        "1",
        "--round-seconds",
        "0.05",
        "--no-gymnasium",
        "--validate",
        "--validate-steps",
        "50",
        "--max-cv",
        "10",
        "--output",
        str(out),
    )
    assert result.returncode == 0, result.stderr
    (report,) = json.loads(out.read_text())["validation"]
    assert report["ok"] and report["compared"] == 16 * 50 and report["mismatch"] is None


class _StrongerPush:
    """Gymnasium's CartPole with a different force: what a broken kernel looks like."""

    def __new__(cls, env_id):
        from gymnasium.envs.classic_control.cartpole import CartPoleEnv

        env = CartPoleEnv()
        env.force_mag = 11.0
        return env


def test_shadow_check_names_the_first_disagreement():
    from operant.envs.face.parity import shadow_check

    report = shadow_check("CartPole-v1", "native", num_envs=4, steps=5, reference=_StrongerPush)
    assert not report.ok
    assert report.mismatch.startswith("CartPole-v1 (native) step 0, env 0: observation")


def test_validate_mismatch_exits_2_and_measures_nothing(monkeypatch, tmp_path, capsys):
    from operant.envs.face import parity
    from operant.trainer.bench import cli as bench_module

    monkeypatch.setattr(parity, "_gymnasium_env", _StrongerPush)
    out = tmp_path / "bad.json"
    status = bench_module.main(
        [
            "env_only",
            "--num-envs",
            "8",
            "--rounds",
            "1",
            "--round-seconds",
            "0.05",
            "--no-gymnasium",
            "--validate",
            "--validate-steps",
            "5",
            "--output",
            str(out),
        ]
    )
    assert status == bench_module.EXIT_PARITY == 2
    record = json.loads(out.read_text())
    assert not record["validation"][0]["ok"] and "results" not in record
    assert "disagrees with Gymnasium; nothing was measured" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args, message",
    [
        (["trainer", "--num-envs", "16,32"], "several values for num_envs need --matrix"),
        (["trainer", "--matrix"], "--matrix needs"),
        (["trainer", "--validate"], "--validate is an env_only option"),
        (["env_only", "--num-steps", "8"], "are for the trainer modes"),
        (
            ["trainer", "--num-envs", "6", "--num-steps", "5", "--minibatches", "4", "--no-bound"],
            "minibatches",
        ),
    ],
)
def test_trainer_bad_usage_is_one_line(args, message):
    result = bench(*args)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("impl", ["native", "torch"])
@pytest.mark.parametrize(
    "env_id",
    ["CartPole-v1", "Acrobot-v1", "MountainCar-v0", "MountainCarContinuous-v0", "Pendulum-v1"],
)
def test_shadow_check_passes_for_every_env(env_id, impl):
    from operant.envs.face.parity import shadow_check

    report = shadow_check(env_id, impl, num_envs=32, steps=120, seed=3)
    assert report.ok, report.mismatch
    assert report.compared == 32 * 120


def test_env_only_measures_torch_and_envs_without_a_gymnasium_vector_entry_point(tmp_path):
    """`--impl native,torch` (the docs' synopsis) was a TypeError; Pendulum, Acrobot and
    MountainCar, which Gymnasium vectorises only with its SyncVectorEnv, were a traceback
    after measuring."""
    for env_id, impls in (("CartPole-v1", "native,torch"), ("Pendulum-v1", "native")):
        out = tmp_path / f"{env_id}.json"
        result = bench(
            "env_only", "--env", env_id, "--impl", impls, "--num-envs", "64",
            "--rounds", "1", "--round-seconds", "0.05", "--output", str(out),
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        (row,) = json.loads(out.read_text())["results"]
        for impl in (*impls.split(","), "gymnasium"):
            assert row[impl]["median"] > 0, (env_id, impl)


def test_the_bound_of_a_grid_counts_its_agents_rows(monkeypatch):
    """The trainer bench's forward rate counted a grid world as one sample where it steps 8
    agents' rows: a bound 8x too low, the trainer at "358% of it"."""
    from operant.trainer.bench import measure
    from operant.trainer.config import load_config

    counted = []
    monkeypatch.setattr(
        measure, "_timed_rounds", lambda work, samples, *a, **k: counted.append(samples) or [1.0]
    )
    config = load_config(str(CONFIGS / "Grid-v0.toml"), [])
    measure.compute_bound(config, seconds=0.01)
    agents = 8  # configs/Grid-v0.toml's default world
    assert counted[0] == config.env.num_envs * agents

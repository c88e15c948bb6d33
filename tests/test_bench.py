"""operant bench's contract: the JSON record, baselines, exit codes. Speeds are never asserted."""

import json
import os
import subprocess
import sys

import pytest


def bench(*args):
    return subprocess.run([sys.executable, "-m", "operant.cli", "bench", *args],
                          capture_output=True, text=True, timeout=240, env=dict(os.environ))


def test_env_only_record_and_baseline_ratio(tmp_path):
    first = tmp_path / "first.json"
    result = bench("env_only", "--num-envs", "64", "--rounds", "2", "--round-seconds", "0.05",
                   "--output", str(first), "--max-cv", "10")
    assert result.returncode == 0, result.stderr
    record = json.loads(first.read_text())
    assert record["mode"] == "env_only" and record["machine"]["cpus"] == os.cpu_count()
    row = record["results"][0]
    assert row["num_envs"] == 64 and len(row["native"]["rounds"]) == 2
    assert row["native"]["median"] > 0 and row["gymnasium"]["median"] > 0
    assert row["native_vs_gymnasium"] == round(row["native"]["median"] / row["gymnasium"]["median"], 2)
    second = tmp_path / "second.json"
    result = bench("env_only", "--num-envs", "64", "--rounds", "2", "--round-seconds", "0.05",
                   "--no-gymnasium", "--baseline", str(first), "--output", str(second),
                   "--max-cv", "10")
    assert result.returncode == 0, result.stderr
    compared = json.loads(second.read_text())["baselines"][0]
    assert compared["baseline"] == str(first) and set(compared["ratios"]) == {"native N=64"}
    assert f"vs {first}: native N=64" in result.stdout


def test_enforced_target_below_fails_with_1():
    result = bench("env_only", "--num-envs", "16", "--rounds", "1", "--round-seconds", "0.05",
                   "--no-gymnasium", "--target-sps", "1e15", "--enforce-target")
    assert result.returncode == 1
    assert "below the target" in result.stderr


@pytest.mark.parametrize("args, message", [
    (["env_only", "--num-envs", "0"], "expected positive integers"),
    (["env_only", "--env", "Nope-v0", "--rounds", "1"], "unknown env id 'Nope-v0'"),
    (["env_only", "--baseline", "/nonexistent.json"], "baseline /nonexistent.json does not exist"),
    (["nonsense"], "invalid choice"),
])
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

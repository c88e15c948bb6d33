"""operant eval on a real trained model, and its refusals."""

import json
import os
import subprocess
import sys

import pytest


def operant(*args, runs_dir):
    env = dict(os.environ, OPERANT_RUNS_DIR=str(runs_dir))
    return subprocess.run([sys.executable, "-m", "operant.cli", *args], capture_output=True,
                          text=True, timeout=240, env=env)


def test_evaluates_a_trained_model_greedily(tmp_path):
    trained = operant("train", "--total-steps", "40960", "--seed", "1", "--run-id", "m",
                      "--quiet", runs_dir=tmp_path)
    assert trained.returncode == 0, trained.stderr
    result = operant("eval", "m", "--episodes", "20", "--json", runs_dir=tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["episodes"] == 20 and report["env_id"] == "CartPole-v1" and report["greedy"]
    # 40K steps of training: far above random play (~22), a greedy policy does better still.
    assert report["return_mean"] > 100
    by_dir = json.loads(operant("eval", str(tmp_path / "m"), "--episodes", "20", "--json",
                                runs_dir=tmp_path).stdout)
    assert by_dir["return_mean"] == report["return_mean"]  # same seed, same episodes


@pytest.mark.parametrize("target, message", [
    ("nosuchrun", "no run 'nosuchrun'"),
    ("/etc/hostname", "is not an operant model"),
])
def test_bad_model_is_one_line_and_exit_2(tmp_path, target, message):
    (tmp_path / "x").mkdir()
    result = operant("eval", target, runs_dir=tmp_path)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1

"""`operant ... | head`: when the reader of a command's output goes away, the command stops
quietly (no BrokenPipeError traceback) with 141, the status of a process killed by SIGPIPE."""

from __future__ import annotations

import subprocess
import sys


def test_a_closed_pipe_ends_the_dispatchers_own_output_quietly_with_141():
    process = subprocess.Popen(
        [sys.executable, "-m", "operant.cli", "--version"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    process.stdout.close()  # long before the interpreter has started and printed
    _, stderr = process.communicate(timeout=60)
    assert stderr.decode() == ""
    assert process.returncode == 141


def test_a_subcommand_whose_reader_went_away_exits_141_without_a_traceback(tmp_path):
    runs = tmp_path / "runs"
    trained = subprocess.run(
        [sys.executable, "-m", "operant.trainer.run.main", "--runs-dir", str(runs), "--run-id", "r"]
        + ["--total-steps", "2048", "--quiet"],
        capture_output=True,
        timeout=240,
    )
    assert trained.returncode == 0, trained.stderr
    process = subprocess.Popen(
        [sys.executable, "-m", "operant.cli", "monitor", "r", "--once", "--runs-dir", str(runs)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    process.stdout.close()
    _, stderr = process.communicate(timeout=60)
    assert stderr.decode() == ""
    assert process.returncode == 141

"""Checkpoints written by main before trainer/, envs/ and cext/ were regrouped (issue 38, main
at adb9f5f) resume with today's code and train on exactly as main trained on from them.

The fixtures and the script that made them are in tests/fixtures/main-adb9f5f/: a MinAtar
Breakout run of the MLP over the uint8 frame and a Pendulum run (continuous actions), both on
the native update ("auto"), each checkpointed at update 10, with main's records of updates
11-30. Here each checkpoint is put in a run directory of its own and resumed by
`operant-train --resume`; every field of every record after it but the timing ones must be
main's, as JSON (floats by their shortest repr: bit for bit). As in tests/test_compat_main.py,
the records hold on one kind of CPU (`cpu_key()`), and a CPU without them skips, saying so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from compat_fixtures import cpu_key, records

ROOT = Path(__file__).resolve().parent.parent


FIXTURES = Path(__file__).parent / "fixtures" / "main-adb9f5f" / cpu_key()
pytestmark = pytest.mark.skipif(
    not FIXTURES.is_dir(),
    reason=f"no checkpoints of main at adb9f5f for this kind of CPU ({cpu_key()}): make them "
    "with tests/fixtures/main-adb9f5f/record.sh from an adb9f5f install",
)


@pytest.mark.parametrize("case", ["breakout-mlp", "pendulum"])
def test_a_checkpoint_main_wrote_before_the_regroup_continues_as_main_did(tmp_path, case):
    import torch

    fixture = FIXTURES / case / "ckpt-000000010.pt"
    run_dir = tmp_path / case
    checkpoints = run_dir / "checkpoints"
    checkpoints.mkdir(parents=True)
    (checkpoints / fixture.name).write_bytes(fixture.read_bytes())
    (checkpoints / "latest").write_text(f"{fixture.name}\n")
    # The checkpoint remembers progress.jsonl's length at update 10; the log is cut there and
    # appended to, its content not read back.
    payload = torch.load(fixture, weights_only=True)
    (run_dir / "progress.jsonl").write_bytes(b"x" * (payload["progress_bytes"] - 1) + b"\n")
    (run_dir / "run.json").write_text(json.dumps({"run_id": case}))
    result = subprocess.run(
        [sys.executable, "-m", "operant.trainer.run.main", "--resume", case]
        + ["--runs-dir", str(tmp_path), "--quiet"],
        cwd=ROOT,
        env={**os.environ, "PYTHONHASHSEED": "0"},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr
    got = records(run_dir / "progress.jsonl", skip=1)
    expected = records(FIXTURES / case / "continuation.jsonl")
    assert [record["update"] for record in got] == list(range(11, 31))
    for index, (mine, mains) in enumerate(zip(got, expected)):
        differ = sorted(k for k in mine.keys() | mains.keys() if mine.get(k) != mains.get(k))
        assert not differ, f"update {11 + index}: {differ} differ from main's"
    assert len(got) == len(expected)

"""Nothing changed for users: runs recorded from main at 6031fcf (before the core was
reorganised around the env contract) are reproduced bit for bit, and a checkpoint that main
wrote resumes and continues exactly as main continued it.

The fixtures and the script that made them are in tests/fixtures/main-6031fcf/. Timing fields
(elapsed_s, sps, sps_mean, phase_s) are not deterministic and are not compared; every other
field of every progress record is, as JSON (floats by their shortest repr, i.e. bit for bit).
Determinism holds on one kind of CPU with one build: another CPU may take other SIMD paths in
torch's kernels (the float32 losses then differ in their last bits), so the records are kept
per kind of CPU (`cpu_key()`: the vendor and torch's CPU capability) and made on each with
record.sh from a main-6031fcf install; on a CPU without records the tests skip and say so.

Main's records are torch autograd's arithmetic, so the runs here take the torch update
(`ppo.update_impl = "torch"`, TORCH_UPDATE): the native update that "auto" picks for these
configs rounds differently (tests/test_fused_mlp.py holds it to torch within float32
rounding, docs/journal/issue-18-native-update.md shows it learns alike), and what this file
guards is that the torch path, the reference, still reproduces main bit for bit.
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
TORCH_UPDATE = ["--set", "ppo.update_impl=torch"]


FIXTURES = Path(__file__).parent / "fixtures" / "main-6031fcf" / cpu_key()
pytestmark = pytest.mark.skipif(
    not FIXTURES.is_dir(),
    reason=f"no records of main at 6031fcf for this kind of CPU ({cpu_key()}): make them with "
    "tests/fixtures/main-6031fcf/record.sh from a 6031fcf install",
)


def _train(tmp_path: Path, run_id: str, *args: str) -> list[dict]:
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    subprocess.run(
        [
            sys.executable,
            "-m",
            "operant.trainer.run.main",
            *args,
            *TORCH_UPDATE,
            "--runs-dir",
            str(tmp_path),
            "--run-id",
            run_id,
            "--quiet",
        ],
        check=True,
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        timeout=240,
    )
    return records(tmp_path / run_id / "progress.jsonl")


def _first_difference(got: list[dict], expected: list[dict]) -> str:
    for index, (a, b) in enumerate(zip(got, expected)):
        if a != b:
            keys = sorted(key for key in a.keys() | b.keys() if a.get(key) != b.get(key))
            return (
                f"record {index} differs in {keys}: got {[a.get(k) for k in keys]}, "
                f"main had {[b.get(k) for k in keys]}"
            )
    return f"{len(got)} records, main had {len(expected)}"


@pytest.mark.parametrize(
    "name, config",
    [
        ("default", "configs/CartPole-v1.toml"),
        ("throughput", "configs/throughput/CartPole-v1.toml"),
    ],
)
def test_fixed_seed_run_reproduces_main_bit_for_bit(tmp_path, name, config):
    expected = records(FIXTURES / f"{name}.jsonl")
    got = _train(tmp_path, name, "--config", config, "--seed", "1")
    assert len(expected) > 50
    assert got == expected, _first_difference(got, expected)


def test_checkpoint_written_by_main_resumes_and_continues_as_main_did(tmp_path):
    run_dir = tmp_path / "resume"
    checkpoints = run_dir / "checkpoints"
    checkpoints.mkdir(parents=True)
    (checkpoints / "ckpt-000000020.pt").write_bytes((FIXTURES / "ckpt-000000020.pt").read_bytes())
    (checkpoints / "latest").write_text("ckpt-000000020.pt\n")
    # The checkpoint remembers progress.jsonl's length at update 20; give the run a log of
    # that length (its content is not read back, only cut there and appended to).
    import torch

    payload = torch.load(checkpoints / "ckpt-000000020.pt", weights_only=True)
    (run_dir / "progress.jsonl").write_bytes(b"x" * (payload["progress_bytes"] - 1) + b"\n")
    (run_dir / "run.json").write_text(json.dumps({"run_id": "resume"}))
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    subprocess.run(
        [
            sys.executable,
            "-m",
            "operant.trainer.run.main",
            "--resume",
            "resume",
            *TORCH_UPDATE,
            "--runs-dir",
            str(tmp_path),
            "--quiet",
        ],
        check=True,
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        timeout=240,
    )
    got = records(run_dir / "progress.jsonl", skip=1)
    expected = records(FIXTURES / "continuation.jsonl")
    assert [record["update"] for record in got] == list(range(21, 61))
    assert got == expected, _first_difference(got, expected)

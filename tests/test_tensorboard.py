"""TensorBoard event files (`operant-train --tensorboard`, `train.tensorboard = true`), read
back with TensorBoard's own EventAccumulator: the same scalars as progress.jsonl (names, values
rounded to float32, steps), whether the run finishes, is stopped by SIGTERM, fails on a NaN, or
is resumed after a crash that lost the updates past its checkpoint; and the one line, exit 2,
when the tensorboard package is missing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

from operant.shared.record import PHASES, RECORD_METRICS, UpdateRecord
from operant.trainer.services import tensorboard

SMALL = [
    "--set",
    "env.num_envs=8",
    "--set",
    "ppo.num_steps=32",
    "--set",
    "ppo.num_minibatches=2",
    "--quiet",
]
STEPS_PER_UPDATE = 8 * 32


def progress(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "progress.jsonl").read_text().splitlines()]


def expected_points(records: list[dict]) -> dict[str, dict[int, np.float32]]:
    """What the event files must hold, written from progress.jsonl by the rules docs state:
    every key at the record's global_step, phases as phase/<name>, solved as 0/1, no point
    for a null."""
    points: dict[str, dict[int, np.float32]] = {}
    for record in records:
        step = record["global_step"]
        values = {key: value for key, value in record.items() if key != "phase_s"}
        values.update({f"phase/{name}": value for name, value in record["phase_s"].items()})
        values["solved"] = record.get("solved", False)  # written only when true
        for tag, value in values.items():
            if value is not None:
                points.setdefault(tag, {})[step] = np.float32(value)
    return points


def event_points(run_dir: Path) -> dict[str, dict[int, np.float32]]:
    """The scalars TensorBoard reads from the run's event files; each step at most once per
    tag (a resumed run's redone updates replace the ones they redo)."""
    accumulator = EventAccumulator(
        str(run_dir / tensorboard.TENSORBOARD_DIR), size_guidance={SCALARS: 0}
    )
    accumulator.Reload()
    points = {}
    for tag in accumulator.Tags()["scalars"]:
        events = accumulator.Scalars(tag)
        steps = [event.step for event in events]
        assert len(steps) == len(set(steps)), f"{tag}: a step written twice: {steps}"
        points[tag] = {event.step: np.float32(event.value) for event in events}
    return points


def assert_same_scalars(run_dir: Path, updates: int) -> None:
    records = progress(run_dir)
    assert [record["update"] for record in records] == list(range(1, updates + 1))
    assert event_points(run_dir) == expected_points(records)


def training(root: Path, run_id: str, updates: int, *extra: str) -> list:
    """operant-train's arguments for a new run of `updates` small updates."""
    return [
        "--runs-dir",
        root,
        "--run-id",
        run_id,
        "--total-steps",
        updates * STEPS_PER_UPDATE,
        *SMALL,
        *extra,
    ]


@pytest.fixture(scope="module")
def server(trainer_server):
    return trainer_server


def test_scalars_are_every_number_of_the_record_under_progress_jsonl_names():
    tags = [tag for _, tag, _ in tensorboard.SCALARS]
    record_keys = [field.encode_name for field in msgspec.structs.fields(UpdateRecord)]
    mappings = {"phase_s": "phase", "env_phase_s": "env_phase"}
    assert tags == [mappings.get(key, key) for key in record_keys]
    assert record_keys[0] == "update" and len(tags) == len(RECORD_METRICS)
    record = UpdateRecord(
        updates=3,
        global_step=768,
        episodes=5,
        elapsed_s=1.5,
        sps=10.0,
        sps_mean=9.0,
        episode_return_mean=None,
        episode_return_min=None,
        episode_return_max=None,
        episode_length_mean=None,
        episodes_this_update=0,
        learning_rate=0.001,
        policy_loss=0.5,
        value_loss=2.0,
        entropy=0.6,
        approx_kl=None,
        clip_fraction=0.1,
        explained_variance=None,
        epochs=2.0,
        phase_s={phase: 0.25 for phase in PHASES},
        solved=True,
    )
    pairs = dict(tensorboard.scalars(record))
    assert pairs["update"] == 3.0 and pairs["global_step"] == 768.0 and pairs["solved"] == 1.0
    assert {tag for tag in pairs if tag.startswith("phase/")} == {f"phase/{p}" for p in PHASES}
    unmeasured = [tag for tag in tags if getattr(record, tag, 0) is None]
    unmeasured += [tag for tag in tags if tag == "env_phase" and record.env_phase_s is None]
    # None: no point (env_episodes, env_episode_return_mean and env_phase_s: one agent per env)
    assert len(unmeasured) == 9 and not set(unmeasured) & set(pairs)
    assert len(pairs) == len(tags) - len(unmeasured) - 1 + len(PHASES)


def test_the_compiled_checksum_is_tensorboards_and_the_writer_uses_it():
    from tensorboard.compat.tensorflow_stub import pywrap_tensorflow
    from tensorboard.summary.writer import record_writer

    from operant.cext.crc32c import crc32c, masked_crc32c

    assert crc32c(b"123456789") == 0xE3069283  # RFC 3720's check value
    generator = np.random.default_rng(0)
    for length in (0, 1, 7, 8, 9, 600, 4099):
        data = generator.integers(0, 256, length, dtype=np.uint8).tobytes()
        assert masked_crc32c(data) == pywrap_tensorflow.masked_crc32c(data)
    tensorboard.use_compiled_checksum()
    assert record_writer.masked_crc32c is masked_crc32c


def test_a_finished_run_has_the_scalars_of_progress_jsonl(server, tmp_path):
    code, _, err = server.run(training(tmp_path, "tb", 6, "--tensorboard"), tmp_path / "log")
    assert code == 0, err
    run_dir = tmp_path / "tb"
    assert_same_scalars(run_dir, 6)
    assert len(list((run_dir / "tensorboard").glob("events.out.tfevents.*"))) == 1
    assert json.loads((run_dir / "run.json").read_text())["config"]["train"]["tensorboard"]


def test_without_the_setting_no_event_files_are_written(server, tmp_path):
    code, _, err = server.run(training(tmp_path, "plain", 1), tmp_path / "log")
    assert code == 0, err
    assert progress(tmp_path / "plain") and not (tmp_path / "plain" / "tensorboard").exists()


def test_a_run_stopped_by_sigterm_has_flushed_every_update(server, tmp_path):
    run_dir = tmp_path / "stopped"
    server.start(
        training(tmp_path, "stopped", 100_000, "--set", "train.tensorboard=true"), tmp_path / "log"
    )
    deadline = time.monotonic() + 120
    while not (run_dir / "progress.jsonl").exists() or len(progress(run_dir)) < 5:
        assert time.monotonic() < deadline, "no 5 updates"
        time.sleep(0.05)
    os.kill(server.pid, signal.SIGTERM)
    assert server.wait() == 0, server.stderr.read_text()
    assert_same_scalars(run_dir, len(progress(run_dir)))


def test_a_failed_run_keeps_the_scalars_of_its_recorded_updates(server, tmp_path):
    code, _, err = server.run(
        training(tmp_path, "nan", 6, "--tensorboard"), tmp_path / "log", poison_after_update=3
    )
    assert code == 1 and "non-finite" in err, err
    assert_same_scalars(tmp_path / "nan", 2)  # update 3 is never recorded


def test_a_resumed_run_continues_its_events_and_redone_updates_replace_the_lost_ones(
    server, tmp_path
):
    run_dir = tmp_path / "crashed"
    every_4 = ["--set", "checkpoint.every_updates=4", "--set", "checkpoint.keep=5"]
    code, _, err = server.run(
        training(tmp_path, "crashed", 12, "--tensorboard", *every_4), tmp_path / "first"
    )
    assert code == 0, err
    # As if the process had died after update 12 with update 8's checkpoint its newest:
    # updates 9-12 are in the event files, and are redone by the resumed run.
    (run_dir / "checkpoints" / "latest").write_text("ckpt-000000008.pt\n")
    (run_dir / "checkpoints" / "ckpt-000000012.pt").unlink()
    lost = event_points(run_dir)["elapsed_s"]
    time.sleep(1.0)  # event files sort by their names' whole seconds: the new one comes later
    code, _, err = server.run(
        ["--runs-dir", tmp_path, "--resume", "crashed", "--quiet"], tmp_path / "second"
    )
    assert code == 0, err
    assert len(list((run_dir / "tensorboard").glob("events.out.tfevents.*"))) == 2
    assert_same_scalars(run_dir, 12)
    redone = event_points(run_dir)["elapsed_s"]
    steps = [update * STEPS_PER_UPDATE for update in range(9, 13)]
    assert [redone[step] for step in steps] != [lost[step] for step in steps]


def test_a_resume_after_a_kill_writes_again_what_the_killed_process_never_flushed(server, tmp_path):
    """A SIGKILL within the writer's flush interval of the checkpoint left the updates before
    it out of the event files for good (progress.jsonl had them): the resumed run writes the
    checkpoint's last records again. Here the killed process flushed nothing at all."""
    run_dir = tmp_path / "killed"
    every_4 = ["--set", "checkpoint.every_updates=4"]
    code, _, err = server.run(
        training(tmp_path, "killed", 8, "--tensorboard", *every_4), tmp_path / "first"
    )
    assert code == 0, err
    for events in (run_dir / "tensorboard").glob("events.out.tfevents.*"):
        events.unlink()
    more = ["--total-steps", 12 * STEPS_PER_UPDATE, "--tensorboard", "--quiet"]
    code, _, err = server.run(
        ["--runs-dir", tmp_path, "--resume", "killed", *more], tmp_path / "second"
    )
    assert code == 0, err
    assert_same_scalars(run_dir, 12)


def test_without_the_tensorboard_package_it_says_which_extra_and_starts_nothing(tmp_path):
    hidden = tmp_path / "hide"
    (hidden / "tensorboard").mkdir(parents=True)
    (hidden / "tensorboard" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'tensorboard'\")\n"
    )
    environment = {**os.environ, "PYTHONPATH": str(hidden)}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "operant.trainer.run.main",
            "--runs-dir",
            str(tmp_path / "runs"),
            "--tensorboard",
            "--total-steps",
            "2048",
        ],
        capture_output=True,
        text=True,
        env=environment,
        timeout=240,
    )
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "operant-train: train.tensorboard = true (--tensorboard) needs the tensorboard package "
        "(No module named 'tensorboard'): pip install 'operant-rl[tensorboard]', or leave it "
        "off (--set train.tensorboard=false)"
    ]
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_event_files_that_cannot_be_written_cost_one_warning_and_training_goes_on(tmp_path, capsys):
    (tmp_path / "run").write_text("a file where the run's folder should be")
    trainer = type("Trainer", (), {"global_step": 0})()
    service = tensorboard.WriteTensorBoard(tmp_path / "run" / "tensorboard", trainer)
    service.on_start()
    service.on_update(None)  # no writer: nothing to do, nothing raised
    service.close()
    assert capsys.readouterr().err.splitlines() == [
        f"operant-train: warning: cannot write TensorBoard event files in "
        f"{tmp_path / 'run' / 'tensorboard'}: [Errno 20] Not a directory: "
        f"'{tmp_path / 'run' / 'tensorboard'}'; training goes on without them"
    ]

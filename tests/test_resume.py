"""Checkpoints and resume, end to end through operant-train's main(): exact resume after
SIGTERM, SIGKILL at random moments, the NaN guard, and every way a resume is refused.

Trainers are forked from a server that has torch imported (conftest.py's trainer_server,
trainer_forkserver.py), so each start costs milliseconds; everything else (pids, handlers,
locks, files, exit status) is a real trainer process's.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import random
import re
import signal
import time
from pathlib import Path

import pytest
import torch

from operant.shared import metrics_layout as fmt
from operant.shared.reader import MetricsReader
from operant.trainer.checkpoint import file_format as checkpoint_format
from operant.trainer.checkpoint import store as checkpoint
from operant.trainer.config import derive, load_config

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
STEPS_PER_UPDATE = 8 * 32
SMALL = [
    "--set",
    "env.num_envs=8",
    "--set",
    "ppo.num_steps=32",
    "--set",
    "ppo.num_minibatches=2",
    "--set",
    "ppo.update_epochs=2",
]
# Keys of a progress record that measure time rather than training.
TIMINGS = {"elapsed_s", "sps", "sps_mean", "phase_s"}
# The run both exactness tests compare against, trained once without interruption.
UPDATES = 160


def budget(tmp: Path) -> list:
    return ["--runs-dir", tmp, "--total-steps", UPDATES * STEPS_PER_UPDATE, *SMALL, "--quiet"]


@pytest.fixture(scope="module")
def server(trainer_server):
    return trainer_server


@pytest.fixture(scope="module")
def whole(server, tmp_path_factory) -> Path:
    """A run of UPDATES updates that nothing interrupted."""
    root = tmp_path_factory.mktemp("whole")
    code, _, err = server.run([*budget(root), "--run-id", "whole"], root / "log")
    assert code == 0, err
    return root / "whole"


def progress(run_dir: Path) -> list[dict]:
    path = run_dir / "progress.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def without_timings(records: list[dict]) -> list[dict]:
    return [
        {key: value for key, value in record.items() if key not in TIMINGS} for record in records
    ]


def final_state(run_dir: Path) -> dict:
    """The newest checkpoint's trainer state and the model file's weights."""
    payload = checkpoint_format.load(checkpoint.find_checkpoint(run_dir / "checkpoints"))
    model = torch.load(run_dir / "model.pt", weights_only=True)
    return {"trainer": payload["trainer"], "model": model["policy"]}


def assert_identical(a, b, where="") -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape, where
        assert torch.equal(a, b), f"{where} differs"
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            if key != "elapsed_s":
                assert_identical(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for index, (x, y) in enumerate(zip(a, b)):
            assert_identical(x, y, f"{where}[{index}]")
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def tree_digest(path: Path) -> dict[str, str]:
    """Every file under `path` by content (what 'nothing was overwritten' compares)."""
    return {
        str(file.relative_to(path)): hashlib.sha256(file.read_bytes()).hexdigest()
        for file in sorted(path.rglob("*"))
        if file.is_file()
    }


def wait_for_records(run_dir: Path, count: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    path = run_dir / "progress.jsonl"
    while time.monotonic() < deadline:
        if path.exists() and path.read_bytes().count(b"\n") >= count:
            return
        time.sleep(0.005)
    raise AssertionError(f"{path}: fewer than {count} records after {timeout} s")


def test_deploy_example_config_decodes_with_a_fixed_run_id():
    config = load_config(DEPLOY / "cartpole.toml")
    assert config.train.run_id == "cartpole"  # what --resume auto needs
    assert config.env.id == "CartPole-v1" and config.train.total_steps == 10_000_384
    # whole updates: no rounding notice on stderr ahead of the JSON lines in the journal
    assert derive(config).rounding_note(config) is None
    assert config.checkpoint.every_seconds == 600.0 and config.checkpoint.keep == 3


def test_sigterm_then_resume_is_bit_identical_to_one_run(server, whole, tmp_path):
    updates = UPDATES
    pid = server.start([*budget(tmp_path), "--run-id", "split"], tmp_path / "split")
    wait_for_records(tmp_path / "split", updates // 2)
    signalled = time.monotonic()
    os.kill(pid, signal.SIGTERM)
    code = server.wait()
    stop_seconds = time.monotonic() - signalled
    assert code == 0, server.stderr.read_text()
    assert stop_seconds < 10.0  # the unit allows TimeoutStopSec=5min
    run_dir = tmp_path / "split"
    stopped_at = len(progress(run_dir))
    assert updates // 2 <= stopped_at < updates
    assert (
        run_dir / "checkpoints" / "latest"
    ).read_text() == f"{checkpoint.file_name(stopped_at)}\n"
    with MetricsReader(run_dir / "metrics.bin") as reader:
        snapshot = reader.snapshot()
    assert (snapshot.state, snapshot.interrupted) == ("finished", True)
    assert snapshot.reason.startswith(f"stopped by SIGTERM at update {stopped_at}")
    assert snapshot.counters["updates"] == stopped_at
    assert not (run_dir / "model.pt").exists()
    print(f"SIGTERM to exit: {stop_seconds:.3f} s (stopped at update {stopped_at})")

    # No --config, no --set: the run's own config comes from the checkpoint.
    code, _, err = server.run(
        ["--runs-dir", tmp_path, "--resume", "split", "--quiet"], tmp_path / "resumed"
    )
    assert code == 0, err
    assert f"resumed at update {stopped_at}" in err

    split = progress(run_dir)
    assert [record["update"] for record in split] == list(range(1, updates + 1))
    assert without_timings(split) == without_timings(progress(whole))
    assert split[-1]["elapsed_s"] > split[stopped_at - 1]["elapsed_s"]  # the clock continued
    assert_identical(final_state(whole), final_state(run_dir))

    # The metrics file continues the same history: one record per update, same values.
    with MetricsReader(whole / "metrics.bin") as a, MetricsReader(run_dir / "metrics.bin") as b:
        history_a, history_b = a.history(), b.history()
        snapshot_a, snapshot_b = a.snapshot(), b.snapshot()
    assert [r.index for r in history_b.records] == list(
        range(updates)
    ) and history_b.head == updates
    fields = [
        b.schema.history_index(name)
        for name in ("global_step", "episode_return_mean", "policy_loss", "learning_rate")
    ]
    assert [[r.values[i] for i in fields] for r in history_a.records] == [
        [r.values[i] for i in fields] for r in history_b.records
    ]
    positions = ("global_step", "episodes", "updates")
    assert [snapshot_b.counters[name] for name in positions] == [
        snapshot_a.counters[name] for name in positions
    ]
    # What the resuming process itself did: the updates after the stop.
    assert snapshot_b.counters["process_updates"] == updates - stopped_at
    assert (
        snapshot_b.counters["process_steps"]
        == snapshot_a.counters["global_step"] * (updates - stopped_at) // updates
    )
    assert (snapshot_b.state, snapshot_b.interrupted) == ("finished", False)
    meta = json.loads((run_dir / "run.json").read_text())
    assert [entry["update"] for entry in meta["resumes"]] == [stopped_at]


def test_sigkill_at_random_moments_never_leaves_a_broken_checkpoint(server, whole, tmp_path):
    """A checkpoint after every update, and SIGKILL at random moments (start-up, updates,
    checkpoint writes): every checkpoint file is always whole, the pointer always names one,
    each restart resumes, at most one update is lost, and the run ends bit-identical to one
    that was never killed."""
    updates, trials, most_per_trial = UPDATES, 24, 5
    common = [
        *budget(tmp_path),
        "--set",
        "checkpoint.every_updates=1",
        "--set",
        "checkpoint.keep=2",
    ]
    killed_args = [*common, "--run-id", "killed", "--resume", "auto"]
    run_dir, checkpoints = tmp_path / "killed", tmp_path / "killed" / "checkpoints"
    chooser = random.Random(20261122)
    resumed_at, leftovers, lost, resumes = 0, 0, [], 0
    for trial in range(trials):
        pid = server.start(killed_args, tmp_path / f"trial{trial}")
        # Every other kill comes after the start-up, however loaded the machine (two test
        # workers beside other work made start-ups outlast the random moment): with a
        # checkpoint to resume from, once the start says it resumed (the progress log may
        # already hold the one update past the checkpoint that the last kill lost, so its
        # length alone did not show a finished start-up: CI once counted 10 resumes of 24
        # trials); without one, once the run logs an update.
        after_start_up = trial % 2 == 1
        if after_start_up:
            settled = time.monotonic() + 30
            while time.monotonic() < settled and not (
                (server.stderr.exists() and "resumed at update" in server.stderr.read_text())
                if resumed_at
                else len(progress(run_dir)) > 0
            ):
                time.sleep(0.002)
        # A random moment, but soon enough that 24 trials stay within the run's budget.
        deadline = time.monotonic() + chooser.uniform(0.01, 0.3)
        while time.monotonic() < deadline and len(progress(run_dir)) < resumed_at + most_per_trial:
            time.sleep(0.002)
        os.kill(pid, signal.SIGKILL)
        assert server.wait() == -signal.SIGKILL, f"trial {trial} ended by itself"
        # (a kill right after the fork can come before the child has opened its log)
        err = server.stderr.read_text() if server.stderr.exists() else ""
        assert "Traceback" not in err
        # A kill during start-up comes before this line; any later one resumed right here.
        match = re.search(r"resumed at update (\d+) from ", err)
        if match:
            assert int(match.group(1)) == resumed_at
            resumes += 1
        else:
            assert not (after_start_up and resumed_at), f"trial {trial} did not resume"
        files = checkpoint.checkpoint_files(checkpoints)
        for path in files:  # every complete-named file is whole and verifies
            payload = checkpoint_format.load(path)
            assert payload["trainer"]["counters"]["update"] == checkpoint.update_of(path)
        leftovers += sum(1 for path in checkpoints.iterdir() if path.name.endswith(".tmp"))
        found = checkpoint.find_checkpoint(checkpoints)
        newest = checkpoint.update_of(found) if found else 0
        records = progress(run_dir)
        assert [record["update"] for record in records] == list(range(1, len(records) + 1))
        # Lost: updates logged before the kill that the next start redoes (at most one).
        lost.append(len(records) - newest)
        assert 0 <= len(records) - newest <= 1, (trial, len(records), newest)
        assert newest >= resumed_at
        resumed_at = newest
    assert 0 < resumed_at < updates and resumes > 0

    code, _, err = server.run(killed_args, tmp_path / "final")
    assert code == 0, err
    assert without_timings(progress(run_dir)) == without_timings(progress(whole))
    assert_identical(final_state(whole), final_state(run_dir))
    assert len(checkpoint.checkpoint_files(checkpoints)) == 2  # checkpoint.keep
    print(
        f"{trials} SIGKILLs: run reached update {resumed_at} of {updates}; updates lost per "
        f"kill {lost}; {resumes} trials resumed before the kill; temporary files left by "
        f"kills mid-write: {leftovers}"
    )


def test_nan_guard_stops_fails_the_run_and_keeps_the_last_good_checkpoint(server, tmp_path):
    common = [
        "--runs-dir",
        tmp_path,
        "--run-id",
        "diverged",
        "--total-steps",
        8 * STEPS_PER_UPDATE,
        *SMALL,
        "--set",
        "checkpoint.every_updates=1",
        "--quiet",
    ]
    code, _, err = server.run(common, tmp_path / "nan", poison_after_update=4)
    assert code == 1
    (line,) = err.strip().splitlines()
    run_dir = tmp_path / "diverged"
    kept = checkpoint_format.load(checkpoint.find_checkpoint(run_dir / "checkpoints"))
    first_parameter = next(iter(kept["trainer"]["policy"]))  # the one poisoned
    assert line == (
        f"operant-train: training failed: non-finite values in parameter {first_parameter} "
        f"after update 4; the last good checkpoint is "
        f"{tmp_path}/diverged/checkpoints/ckpt-000000003.pt"
    )
    assert [path.name for path in checkpoint.checkpoint_files(run_dir / "checkpoints")] == [
        "ckpt-000000001.pt",
        "ckpt-000000002.pt",
        "ckpt-000000003.pt",
    ]  # keep = 3
    assert checkpoint.find_checkpoint(run_dir / "checkpoints").name == "ckpt-000000003.pt"
    assert len(progress(run_dir)) == 3  # the diverged update was never logged
    with MetricsReader(run_dir / "metrics.bin") as reader:
        snapshot = reader.snapshot()
    assert snapshot.status == "failed" and "non-finite values in parameter" in snapshot.reason
    assert snapshot.counters["updates"] == 3
    # The kept checkpoint is good: the run continues from it.
    code, _, err = server.run([*common, "--resume", "auto"], tmp_path / "after")
    assert code == 0, err
    assert "resumed at update 3" in err and len(progress(run_dir)) == 8


def _rewrite(path: Path, **changes) -> None:
    """Re-save a checkpoint with some fields changed and a valid digest (so only the change
    itself can be refused)."""
    payload = torch.load(path, weights_only=True)
    payload.update(changes)
    payload["digest"] = checkpoint_format.content_digest(payload)
    torch.save(payload, path)


def test_bad_resumes_are_one_line_exit_2_and_overwrite_nothing(server, tmp_path):
    code, _, err = server.run(
        [
            "--runs-dir",
            tmp_path,
            "--run-id",
            "good",
            "--total-steps",
            2 * STEPS_PER_UPDATE,
            *SMALL,
            "--quiet",
        ],
        tmp_path / "good",
    )
    assert code == 0, err
    run_dir = tmp_path / "good"
    ckpt = run_dir / "checkpoints" / "ckpt-000000002.pt"
    original = ckpt.read_bytes()

    def refused(argv: list, message: str, name: str) -> None:
        before = tree_digest(tmp_path)
        code, out, err = server.run(["--runs-dir", tmp_path, *argv], tmp_path.parent / name)
        assert code == 2, (argv, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], (message, err)
        assert "Traceback" not in err and out == ""
        assert tree_digest(tmp_path) == before

    refused(["--resume", "nope"], f"no run 'nope' under {tmp_path}", "missing")
    refused(
        ["--resume", "good", "--set", "policy.hidden_sizes=[32]"],
        "ckpt-000000002.pt was written with policy.hidden_sizes = [64, 64], but the config "
        "says [32]",
        "hidden",
    )
    refused(
        ["--resume", "good", "--set", "env.num_envs=4"],
        "was written with env.num_envs = 8, but the config says 4",
        "envs",
    )
    # Values as the user writes them in TOML or --set (they were Python's: False, None, 'x').
    refused(
        ["--resume", "good", "--set", "normalize.obs=true"],
        "was written with normalize.obs = false, but the config says true;",
        "obs",
    )
    refused(
        ["--resume", "good", "--set", "env.max_episode_steps=100"],
        "was written with env.max_episode_steps = none, but the config says 100;",
        "limit",
    )
    refused(
        ["--resume", "good", "--set", "env.info_mode=full"],
        'was written with env.info_mode = "stats", but the config says "full";',
        "info",
    )
    # (a budget below the steps trained was "done" at once, recorded, the monitor past 100%)
    refused(
        ["--resume", "good", "--total-steps", 1],
        f"train.total_steps = 1 is below the {2 * STEPS_PER_UPDATE:,} "
        "steps run good has trained (2 updates): give a larger budget, or leave it out",
        "budget",
    )
    refused(["--resume", "auto", *SMALL], "--resume auto needs a fixed run id", "auto")
    refused(["--run-id", "good", *SMALL], "run 'good' already exists", "exists")

    lock = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        refused(
            ["--resume", "good"], "run 'good' is being trained by another process (pid ", "locked"
        )
    finally:
        os.close(lock)

    for damage, message in (
        (
            lambda: ckpt.write_bytes(original[: len(original) // 2]),
            "is corrupt or not a checkpoint",
        ),
        (lambda: ckpt.write_bytes(b"not a checkpoint\n"), "is corrupt or not a checkpoint"),
        (lambda: _flip_tensor_byte(ckpt), "is corrupt (its content does not match its digest)"),
        (
            lambda: _rewrite(ckpt, metrics_layout=(fmt.VERSION_MAJOR + 1, 0)),
            f"written for metrics layout {fmt.VERSION_MAJOR + 1}.0",
        ),
        (
            lambda: _rewrite(ckpt, version=checkpoint_format.VERSION + 1),
            f"checkpoint format {checkpoint_format.VERSION + 1}, this operant reads "
            f"{checkpoint_format.VERSION}; upgrade operant",
        ),
        (lambda: (ckpt.unlink(), ckpt.mkdir()), "is a directory, not a checkpoint"),
        (
            lambda: (run_dir / "checkpoints" / "latest").write_text("ckpt-000000009.pt\n"),
            "names ckpt-000000009.pt, which does not exist",
        ),
    ):
        damage()
        refused(["--resume", "good"], message, "damaged")
        if ckpt.is_dir():
            ckpt.rmdir()
        ckpt.write_bytes(original)
        (run_dir / "checkpoints" / "latest").write_text(f"{ckpt.name}\n")
    # Undamaged again, it resumes (and, already complete, just finishes).
    code, _, err = server.run(
        ["--runs-dir", tmp_path, "--resume", "latest", "--quiet"], tmp_path.parent / "fine"
    )
    assert code == 0, err


def test_a_resume_that_sets_an_env_option_is_refused(server, tmp_path):
    # (--set env.options.X wrote into the checkpoint's own saved [env.options] table, so the
    # check compared the saved config with itself: sticky actions went off unsaid)
    small = [
        "--set",
        "env.num_envs=4",
        "--set",
        "ppo.num_steps=8",
        "--set",
        "ppo.num_minibatches=2",
    ]
    code, _, err = server.run(
        ["--runs-dir", tmp_path, "--run-id", "r", "--env", "MinAtar-Breakout-v1",
         "--total-steps", 64, *small, "--quiet"],
        tmp_path / "first",
    )  # fmt: skip
    assert code == 0, err
    before = tree_digest(tmp_path / "r")
    for option, value, saved in (
        ("sticky_action_prob", "0.0", "none"),
        ("difficulty_ramping", "false", "none"),
    ):
        code, out, err = server.run(
            ["--runs-dir", tmp_path, "--resume", "r", "--total-steps", 128,
             "--set", f"env.options.{option}={value}"],
            tmp_path / option,
        )  # fmt: skip
        assert (code, out) == (2, ""), err
        assert err.strip() == (
            f"operant-train: ckpt-000000002.pt was written with env.options.{option} = {saved}, "
            f"but the config says {value}; resume with the run's own config, or train under a "
            "new run id"
        )
        assert tree_digest(tmp_path / "r") == before


def test_a_run_written_on_a_gpu_continues_on_a_cpu(server, tmp_path):
    """A checkpoint as a CUDA run writes it (train.device = "cuda"; its sampling generator's
    state a seed and an offset, 16 bytes, where the CPU's is 5,056) resumes on a CPU with
    --set train.device=cpu: the weights, Adam and the envs carry over, the sampling generator
    is re-seeded, and the run says so (on a real H200, benchmarks/gpu_check.sh)."""
    code, _, err = server.run(
        ["--runs-dir", tmp_path, "--run-id", "gpu", "--total-steps", 2 * STEPS_PER_UPDATE]
        + [*SMALL, "--quiet"],
        tmp_path / "first",
    )
    assert code == 0, err
    ckpt = tmp_path / "gpu" / "checkpoints" / "ckpt-000000002.pt"
    payload = torch.load(ckpt, weights_only=True)
    payload["config"]["train"]["device"] = "cuda"
    payload["trainer"]["generator"] = torch.tensor([7, 0, 0, 0, 0, 0, 0, 0] + [0] * 8).to(
        torch.uint8
    )
    kept_weights = {name: value.clone() for name, value in payload["trainer"]["policy"].items()}
    _rewrite(ckpt, config=payload["config"], trainer=payload["trainer"])

    common = ["--runs-dir", tmp_path, "--resume", "gpu", "--quiet"]
    code, _, err = server.run(common, tmp_path / "same")
    assert code == 2 and "train.device" in err  # the run's own config asks for CUDA
    steps = ["--total-steps", 3 * STEPS_PER_UPDATE]
    code, _, err = server.run([*common, *steps, "--set", "train.device=cpu"], tmp_path / "cpu")
    assert code == 0, err
    lines = err.strip().splitlines()
    assert lines[:2] == [
        f"operant-train: run gpu resumed at update 2 from {ckpt}",
        "operant-train: warning: ckpt-000000002.pt was written with train.device = 'cuda' and "
        "this run trains on 'cpu': the weights, the optimizer and the envs carry over, action "
        "sampling starts from a new seed, so the run goes on but not as it would have on "
        "'cuda'",
    ]
    resumed = checkpoint_format.load(tmp_path / "gpu" / "checkpoints" / "ckpt-000000003.pt")
    assert resumed["config"]["train"]["device"] == "cpu"
    assert resumed["trainer"]["counters"]["update"] == 3
    assert resumed["trainer"]["generator"].numel() == torch.Generator().get_state().numel()
    # One update from the carried weights: moved, but not far (not a fresh network).
    for name, before in kept_weights.items():
        after = resumed["trainer"]["policy"][name]
        assert after.shape == before.shape and 0 < (after - before).abs().max() < 0.1, name


def test_resume_auto_falls_back_past_damaged_checkpoints_and_sets_them_aside(server, tmp_path):
    """A service must not stay down for a damaged newest checkpoint: `--resume auto` takes the
    newest older one that reads, renames the damaged ones to *.damaged (their bytes kept),
    drops the `latest` that named one, and says so in one line; with none readable left it
    refuses (exit 2) as before."""
    common = ["--runs-dir", tmp_path, "--run-id", "damaged", *SMALL, "--quiet",
              "--set", "checkpoint.every_updates=1"]  # fmt: skip
    code, _, err = server.run([*common, "--total-steps", 4 * STEPS_PER_UPDATE], tmp_path / "a")
    assert code == 0, err
    directory = tmp_path / "damaged" / "checkpoints"
    newest, middle = directory / "ckpt-000000004.pt", directory / "ckpt-000000003.pt"
    _flip_tensor_byte(newest)
    middle.write_bytes(middle.read_bytes()[:1000])
    damaged_bytes = {path.name: path.read_bytes() for path in (newest, middle)}
    auto = [*common, "--resume", "auto", "--total-steps", 6 * STEPS_PER_UPDATE]
    code, _, err = server.run(auto, tmp_path / "b")
    assert code == 0, err
    assert (
        "operant-train: ckpt-000000004.pt is corrupt (its content does not match its digest); "
        "resuming from ckpt-000000002.pt, the newest checkpoint that reads (ckpt-000000004.pt, "
        "ckpt-000000003.pt set aside as *.damaged)"
    ) in err.splitlines()
    assert "resumed at update 2" in err
    assert [record["update"] for record in progress(tmp_path / "damaged")] == list(range(1, 7))
    for name, content in damaged_bytes.items():
        assert (directory / f"{name}.damaged").read_bytes() == content
    files = checkpoint.checkpoint_files(directory)
    assert [path.name for path in files] == [f"ckpt-00000000{n}.pt" for n in (4, 5, 6)]
    for path in files:
        checkpoint_format.load(path)  # every checkpoint left reads
    # Nothing readable left: refused, as an explicit --resume always is.
    for path in checkpoint.checkpoint_files(directory):
        path.write_bytes(b"not a checkpoint\n")
    code, _, err = server.run([*auto[:-1], 8 * STEPS_PER_UPDATE], tmp_path / "c")
    assert code == 2 and "is corrupt or not a checkpoint" in err, err


def _flip_tensor_byte(path: Path) -> None:
    """Change one byte of tensor data inside the zip archive, which torch.load does not
    notice (it does not check the archive's CRCs): only the digest can."""
    data = bytearray(path.read_bytes())
    marker = data.find(b"/data/0")
    assert marker > 0
    # Stored (uncompressed) records: the first tensor's bytes follow its local header.
    data[marker + 200] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("content", "length", "kept"),
    [
        # the file's end lost with the power: the cut last line goes, the next record starts a
        # line of its own (it was appended to the cut one, losing both to every reader)
        (b'{"update":1}\n{"update":2}\n{"upd', 40, b'{"update":1}\n{"update":2}\n'),
        (b'{"upd', 40, b""),
        (b'{"update":1}\n{"update":2}\n', 40, b'{"update":1}\n{"update":2}\n'),
        # records past the checkpoint, which the resumed run trains again
        (b'{"update":1}\n{"update":2}\n{"update":3}\n', 13, b'{"update":1}\n'),
    ],
)
def test_progress_is_cut_to_whole_lines(tmp_path, content, length, kept):
    from operant.trainer.services.progress import cut_progress

    path = tmp_path / "progress.jsonl"
    path.write_bytes(content)
    assert cut_progress(path, length) == len(content) - len(kept)
    assert path.read_bytes() == kept


def test_resume_hints_name_the_ranks_the_checkpoints_need(tmp_path, monkeypatch):
    from operant.shared.runs import RUNS_DIR_ENV
    from operant.trainer.checkpoint.file_format import CheckpointError
    from operant.trainer.checkpoint.resume import _check_world, resume_hint

    monkeypatch.delenv(RUNS_DIR_ENV, raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    root = tmp_path / "state" / "operant" / "runs"  # the default: no --runs-dir in the hints
    for name in ("WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    assert resume_hint("r", root) == "operant-train --resume r"
    # a rank of 2 per node on 2 nodes: the stop's "continue with" pasted as printed
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setenv("GROUP_WORLD_SIZE", "2")
    assert resume_hint("r", root) == (
        "operant-train --nproc-per-node 2 --resume r (on every node, with the job's --nnodes "
        "and --rdzv-* flags)"
    )
    # a lone process given a 2-rank checkpoint: the refusal's command resumes it
    monkeypatch.delenv("WORLD_SIZE")
    path = root / "r" / "checkpoints" / "ckpt-000000003.pt"
    with pytest.raises(CheckpointError) as refused:
        _check_world(path, {"world_size": 2})
    assert str(refused.value) == (
        "ckpt-000000003.pt was written by 2 rank(s) and this is 1: resume it with "
        "operant-train --nproc-per-node 2 --resume r"
    )


def test_a_resumed_runs_counters_never_step_back_for_a_reader(server, tmp_path):
    """A resume builds its new metrics file whole before it appears: its replayed history and
    the checkpoint's counters. The file used to appear at 0 and replay its records one by
    one, so a reader (the exporter: a Prometheus counter reset) saw steps fall from the
    run's total and climb back."""
    import threading

    from operant.shared.reader import MetricsFileError, MetricsReader

    updates = 600
    common = ["--runs-dir", tmp_path, "--run-id", "long", *SMALL, "--quiet"]
    first = ["--total-steps", updates * STEPS_PER_UPDATE]
    code, _, err = server.run([*common, *first], tmp_path / "first")
    assert code == 0, err
    path = tmp_path / "long" / "metrics.bin"
    seen: list[tuple[int, int]] = []
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            try:
                with MetricsReader(path) as reader:
                    seen.append((os.stat(path).st_ino, reader.snapshot().counters["global_step"]))
            except (MetricsFileError, FileNotFoundError, KeyError):
                pass

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        more = ["--resume", "long", "--total-steps", (updates + 40) * STEPS_PER_UPDATE]
        code, _, err = server.run(["--runs-dir", tmp_path, *more, "--quiet"], tmp_path / "more")
    finally:
        done.set()
        poller.join()
    assert code == 0, err
    steps = [step for _, step in seen]
    assert len({inode for inode, _ in seen}) == 2  # the old file, then the resumed run's
    assert steps[0] == updates * STEPS_PER_UPDATE and steps[-1] == (updates + 40) * STEPS_PER_UPDATE
    assert all(a <= b for a, b in zip(steps, steps[1:])), sorted(set(steps))[:5]


def test_run_json_keeps_the_command_that_started_the_run(tmp_path):
    # (a resume rebuilt it from the resuming process: the starting command was gone)
    from user_runs import run

    first = ["--runs-dir", str(tmp_path), "--run-id", "r", "--total-steps", "2048", "--quiet"]
    again = ["--runs-dir", str(tmp_path), "--resume", "r", "--total-steps", "4096", "--quiet"]
    for argv in (first, again):
        assert run("operant-train", *argv).returncode == 0
    meta = json.loads((tmp_path / "r" / "run.json").read_text())
    assert meta["argv"][1:] == first
    assert [entry["argv"][1:] for entry in meta["resumes"]] == [again]
    assert meta["resumes"][0]["pid"] == meta["pid"]  # the process that holds the run now

"""A live run's directory deleted, moved, or its filesystem turned read-only (issue 41): one
line naming what happened, exit 1, the run's status failed with that reason, and the
checkpoints as docs/deploy.md says (gone with a deleted run; whole and resumable in a moved
one; as they were on a read-only disk). Real trainers (the fork server), real `rm -rf`, `mv`
and, as root with a loop device, a real ext4 remounted read-only by its own error handling."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_exporter import SMALL

from operant.shared.reader import MetricsReader

ENDLESS = [*SMALL, "--total-steps", 256 * 100_000, "--quiet", "--set", "checkpoint.every_updates=5"]


def start(server, root: Path, run_id: str, logs: Path) -> int:
    pid = server.start(["--runs-dir", root, "--run-id", run_id, *ENDLESS], logs)
    progress = root / run_id / "progress.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # a checkpoint (update 5) and a few updates more
        if progress.exists() and progress.read_bytes().count(b"\n") >= 7:
            return pid
        time.sleep(0.01)
    raise AssertionError(f"no progress in {progress}")


def the_line(logs: Path) -> str:
    lines = Path(f"{logs}.err").read_text().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_a_deleted_run_directory_ends_the_run_in_one_line(tmp_path, trainer_server):
    root = tmp_path / "runs"
    start(trainer_server, root, "gone", tmp_path / "gone")
    # A checkpoint the trainer writes while the tree is being removed can leave a directory
    # not empty under the removal (as under `rm -rf`): removed again, as a person would.
    deadline = time.monotonic() + 30
    while (root / "gone").exists() and time.monotonic() < deadline:
        shutil.rmtree(root / "gone", ignore_errors=True)
    assert trainer_server.wait() == 1
    line = the_line(tmp_path / "gone")
    assert re.fullmatch(
        rf"operant-train: training failed: the run directory {root / 'gone'} was deleted while "
        r"training \(after update \d+\); its checkpoints went with it and nothing was written "
        r"elsewhere: the run stops, and a new start trains it from the beginning",
        line,
    ), line
    assert not (root / "gone").exists()  # not made again


def test_a_moved_run_directory_fails_there_and_resumes_there(tmp_path, trainer_server):
    root, archive = tmp_path / "runs", tmp_path / "archive"
    start(trainer_server, root, "moved", tmp_path / "moved")
    archive.mkdir()
    os.rename(root / "moved", archive / "kept")
    assert trainer_server.wait() == 1
    line = the_line(tmp_path / "moved")
    match = re.fullmatch(
        rf"operant-train: training failed: (the run directory {root / 'moved'} was moved to "
        rf"{archive / 'kept'} while training \(after update (\d+)\); the run stops; its last "
        rf"checkpoint is ({archive}/kept/checkpoints/ckpt-\d+\.pt); continue it there with "
        rf"operant-train --resume kept --runs-dir {archive})",
        line,
    )
    assert match, line
    reason, update, checkpoint = match.group(1), int(match.group(2)), Path(match.group(3))
    # Nothing else lost: the file says failed and why; every update's record is there.
    with MetricsReader(archive / "kept" / "metrics.bin") as reader:
        snapshot = reader.snapshot()
    assert (snapshot.status, snapshot.reason) == ("failed", reason)
    records = (archive / "kept" / "progress.jsonl").read_text().splitlines()
    assert [json.loads(record)["update"] for record in records] == list(range(1, update + 1))
    assert checkpoint.exists() and not (root / "moved").exists()
    returncode, stdout, _ = trainer_server.run(
        ["--runs-dir", archive, "--resume", "kept", "--total-steps", (update + 2) * 256],
        tmp_path / "resumed",
    )
    resumed_at = int(checkpoint.stem.split("-")[1])
    assert returncode == 0 and f", resumed at update {resumed_at} from {checkpoint.name}" in stdout


def _loop_ext4(image: Path, mountpoint: Path) -> str | None:
    """Mount a fresh ext4 image that remounts itself read-only on an error; why not, or None."""
    if os.geteuid() != 0 or not shutil.which("mkfs.ext4") or not Path("/dev/loop-control").exists():
        return "needs root, mkfs.ext4 and loop devices"
    subprocess.run(["truncate", "-s", "64M", str(image)], check=True)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True, capture_output=True)
    mountpoint.mkdir()
    mounted = subprocess.run(
        ["mount", "-o", "loop,errors=remount-ro", str(image), str(mountpoint)],
        capture_output=True, text=True,
    )  # fmt: skip
    return None if mounted.returncode == 0 else f"mount failed: {mounted.stderr.strip()}"


def test_a_runs_root_turned_read_only_ends_the_run_in_one_line(tmp_path, trainer_server):
    image, mountpoint = tmp_path / "disk.img", tmp_path / "disk"
    why = _loop_ext4(image, mountpoint)
    if why is not None:
        pytest.skip(why)
    try:
        root = mountpoint / "runs"
        start(trainer_server, root, "ro", tmp_path / "ro")
        device = Path(os.path.realpath(subprocess.run(
            ["findmnt", "-n", "-o", "SOURCE", str(mountpoint)], capture_output=True, text=True,
            check=True).stdout.strip())).name  # fmt: skip
        # ext4's own error path (errors=remount-ro): as a failing disk turns it read-only.
        Path(f"/sys/fs/ext4/{device}/trigger_fs_error").write_text("test\n")
        assert trainer_server.wait() == 1
        line = the_line(tmp_path / "ro")
        match = re.fullmatch(
            rf"operant-train: training failed: (the run directory {root / 'ro'} turned read-only "
            r"while training \(after update \d+\): Read-only file system; the run stops; its "
            rf"last checkpoint ({root}/ro/checkpoints/ckpt-\d+\.pt) is as it was; once the "
            rf"filesystem is writable, continue with operant-train --resume ro --runs-dir {root})",
            line,
        )
        assert match, line
        monitor = subprocess.run(
            [str(Path(sys.executable).with_name("operant")), "monitor", "--runs-dir", str(root),
             "ro", "--once", "--json"], capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        document = json.loads(monitor.stdout)
        assert (document["status"], document["reason"]) == ("failed", match.group(1))
        assert Path(match.group(2)).stat().st_size > 0
    finally:
        subprocess.run(["umount", str(mountpoint)], capture_output=True)


def test_a_checkpoints_eio_on_an_ext4_turned_read_only_is_the_directorys_loss(tmp_path):
    """The write in flight when ext4 hits its error fails with EIO, not EROFS, and since Linux
    6.x statvfs still says read-write afterwards ("emergency_ro"): the watch asks the
    filesystem itself (a file it cannot make) and names the loss; on a healthy disk an EIO
    stays the disk's error, after the watch has looked for a second."""
    from types import SimpleNamespace

    from operant.trainer.run.run_dir_watch import EIO_SETTLE_S, WRITE_PROBE, RunDirLost, WatchRunDir

    image, mountpoint = tmp_path / "disk.img", tmp_path / "disk"
    why = _loop_ext4(image, mountpoint)
    if why is not None:
        pytest.skip(why)
    try:
        run_dir = mountpoint / "runs" / "eio"
        run_dir.mkdir(parents=True)
        last = run_dir / "checkpoints" / "ckpt-000000005.pt"
        watch = WatchRunDir(run_dir, SimpleNamespace(update=7), SimpleNamespace(last_path=last))
        watch.on_start()
        eio = OSError(5, os.strerror(5))
        started = time.monotonic()
        assert watch.explain(eio) is eio  # a healthy filesystem: the disk's own error
        assert time.monotonic() - started >= EIO_SETTLE_S
        assert not (run_dir / WRITE_PROBE).exists()
        device = Path(os.path.realpath(subprocess.run(
            ["findmnt", "-n", "-o", "SOURCE", str(mountpoint)], capture_output=True, text=True,
            check=True).stdout.strip())).name  # fmt: skip
        Path(f"/sys/fs/ext4/{device}/trigger_fs_error").write_text("test\n")
        lost = watch.explain(eio)
        assert isinstance(lost, RunDirLost)
        assert str(lost).startswith(
            f"the run directory {run_dir} turned read-only while training (after update 7): "
            f"Read-only file system; the run stops; its last checkpoint {last} is as it was"
        )
        watch.close()
    finally:
        subprocess.run(["umount", str(mountpoint)], capture_output=True)

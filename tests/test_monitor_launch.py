"""`operant train --detach | --monitor` (operant.launch) with a stand-in trainer: the
test fixture's writer process takes the place of operant-train, so these run in seconds.
The real trainer is launched in test_monitor_e2e.py."""

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from operant import launch
from operant.shared.runs import LOG_FILE, METRICS_FILE

STAND_IN = Path(__file__).parent / "monitor_fixtures.py"


def stand_in(root: Path, run_id: str) -> list[str]:
    """A trainer that makes the run and keeps publishing until it is killed."""
    return [sys.executable, str(STAND_IN), str(root), run_id, "run", "20"]


def kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def test_trainer_command_passes_the_arguments_and_the_run_id():
    command = launch.trainer_command(["--env", "CartPole-v1", "--detach", "--seed", "3"], "r1")
    assert command[1:] == [
        "-m",
        "operant.trainer.run.main",
        "--env",
        "CartPole-v1",
        "--seed",
        "3",
        "--run-id",
        "r1",
    ]
    assert launch.trainer_command(["--monitor", "--run-id", "mine"], "mine")[3:] == [
        "--run-id",
        "mine",
    ]


def test_detach_starts_the_trainer_in_its_own_session_and_logs_into_the_run(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(launch, "trainer_command", lambda argv, run_id: stand_in(tmp_path, run_id))
    assert launch.launch(["--detach"], tmp_path, "detached-1", monitor=False) == 0
    captured = capsys.readouterr()
    pid = int(captured.err.split("(pid ")[1].split(")")[0])
    try:
        assert captured.out == "detached-1\n"  # alone: RUN=$(operant train --detach)
        assert captured.err.splitlines() == [
            f"run detached-1 is training in the background (pid {pid})",
            f"  log:    {tmp_path / 'detached-1' / LOG_FILE}",
            f"  watch:  operant monitor detached-1 --runs-dir {tmp_path}",
            f"  stop:   kill -TERM {pid}",
        ]
        assert (tmp_path / "detached-1" / METRICS_FILE).exists()
        assert os.getsid(pid) == pid != os.getsid(0)
        assert [path.name for path in tmp_path.iterdir() if path.name.startswith(".")] == []
        time.sleep(0.3)
        assert "ready" in (tmp_path / "detached-1" / LOG_FILE).read_text()
    finally:
        kill(pid)


def test_a_trainer_that_exits_early_has_its_output_shown(tmp_path, monkeypatch, capsys):
    failing = [
        sys.executable,
        "-c",
        "import sys; print('operant-train: run exists; choose another --run-id', "
        "file=sys.stderr); sys.exit(2)",
    ]
    monkeypatch.setattr(launch, "trainer_command", lambda argv, run_id: failing)
    assert launch.launch(["--detach"], tmp_path, "r", monitor=False) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == "operant-train: run exists; choose another --run-id\n"
    assert list(tmp_path.iterdir()) == []  # no stray log


def test_monitor_and_detach_together_are_refused(tmp_path, capsys):
    assert launch.launch(["--monitor", "--detach"], tmp_path, "r", monitor=True) == 2
    assert "give --monitor or --detach, not both" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_monitor_watches_in_the_foreground_and_q_leaves_training_running(tmp_path):
    run_id = "monitored-1"
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from operant import launch\n"
        f"launch.trainer_command = lambda argv, run_id: {stand_in(tmp_path, run_id)!r}\n"
        f"sys.exit(launch.launch(['--monitor'], Path({str(tmp_path)!r}), {run_id!r}, "
        "monitor=True))\n"
    )
    socket = f"operant-test-{uuid.uuid4().hex[:8]}"

    def tmux(*args):
        return subprocess.run(
            ["tmux", "-L", socket, *args], capture_output=True, text=True, timeout=20
        ).stdout

    (tmp_path / "launch.py").write_text(script)
    pid = None
    try:
        tmux(
            "new-session",
            "-d",
            "-s",
            "t",
            f"{sys.executable} {tmp_path / 'launch.py'}; echo EXIT=$?; sleep 30",
        )
        deadline = time.monotonic() + 30
        while not all(
            word in (screen := tmux("capture-pane", "-p", "-t", "t"))
            for word in (run_id, "running", "q Detach")
        ):
            assert time.monotonic() < deadline, screen
            time.sleep(0.1)
        tmux("send-keys", "-t", "t", "q")
        while "EXIT=" not in (screen := tmux("capture-pane", "-p", "-t", "t")):
            assert time.monotonic() < deadline, screen
            time.sleep(0.1)
        assert "EXIT=0" in screen
        assert f"run {run_id} is training in the background (pid" in screen
        assert f"detached from {run_id}; training goes on. Reattach: operant monitor" in screen
        pid = int(screen.split("(pid ")[1].split(")")[0])
        os.kill(pid, 0)  # still training
    finally:
        tmux("kill-server")
        if pid is not None:
            kill(pid)


def test_resuming_waits_for_the_new_metrics_file_and_appends_to_the_log(
    tmp_path, monkeypatch, capsys
):
    run_dir = tmp_path / "resumed-1"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / LOG_FILE).write_text("the first session's log\n")
    (run_dir / METRICS_FILE).write_text("the first session's metrics file")
    old_inode = (run_dir / METRICS_FILE).stat().st_ino
    # The stand-in for a resumed trainer replaces the metrics file after a moment.
    resumed = [
        sys.executable,
        "-c",
        "import os, sys, time; print('resuming', flush=True); time.sleep(0.5); "
        f"open({str(run_dir / 'new')!r}, 'w').write('new'); "
        f"os.replace({str(run_dir / 'new')!r}, {str(run_dir / METRICS_FILE)!r}); "
        "time.sleep(30)",
    ]
    monkeypatch.setattr(launch, "trainer_command", lambda argv, run_id: resumed)
    assert (
        launch.launch(["--detach", "--resume", "latest"], tmp_path, "resumed-1", monitor=False) == 0
    )
    pid = int(capsys.readouterr().err.split("(pid ")[1].split(")")[0])
    try:
        assert (run_dir / METRICS_FILE).stat().st_ino != old_inode
        assert (run_dir / LOG_FILE).read_text() == "the first session's log\nresuming\n"
    finally:
        kill(pid)

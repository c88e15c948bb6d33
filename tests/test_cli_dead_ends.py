"""Dead ends a new user hit on the command line (issue 14, items 3, 4 and 5), each fed the
input the user fed, through the real commands: every hint a command prints runs as printed
under a runs root that is not the default one; `RUN=$(operant train --detach)` captures the
run id; a runs root that is a file is named as such; a budget that is not a whole number of
updates is rounded up and said; a run stopped early is listed as interrupted; leaving the
monitor of a run that has ended says what became of it."""

import json
import os
import re
import shlex
import signal
import subprocess
import time
from pathlib import Path

import pytest
from user_runs import (
    ENDLESS,
    SMALL,
    command,
    kill_quietly,
    last_record,
    run,
    run_hint,
    start_trainer,
    stop,
    wait_for_updates,
    wait_until_gone,
)

from operant.shared.reader import MetricsReader
from operant.shared.runs import RUNS_DIR_ENV, command_hint


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """A runs root the user chose with --runs-dir: not the default one."""
    return tmp_path_factory.mktemp("elsewhere") / "runs"


@pytest.fixture(scope="module")
def finished(root):
    """`operant-train --total-steps 20000` with the default config (2,048-step updates)."""
    result = run(
        "operant-train",
        "--total-steps",
        "20000",
        "--runs-dir",
        str(root),
        "--run-id",
        "twenty-k",
        "--log-format",
        "plain",
    )
    assert result.returncode == 0, result.stderr
    return result


# --- hints ------------------------------------------------------------------------------------


def test_a_hint_names_the_runs_root_only_when_it_is_not_the_default(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv(RUNS_DIR_ENV, raising=False)
    default = tmp_path / "state" / "operant" / "runs"
    assert command_hint("operant monitor", "r1", root=default) == "operant monitor r1"
    assert (
        command_hint("operant-train --resume", "r1", root=tmp_path / "other dir")
        == f"operant-train --resume r1 --runs-dir {shlex.quote(str(tmp_path / 'other dir'))}"
    )
    # A root from $OPERANT_RUNS_DIR (as the systemd unit sets it) is named too: the hint is
    # pasted from the journal into a shell that does not have the variable.
    monkeypatch.setenv(RUNS_DIR_ENV, str(tmp_path / "mine"))
    assert command_hint("operant monitor", "r1", root=tmp_path / "mine") == (
        f"operant monitor r1 --runs-dir {tmp_path / 'mine'}"
    )
    assert command_hint("operant monitor", "r1", root=default) == "operant monitor r1"


def test_a_hint_from_a_trainer_under_operant_runs_dir_works_where_it_is_not_set(tmp_path):
    # The systemd unit sets $OPERANT_RUNS_DIR; its journal's hints are pasted in a shell
    # that does not: they named no --runs-dir and were refused ("no run ... under ~/.local").
    under_unit = {**os.environ, RUNS_DIR_ENV: str(tmp_path)}
    shell = {key: value for key, value in os.environ.items() if key != RUNS_DIR_ENV}
    shell["XDG_STATE_HOME"] = str(tmp_path / "state")  # an empty default root
    first = run("operant-train", "--run-id", "unit", *SMALL, "--total-steps", "512", "--quiet",
                env=under_unit)  # fmt: skip
    assert first.returncode == 0, first.stderr
    for path in (tmp_path / "unit" / "checkpoints").iterdir():
        path.unlink()  # as a run stopped before its first checkpoint leaves it
    refused = run("operant-train", "--resume", "unit", env=under_unit)
    hint = f"operant-train --resume auto --run-id unit --runs-dir {tmp_path}"
    assert (refused.returncode, refused.stderr.strip().split(": ")[-1]) == (2, hint)
    again = run(*shlex.split(hint), "--quiet", env=shell)
    assert again.returncode == 0, again.stderr
    assert last_record(tmp_path / "unit")["update"] == 2


def test_the_resume_hint_after_sigterm_resumes_the_run_as_printed(root, tmp_path):
    trainer = start_trainer(
        "--runs-dir",
        str(root),
        "--run-id",
        "stopped",
        *SMALL,
        *ENDLESS,
        "--set",
        "train.log_every=1000",
        log=tmp_path / "first.out",
    )
    wait_for_updates(root / "stopped", 5)
    assert stop(trainer) == 0
    summary = (tmp_path / "first.out").read_text().splitlines()[-1]
    update = last_record(root / "stopped")["update"]
    assert summary.startswith(f"stopped by SIGTERM at step {update * 256:,} (update {update})")
    hint = summary.split("; continue with ")[1]
    assert hint == f"operant-train --resume stopped --runs-dir {root}"
    with open(tmp_path / "second.out", "w") as out:
        resumed = subprocess.Popen(command(shlex.split(hint)), stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for_updates(root / "stopped", update + 2)
        assert stop(resumed) == 0
    finally:
        kill_quietly(resumed.pid)
    output = (tmp_path / "second.out").read_text()
    assert f"resumed at update {update} from ckpt-{update:09d}.pt" in output
    assert output.splitlines()[-1].endswith(f"; continue with {hint}")


def test_a_missing_run_points_at_a_listing_of_the_right_root(root, finished):
    result = run("operant", "monitor", "nosuch", "--once", "--runs-dir", str(root))
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1
    hint = re.search(r"\(see `([^`]+)`\)", result.stderr).group(1)
    assert hint == f"operant runs --runs-dir {root}"
    listing = run_hint(hint)
    assert listing.returncode == 0 and "twenty-k" in listing.stdout


# --- operant train --detach -------------------------------------------------------------------


def test_detach_prints_the_run_id_alone_and_hints_that_run_as_printed(root):
    train = shlex.join(
        command(["operant", "train", "--detach", "--runs-dir", str(root), *SMALL, *ENDLESS])
    )
    shell = subprocess.run(
        ["bash", "-c", f'RUN=$({train}) && echo "RUN=$RUN"'],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert shell.returncode == 0, shell.stderr
    run_id = shell.stdout.removeprefix("RUN=").strip()
    assert shell.stdout == f"RUN={run_id}\n" and (root / run_id / "metrics.bin").exists()
    lines = shell.stderr.splitlines()
    pid = int(
        re.fullmatch(rf"run {run_id} is training in the background \(pid (\d+)\)", lines[0]).group(
            1
        )
    )
    try:
        hints = {
            key.strip(): value.strip() for key, value in (line.split(":", 1) for line in lines[1:])
        }
        assert hints["watch"] == f"operant monitor {run_id} --runs-dir {root}"
        assert hints["stop"] == f"kill -TERM {pid}"
        # The interactive view needs a terminal; --once shows that the pasted command finds
        # the run.
        watched = run_hint(hints["watch"], "--once")
        assert watched.returncode == 0, watched.stderr
        assert f"run     {run_id}" in watched.stdout and "status  running" in watched.stdout
        assert run_hint(hints["stop"]).returncode == 0
        wait_until_gone(pid)
    finally:
        kill_quietly(pid)
    listed = run("operant", "runs", "--runs-dir", str(root))
    (row,) = [line for line in listed.stdout.splitlines() if line.startswith(run_id)]
    assert row.split()[2] == "interrupted"


# --- --runs-dir names a file --------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, problem",
    [
        (["operant-train", "--runs-dir", "{file}"], "runs root {file} (--runs-dir): it is a file"),
        (
            ["operant", "train", "--detach", "--runs-dir", "{file}"],
            "runs root {file} (--runs-dir): it is a file",
        ),
        (
            ["operant-train", "--runs-dir", "{file}/runs"],
            "runs root {file}/runs (--runs-dir): {file} is a file",
        ),
        (
            ["operant-train", "--resume", "latest", "--runs-dir", "{file}"],
            "runs root {file} (--runs-dir): it is a file",
        ),
    ],
)
def test_a_runs_dir_that_is_a_file_is_named_as_such(tmp_path, args, problem):
    file = tmp_path / "notes.txt"
    file.write_text("not a directory\n")
    result = run(*(arg.format(file=file) for arg in args))
    assert (result.returncode, result.stdout) == (2, "")
    (line,) = result.stderr.splitlines()
    assert line.startswith("operant-train: " + problem.format(file=file))
    assert "already exists" not in line and line.endswith(
        "a directory that does not exist yet is created)"
    )
    assert [path.name for path in tmp_path.iterdir()] == ["notes.txt"]
    assert file.read_text() == "not a directory\n"


# --- the step budget ------------------------------------------------------------------------------


def test_a_budget_between_updates_is_rounded_up_and_said(finished, root):
    assert finished.stderr.splitlines() == [
        "operant-train: train.total_steps = 20,000 is not a whole number of updates of 2,048 "
        "steps (env.num_envs x ppo.num_steps): training 20,480 steps (10 updates)"
    ]
    # The summary, then the verdict and where the best policy is (tests/test_run_verdict.py).
    done, verdict, best = finished.stdout.splitlines()[-3:]
    assert done.startswith("done: 20,480 steps in ")
    assert verdict.startswith("not solved: best mean return ") and best.endswith("best.pt")
    assert last_record(root / "twenty-k")["global_step"] == 20_480
    run_json = json.loads((root / "twenty-k" / "run.json").read_text())
    # The budget trained is recorded beside the config, which keeps the one given.
    assert run_json["total_steps"] == 20_480
    assert run_json["config"]["train"]["total_steps"] == 20_000
    with MetricsReader(root / "twenty-k" / "metrics.bin") as reader:
        assert reader.snapshot().gauges["total_steps"] == 20_480


def test_a_resumed_runs_summary_says_which_steps_this_process_trained(tmp_path):
    # "done: 40,960 steps in 0.1s" read as the whole run trained in this process's seconds
    args = ["--runs-dir", str(tmp_path), "--quiet", "--set", "train.target_return=none"]
    first = run("operant-train", "--run-id", "twice", "--total-steps", "20480", *args)
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("done: 20,480 steps in ")
    again = run("operant-train", "--resume", "twice", "--total-steps", "40960", *args)
    assert again.returncode == 0, again.stderr
    assert (
        again.stdout.startswith("done: 40,960 steps (20,480 of them in this process's ")
        and " steps/s over the run), mean return of the last 100 episodes " in again.stdout
    )
    third = run("operant-train", "--resume", "twice", "--total-steps", "61440", *args,
                "--log-format", "json")  # fmt: skip
    assert third.returncode == 0, third.stderr
    summary = json.loads(third.stdout.splitlines()[-1])["summary"]
    assert (summary["global_step"], summary["steps_this_process"]) == (61_440, 20_480)


def test_a_budget_counts_agent_rows_where_agents_are_rows(root):
    # Grid-v0's config: 32 worlds of 8 agents, 32 steps an update: 8,192 rows, not the 1,024
    # that env.num_envs x ppo.num_steps alone would give (the plan was once rounded that way
    # and the trainer then ran past it: "update 7/49").
    result = run(
        "operant-train",
        "--config",
        str(Path(__file__).parents[1] / "configs" / "Grid-v0.toml"),
        "--total-steps",
        "9000",
        "--set",
        "ppo.update_epochs=1",
        "--runs-dir",
        str(root),
        "--run-id",
        "grid-9k",
        "--log-format",
        "plain",
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        "operant-train: train.total_steps = 9,000 is not a whole number of updates of 8,192 "
        "steps (env.num_envs x ppo.num_steps x 8 agents per env): training 16,384 steps "
        "(2 updates)"
    ]
    lines = result.stdout.splitlines()
    assert " 2 updates of 8192 steps " in lines[0]
    assert [line.split()[1] for line in lines if line.startswith("update ")] == ["1/2", "2/2"]
    assert last_record(root / "grid-9k")["global_step"] == 16_384
    run_json = json.loads((root / "grid-9k" / "run.json").read_text())
    assert run_json["total_steps"] == 16_384
    assert run_json["config"]["train"]["total_steps"] == 9_000


def test_a_run_without_a_checkpoint_starts_again_with_its_own_config(root):
    # A Breakout run that died before its first checkpoint (its checkpoints removed here): the
    # hint, pasted as printed, starts it again as Breakout, not as the default config's
    # CartPole inside the Breakout run's directory.
    config = str(Path(__file__).parents[1] / "configs" / "minatar" / "Breakout.toml")
    result = run("operant-train", "--config", config, "--total-steps", "1024", "--set",
                 "env.num_envs=8", "--set", "ppo.num_steps=64", "--set", "ppo.num_minibatches=2",
                 "--runs-dir", str(root), "--run-id", "early", "--quiet")  # fmt: skip
    assert result.returncode == 0, result.stderr
    for path in (root / "early" / "checkpoints").iterdir():
        path.unlink()
    refused = run("operant-train", "--resume", "early", "--runs-dir", str(root))
    assert refused.returncode == 2 and refused.stdout == ""
    (line,) = refused.stderr.splitlines()
    assert "has no checkpoint to resume from" in line
    hint = line.split("started with: ")[1]
    assert hint == f"operant-train --resume auto --run-id early --runs-dir {root}"
    again = run_hint(hint, "--quiet")
    assert again.returncode == 0, again.stderr
    assert json.loads((root / "early" / "run.json").read_text())["env_id"] == "MinAtar-Breakout-v1"
    assert last_record(root / "early")["global_step"] == 1024


def test_latest_is_a_reserved_run_id(root):
    result = run("operant-train", "--run-id", "latest", "--runs-dir", str(root))
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        "operant-train: run id 'latest' is reserved (the runs root's pointer to the newest run); "
        "choose another --run-id\n"
    )


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--nnodes", "2"],
         "--nnodes is for ranks under torchrun: give --nproc-per-node K with it"),
        (["--max-restarts", "2"],
         "--max-restarts is for ranks under torchrun: give --nproc-per-node K with it"),
        (["--runs-dir", ""],
         "--runs-dir is empty: give it a directory (leave it out for the default root)"),
        (["--monitor"], "--monitor watches the run in this terminal, and there is none; use "
         "--detach, then operant monitor --once or --json"),
    ],
)  # fmt: skip
def test_a_flag_that_would_be_ignored_is_refused(tmp_path, args, line):
    # Each trained a lone process before (--nnodes, --max-restarts), into the default runs
    # root (an empty --runs-dir, as an unset "$DIR" gives), or started a run and then exited 2
    # for want of a terminal (--monitor from a script).
    result = subprocess.run(
        command(["operant-train", *args, "--total-steps", "2048"]),
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
        env={**os.environ, RUNS_DIR_ENV: str(tmp_path)},
    )
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == f"operant-train: {line}\n"
    assert list(tmp_path.iterdir()) == []


def test_a_latest_that_is_a_directory_does_not_stop_a_run(tmp_path):
    # A runs root copied with `cp -rL` holds a directory at `latest`: the run crashed on it
    # (IsADirectoryError) and left a failed run behind. It trains, warned once; the monitor's
    # refusal of that `latest` says what to do.
    (tmp_path / "latest").mkdir()
    result = run("operant-train", "--total-steps", "2048", "--runs-dir", str(tmp_path),
                 "--run-id", "beside", "--quiet")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stderr == (
        f"operant-train: warning: {tmp_path / 'latest'} is a directory, not the runs root's "
        "pointer to the newest run, so it was left as it is and does not name this run; move it "
        "away to have it back\n"
    )
    assert last_record(tmp_path / "beside")["global_step"] == 2048
    watched = run("operant", "monitor", "--latest", "--once", "--runs-dir", str(tmp_path))
    assert watched.returncode == 2 and len(watched.stderr.splitlines()) == 1
    assert "is not a run pointer" in watched.stderr
    assert watched.stderr.endswith(
        f"name a run instead (see `operant runs --runs-dir {tmp_path}`)\n"
    )


# --- interrupted runs -----------------------------------------------------------------------------


def test_a_second_ctrl_c_after_the_stop_is_written_keeps_exit_0(root, tmp_path):
    # After the stop's summary line the process takes about half a second more to end (torch's
    # teardown); a second Ctrl-C there turned the clean stop into exit 130, with no line.
    log = tmp_path / "out"
    trainer = start_trainer("--runs-dir", str(root), "--run-id", "settled", *ENDLESS,
                            "--quiet", log=log)  # fmt: skip
    try:
        wait_for_updates(root / "settled", 2)
        trainer.send_signal(signal.SIGINT)
        deadline = time.monotonic() + 120
        while "stopped by SIGINT" not in log.read_text():
            assert time.monotonic() < deadline and trainer.poll() is None
            time.sleep(0.005)
        trainer.send_signal(signal.SIGINT)
        assert trainer.wait(timeout=60) == 0, log.read_text()
    finally:
        kill_quietly(trainer.pid)
    assert "Traceback" not in log.read_text()


def test_a_stop_signal_during_the_last_update_leaves_a_finished_run(root, tmp_path):
    # The budget's last update completes whatever arrives during it: the run was marked
    # interrupted, "stopped by SIGTERM", with no model.pt, and resuming trained 0 updates.
    slow = ["--set", "env.num_envs=64", "--set", "ppo.num_steps=256", "--set",
            "ppo.update_epochs=64", "--set", "train.target_return=none"]  # fmt: skip
    log = tmp_path / "out"
    trainer = start_trainer("--runs-dir", str(root), "--run-id", "last", *slow,
                            "--total-steps", str(2 * 64 * 256), log=log)  # fmt: skip
    try:
        wait_for_updates(root / "last", 1)
        # Into the second (last) update, past the first's boundary: update 1's record is
        # written before its boundary's work (best.pt, the stop decision), and a signal in
        # that window stops the run at update 1, as it should (seen once in CI).
        time.sleep(0.3)
        assert stop(trainer) == 0
    finally:
        kill_quietly(trainer.pid)
    text = log.read_text()
    assert "done: 32,768 steps in " in text and "stopped by" not in text, text
    assert (root / "last" / "model.pt").exists()
    rows = {row["run_id"]: row for row in json.loads(
        run("operant", "runs", "--json", "--runs-dir", str(root)).stdout)}  # fmt: skip
    assert (rows["last"]["status"], rows["last"]["interrupted"]) == ("finished", False)


def test_a_run_ended_by_a_second_ctrl_c_is_listed_as_interrupted(root, finished, tmp_path):
    # Updates of seconds (torch's update: the native one made them about 0.5 s on the 2-core
    # development VM, and the second Ctrl-C, 0.35 s after the first so that it is not taken
    # for the same keypress, landed after the stop) with a checkpoint after each, so both
    # signals land inside one update, as two Ctrl-Cs do, even on a busy machine.
    slow = [
        "--set",
        "env.num_envs=64",
        "--set",
        "ppo.num_steps=256",
        "--set",
        "ppo.update_epochs=64",
        "--set",
        "ppo.update_impl=torch",
        "--set",
        "checkpoint.every_updates=1",
    ]
    trainer = start_trainer(
        "--runs-dir",
        str(root),
        "--run-id",
        "impatient",
        *slow,
        *ENDLESS,
        "--quiet",
        log=tmp_path / "out",
    )
    try:
        pointer = root / "impatient" / "checkpoints" / "latest"
        deadline = time.monotonic() + 120
        while not pointer.exists():
            assert time.monotonic() < deadline
            time.sleep(0.01)
        # The first checkpoint is written after update 1, before the loop looks for a stop and
        # starts update 2: wait until update 2 is under way, or a first Ctrl-C that lands in
        # that gap ends the run before the second arrives (it then meets the default handler).
        time.sleep(0.3)
        trainer.send_signal(signal.SIGINT)
        time.sleep(0.35)  # past SAME_KEYPRESS_S: a second keypress, not the first forwarded
        assert stop(trainer, signal.SIGINT) == 130
    finally:
        kill_quietly(trainer.pid)
    table = run("operant", "runs", "--runs-dir", str(root)).stdout.splitlines()
    status = {line.split()[0]: line.split()[2] for line in table[1:] if line}
    assert status["impatient"] == "interrupted" and status["twenty-k"] == "finished"
    rows = {
        row["run_id"]: row
        for row in json.loads(run("operant", "runs", "--json", "--runs-dir", str(root)).stdout)
    }
    assert (rows["impatient"]["status"], rows["impatient"]["interrupted"]) == ("finished", True)
    assert (rows["twenty-k"]["status"], rows["twenty-k"]["interrupted"]) == ("finished", False)
    once = run("operant", "monitor", "impatient", "--once", "--runs-dir", str(root)).stdout
    assert "status  finished (interrupted)" in once and "second SIGINT" in once
    document = json.loads(
        run("operant", "monitor", "impatient", "--json", "--runs-dir", str(root)).stdout
    )
    assert (document["status"], document["interrupted"]) == ("finished", True)


# --- leaving the monitor -------------------------------------------------------------------


def _view(run_id, root, **fields):
    from operant.monitor.source import RunView

    return RunView(run_id=run_id, run_dir=str(root / run_id), **fields)


def test_leaving_a_finished_run_says_it_finished_and_how_to_evaluate_it(root, finished):
    from operant.monitor.app import detach_message

    message = detach_message("twenty-k", _view("twenty-k", root, status="finished"), root)
    assert message.startswith("detached from twenty-k, which has finished. Evaluate it: ")
    assert "training goes on" not in message
    evaluated = run_hint(message.split("Evaluate it: ")[1], "--episodes", "2", "--json")
    assert evaluated.returncode == 0, evaluated.stderr
    assert json.loads(evaluated.stdout)["model"] == str(root / "twenty-k" / "model.pt")


@pytest.mark.parametrize(
    "fields, expected",
    [
        (
            dict(status="running"),
            "detached from r; training goes on. Reattach: operant monitor r --runs-dir {root}",
        ),
        (
            dict(status="finished", interrupted=True),
            "detached from r, which was stopped before the end of its budget. Continue it: "
            "operant-train --resume r --runs-dir {root}",
        ),
        (
            dict(status="failed", reason="non-finite values: policy"),
            "detached from r, whose trainer failed: non-finite values: policy. Continue from its "
            "last checkpoint: operant-train --resume r --runs-dir {root}",
        ),
        (
            dict(status="crashed"),
            "detached from r, whose trainer crashed. Continue from its last "
            "checkpoint: operant-train --resume r --runs-dir {root}",
        ),
        (  # its checkpoints hold two ranks' state: it resumes with two
            dict(status="crashed", world_size=2),
            "detached from r, whose trainer crashed. Continue from its last "
            "checkpoint: operant-train --nproc-per-node 2 --resume r --runs-dir {root}",
        ),
    ],
)
def test_leaving_a_run_says_what_became_of_it(tmp_path, fields, expected):
    from operant.monitor.app import detach_message

    root = tmp_path
    (root / "r" / "checkpoints").mkdir(parents=True)
    (root / "r" / "checkpoints" / "ckpt-000000003.pt").write_bytes(b"")
    assert detach_message("r", _view("r", root, **fields), root) == expected.format(root=root)


@pytest.mark.parametrize(
    "fields, expected",
    [
        (  # `--resume r` is refused without a checkpoint: the hint restarts it in its directory
            dict(status="crashed"),
            "detached from r, whose trainer crashed. It wrote no checkpoint; start it again "
            "with its own config: operant-train --resume auto --run-id r --runs-dir {root}",
        ),
        (
            dict(status="crashed", world_size=2),
            "detached from r, whose trainer crashed. It wrote no checkpoint; start it again "
            "with its own config: operant-train --nproc-per-node 2 --resume auto --run-id r "
            "--runs-dir {root}",
        ),
        (  # never read (a corrupt file, or none yet): nothing is said of its training
            dict(status="unknown"),
            "detached from r. Reattach: operant monitor r --runs-dir {root}",
        ),
    ],
)
def test_leaving_a_run_without_checkpoints_gives_a_hint_that_works(tmp_path, fields, expected):
    from operant.monitor.app import detach_message

    (tmp_path / "r").mkdir()
    message = detach_message("r", _view("r", tmp_path, **fields), tmp_path)
    assert message == expected.format(root=tmp_path)


def test_leaving_the_default_root_needs_no_runs_dir(tmp_path, monkeypatch):
    from operant.monitor.app import detach_message

    monkeypatch.delenv(RUNS_DIR_ENV, raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    root = tmp_path / "operant" / "runs"
    assert detach_message("r", _view("r", root, status="running"), root) == (
        "detached from r; training goes on. Reattach: operant monitor r"
    )


def test_counts_of_one_read_singular():
    from operant.trainer.config import Config, derive
    from operant.trainer.run.errors import counted

    assert [counted(n, "update") for n in (0, 1, 2, 4096)] == [
        "0 updates", "1 update", "2 updates", "4,096 updates"
    ]  # fmt: skip
    config = Config()
    config.train.total_steps = 100
    assert derive(config).rounding_note(config).endswith("training 2,048 steps (1 update)")


@pytest.mark.parametrize(
    "words",
    [
        ["operant", "monitor", "--latst"],
        ["operant", "runs", "--jsn"],
        ["operant", "exporter", "--keep-finished", "abc"],
        ["operant", "eval", "--bset", "latest"],
        ["operant-train", "--totl-steps", "1000"],
    ],
)
def test_a_flag_typo_is_one_line_in_every_command(words):
    # monitor, runs and exporter printed argparse's usage block before "error:"
    result = run(*words)
    assert result.returncode == 2 and result.stdout == ""
    (line,) = result.stderr.splitlines()
    prog = " ".join(words[:2]) if words[0] == "operant" else words[0]
    assert line.startswith(f"{prog}: ") and line.endswith(f"(see {prog} --help)")

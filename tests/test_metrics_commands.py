"""`operant runs` and `operant monitor --once/--json`, run as real commands against real files."""

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from operant.cext.metrics import MetricsWriter
from operant.monitor.format import format_value
from operant.shared import metrics_layout as fmt
from operant.shared.runs import METRICS_FILE, create_run_dir, update_latest


def make_run(
    root, run_id, *, env_id="CartPole-v1", steps=0, sps=None, state=None, reason="", publish=True
):
    """A run directory with a metrics file written by this (live) process."""
    run_dir = create_run_dir(root, run_id)
    schema = fmt.make_schema(
        run_id,
        env_id=env_id,
        counters=[("global_step", "steps"), "episodes", "updates"],
        gauges=[("sps", "1/s"), "episode_return_mean", ("loss/value", "", "value loss")],
        texts=["phase"],
        snapshot=["episode_return_min", "episode_return_max"],
        history=["global_step", "episode_return_mean"],
    )
    writer = MetricsWriter.create(run_dir / METRICS_FILE, schema, heartbeat_interval_s=3600)
    update_latest(root, run_id)
    if publish:
        writer.set_counter(schema.slot("global_step"), steps)
        writer.set_counter(schema.slot("updates"), steps // 1000)
        writer.set_gauge(schema.slot("episode_return_mean"), 187.25)
        writer.set_gauge(schema.slot("loss/value"), 0.125)
        writer.set_text(schema.slot("phase"), "update")
        writer.publish_snapshot(np.array([12.0, 500.0]))
        writer.append_history(np.array([float(steps), 187.25]))
    if sps is not None:
        writer.set_gauge(schema.slot("sps"), sps)
    if state is not None:
        writer.set_state(state, reason)
    return writer


@pytest.fixture
def runs(tmp_path):
    root = tmp_path / "runs"
    writers = [
        make_run(root, "cartpole-a", steps=50_000, sps=21_000.4, state=fmt.STATE_FINISHED),
        make_run(
            root,
            "pendulum-b",
            env_id="Pendulum-v1",
            steps=7,
            sps=3.5,
            state=fmt.STATE_FAILED,
            reason="ValueError: nan in loss",
        ),
        make_run(root, "cartpole-c", steps=1_234_567, sps=98_765.0, state=fmt.STATE_RUNNING),
    ]
    yield root
    for writer in writers:
        writer.close()


def operant(*args, cwd=None, env_extra=None):
    env = {k: v for k, v in os.environ.items() if k != "OPERANT_RUNS_DIR"}
    env.update(env_extra or {})
    return subprocess.run(
        [sys.executable, "-m", "operant", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=60,
    )


def assert_one_line_error(result, *fragments, code=2):
    assert result.returncode == code, result
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_monitor_json_has_the_contract_keys(runs):
    result = operant("monitor", "cartpole-c", "--runs-dir", str(runs), "--once", "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert list(document)[:5] == ["run_id", "status", "global_step", "sps", "episode_return_mean"]
    assert (
        document["run_id"],
        document["status"],
        document["global_step"],
        document["sps"],
        document["episode_return_mean"],
    ) == ("cartpole-c", "running", 1_234_567, 98_765.0, 187.25)
    assert document["metrics"] == {
        "global_step": 1_234_567,
        "episodes": 0,
        "updates": 1234,
        "sps": 98_765.0,
        "episode_return_mean": 187.25,
        "loss/value": 0.125,
        "phase": "update",
        "episode_return_min": 12.0,
        "episode_return_max": 500.0,
    }
    assert document["units"] == {"global_step": "steps", "sps": "1/s"}
    assert (document["state"], document["pid"], document["history_head"]) == (
        "running",
        os.getpid(),
        1,
    )


def test_monitor_latest_and_unset_values_are_null(tmp_path):
    root = tmp_path / "runs"
    writer = make_run(root, "fresh", publish=False)
    result = operant("monitor", "--latest", "--json", "--runs-dir", str(root))
    document = json.loads(result.stdout)
    assert (
        document["run_id"],
        document["status"],
        document["global_step"],
        document["sps"],
        document["episode_return_mean"],
        document["state"],
    ) == ("fresh", "running", 0, None, None, "initializing")
    writer.close()


def test_monitor_once_prints_a_human_snapshot(runs):
    result = operant("monitor", "--runs-dir", str(runs), "pendulum-b", "--once")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["run", "pendulum-b", "Pendulum-v1"]
    assert lines[1].startswith(f"status  failed: pid {os.getpid()} on ")
    assert lines[2] == "reason  ValueError: nan in loss"
    table = {line.split()[0]: line.split()[1:] for line in lines[5:]}
    assert table["global_step"] == ["7", "steps"]
    assert table["sps"] == ["3.5", "1/s"]
    assert table["loss/value"] == ["0.125"]
    assert table["phase"] == ["update"]


def test_monitor_once_shows_the_warning_row_only_when_there_is_a_warning(tmp_path):
    root = tmp_path / "runs"
    schema = fmt.make_schema(
        "w", env_id="CartPole-v1", counters=[("global_step", "steps")], texts=["warning"]
    )
    writer = MetricsWriter.create(create_run_dir(root, "w") / METRICS_FILE, schema)

    def rows() -> dict[str, str]:
        result = operant("monitor", "w", "--once", "--runs-dir", str(root))
        assert result.returncode == 0, result.stderr
        table = result.stdout.split("\n\n")[1].splitlines()
        return {row.split()[0]: " ".join(row.split()[1:]) for row in table}

    try:
        assert rows() == {"global_step": "0 steps"}
        writer.set_text(schema.slot("warning"), "checkpoint of update 9 not written")
        assert rows() == {
            "global_step": "0 steps",
            "warning": "checkpoint of update 9 not written",
        }
    finally:
        writer.close()


def test_runs_lists_every_run_from_any_directory(runs, tmp_path):
    (runs / "empty-d").mkdir()
    (runs / "broken-e").mkdir()
    (runs / "broken-e" / METRICS_FILE).write_bytes(b"garbage" * 100)
    result = operant(
        "runs", "--json", cwd=tmp_path.parent, env_extra={"OPERANT_RUNS_DIR": str(runs)}
    )
    assert result.returncode == 0, result.stderr
    rows = {row["run_id"]: row for row in json.loads(result.stdout)}
    assert set(rows) == {"cartpole-a", "pendulum-b", "cartpole-c", "empty-d", "broken-e"}
    assert [
        (rows[r]["env_id"], rows[r]["status"], rows[r]["global_step"], rows[r]["sps"])
        for r in ("cartpole-a", "pendulum-b", "cartpole-c")
    ] == [
        ("CartPole-v1", "finished", 50_000, 21_000.4),
        ("Pendulum-v1", "failed", 7, 3.5),
        ("CartPole-v1", "running", 1_234_567, 98_765.0),
    ]
    assert rows["empty-d"]["status"] == "unknown"
    assert rows["empty-d"]["error"] == "no metrics file yet"
    assert rows["broken-e"]["status"] == "unknown"
    assert "not an Operant metrics file" in rows["broken-e"]["error"]
    assert 0 <= rows["cartpole-a"]["age_s"] < 60
    # A resumed run's age counts from its start (run.json), not from its new metrics file
    (runs / "cartpole-a" / "run.json").write_text(json.dumps({"started_at": time.time() - 7200}))
    again = operant("runs", "--json", env_extra={"OPERANT_RUNS_DIR": str(runs)})
    aged = {row["run_id"]: row for row in json.loads(again.stdout)}["cartpole-a"]["age_s"]
    assert 7200 <= aged < 7260

    table = operant("runs", "--runs-dir", str(runs))
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["RUN", "ID", "ENV", "STATUS", "STEPS", "SPS", "AGE", "RANKS"]
    by_id = {line.split()[0]: line.split() for line in lines[1:6]}
    assert by_id["cartpole-c"][1:5] == ["CartPole-v1", "running", "1,234,567", "98,765"]
    assert by_id["pendulum-b"][1:5] == ["Pendulum-v1", "failed", "7", "4"]
    assert by_id["empty-d"][1:5] == ["-", "unknown", "-", "-"]
    assert lines[6] == ""
    assert set(lines[7:]) == {
        "empty-d: no metrics file yet",
        f"broken-e: {rows['broken-e']['error']}",
    }


def test_a_run_stopped_early_is_listed_as_interrupted(runs):
    stopped = make_run(runs, "cartpole-s", steps=9_000)
    stopped.set_state(fmt.STATE_FINISHED, "stopped by SIGTERM at update 9", interrupted=True)
    try:
        table = operant("runs", "--runs-dir", str(runs)).stdout.splitlines()
        status = {line.split()[0]: line.split()[2] for line in table[1:]}
        assert (status["cartpole-s"], status["cartpole-a"]) == ("interrupted", "finished")
        # Scripts keep the documented status set, with the flag beside it.
        rows = {
            row["run_id"]: row
            for row in json.loads(operant("runs", "--json", "--runs-dir", str(runs)).stdout)
        }
        assert (rows["cartpole-s"]["status"], rows["cartpole-s"]["interrupted"]) == (
            "finished",
            True,
        )
        assert rows["cartpole-a"]["interrupted"] is False
    finally:
        stopped.close()


def test_no_runs(tmp_path):
    empty = tmp_path / "runs"
    empty.mkdir()
    listing = operant("runs", "--runs-dir", str(empty), "--json")
    assert (listing.returncode, listing.stdout.strip()) == (0, "[]")
    human = operant("runs", "--runs-dir", str(empty))
    assert human.returncode == 0 and "no runs under" in human.stderr
    assert_one_line_error(
        operant("runs", "--runs-dir", str(tmp_path / "typo")), "--runs-dir", "not a directory"
    )
    assert_one_line_error(
        operant("monitor", "--latest", "--once", "--runs-dir", str(empty)),
        "no runs yet",
        "--runs-dir",
    )


def test_monitor_bad_input(runs, tmp_path):
    assert_one_line_error(
        operant("monitor", "nope", "--once", "--runs-dir", str(runs)),
        "no run 'nope'",
        f"operant runs --runs-dir {runs}",
    )
    assert_one_line_error(
        operant("monitor", "../etc", "--once", "--runs-dir", str(runs)), "not a run id"
    )
    assert_one_line_error(
        operant("monitor", "cartpole-a", "--latest", "--once", "--runs-dir", str(runs)), "not both"
    )
    (runs / "foreign").mkdir()
    (runs / "foreign" / METRICS_FILE).write_bytes(b"\x7fELF" + bytes(4000))
    assert_one_line_error(
        operant("monitor", "foreign", "--json", "--runs-dir", str(runs)),
        "metrics.bin",
        "not an Operant metrics file",
        "run foreign",
    )
    newer = bytearray((runs / "cartpole-a" / METRICS_FILE).read_bytes())
    newer[fmt.HEADER_OFFSETS["version_major"]] = 9
    newer[fmt.HEADER_OFFSETS["version_minor"]] = 0
    (runs / "newer").mkdir()
    (runs / "newer" / METRICS_FILE).write_bytes(bytes(newer))
    assert_one_line_error(
        operant("monitor", "newer", "--once", "--runs-dir", str(runs)),
        "format 9.0",
        "upgrade operant",
    )
    assert_one_line_error(
        operant("monitor", "cartpole-a", "--runs-dir", str(runs)),
        "needs a terminal",
        "--once",
        code=2,
    )


def test_reader_commands_never_import_torch(runs):
    probe = (
        "import sys\n"
        "from operant.cli import main\n"
        f"assert main(['runs', '--runs-dir', {str(runs)!r}, '--json']) == 0\n"
        f"assert main(['monitor', '--latest', '--once', '--runs-dir', {str(runs)!r}]) == 0\n"
        "print('torch' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "False"


def test_whole_number_gauges_print_every_digit_and_a_full_output_is_one_line(runs):
    """`--once` printed a 20,000,768-step budget as 2.00008e+07; `> /dev/full` was a
    traceback."""
    assert format_value(20_000_768.0) == "20,000,768"
    assert format_value(258_752_512.0) == "258,752,512"
    assert format_value(330_584.25) == "330,584"
    assert format_value(0.125) == "0.125"
    with open("/dev/full", "w") as full:
        result = subprocess.run(
            [sys.executable, "-m", "operant.cli", "monitor", "--runs-dir", str(runs)]
            + ["pendulum-b", "--once"],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    assert result.returncode == 1
    assert result.stderr == "operant: cannot write the output: No space left on device\n"


def test_a_run_directory_names_its_run(runs, tmp_path):
    """`operant monitor runs/pendulum-b/` (tab completion's form; eval takes it) was refused
    as "not a run id": it is the run under its parent directory."""
    by_path = operant("monitor", str(runs / "pendulum-b") + "/", "--once")
    by_id = operant("monitor", "--runs-dir", str(runs), "pendulum-b", "--once")
    assert by_path.returncode == 0, by_path.stderr
    assert by_path.stdout.splitlines()[0] == by_id.stdout.splitlines()[0]
    assert "pendulum-b" in by_path.stdout.splitlines()[0]


def test_a_copied_run_is_named_by_its_directory_everywhere(runs):
    """A run copied to a new directory was `pendulum-b` in --once/--json (the id its trainer
    wrote into the file) and the directory's name in `operant runs` and the exporter: every
    reader now says the name commands take."""
    import shutil

    shutil.copytree(runs / "pendulum-b", runs / "pendulum-copy")
    once = operant("monitor", "--runs-dir", str(runs), "pendulum-copy", "--once")
    document = json.loads(
        operant("monitor", "--runs-dir", str(runs), "pendulum-copy", "--json").stdout
    )
    assert once.stdout.splitlines()[0].split()[:2] == ["run", "pendulum-copy"]
    assert document["run_id"] == "pendulum-copy"


def test_runs_json_says_sps_as_monitor_json_does_and_the_mean_beside_it(tmp_path):
    # `operant runs --json`'s sps was an ended run's mean, monitor --json's its last update's
    root = tmp_path / "runs"
    trained = subprocess.run(
        [sys.executable, "-m", "operant.trainer.run.main", "--runs-dir", str(root), "--run-id", "r",
         "--total-steps", "8192", "--quiet"],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert trained.returncode == 0, trained.stderr
    (row,) = json.loads(operant("runs", "--json", "--runs-dir", str(root)).stdout)
    document = json.loads(operant("monitor", "r", "--json", "--runs-dir", str(root)).stdout)
    assert row["sps"] == document["sps"] and row["sps_mean"] == document["metrics"]["sps_mean"]
    assert row["sps"] != row["sps_mean"]  # the last update's rate is not the run's mean
    table = operant("runs", "--runs-dir", str(root)).stdout.splitlines()
    assert f"{row['sps_mean']:,.0f}" in table[1].split()  # the table shows the ended run's mean

"""Runs trained by several processes read as one run (operant.shared.ranks): rank files
written by real writers, one of them a real process that is SIGKILLed; the monitor's --once
and --json, `operant runs`' rows and the exporter's series over them."""

import json
import math
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from operant.cext.metrics import MetricsWriter
from operant.monitor import cli as monitor_cli
from operant.monitor.exporter import render
from operant.monitor.exporter_metrics import families_of
from operant.monitor.format import runs_table
from operant.monitor.listing import describe_run
from operant.shared import metrics_layout as fmt
from operant.shared import runs
from operant.shared.ranks import (
    POOLED,
    RULES,
    SUM,
    RunReader,
    combine,
    return_window,
    rule_of,
    status_text,
)
from operant.shared.record import RECORD_METRICS, RETURN_WINDOW, RUN_METRICS

WRITER = Path(__file__).with_name("metrics_writer_proc.py")
RUN_ID = "cartpole-20260101-000000-dada"
HISTORY = ["global_step", "sps", "episode_return_mean"]


def write_rank(run_dir, rank, world_size, *, steps, sps, episodes, returns, records=3):
    """Rank `rank`'s file, written by this (live) process: `records` updates, the last with
    these values."""
    schema = fmt.make_schema(
        RUN_ID,
        env_id="CartPole-v1",
        counters=[("global_step", "steps"), "episodes", "updates"],
        gauges=[("sps", "1/s"), "episode_return_mean", "episode_return_min", "policy_loss"],
        texts=["device", "warning"],
        snapshot=[("phase_env_s", "s")],
        history=HISTORY,
        rank=rank,
        world_size=world_size,
        node=f"node-{rank}" if world_size > 1 else "",
    )
    path = runs.metrics_path(run_dir, rank, world_size)
    path.parent.mkdir(exist_ok=True)
    writer = MetricsWriter.create(path, schema, history_capacity=16, heartbeat_interval_s=60)
    writer.set_state(fmt.STATE_RUNNING)
    for update in range(1, records + 1):
        writer.append_history(np.array([steps * update / records, sps, returns]))
    writer.set_counter(schema.slot("global_step"), steps)
    writer.set_counter(schema.slot("episodes"), episodes)
    writer.set_counter(schema.slot("updates"), records)
    writer.set_gauge(schema.slot("sps"), sps)
    writer.set_gauge(schema.slot("episode_return_mean"), returns)
    writer.set_gauge(schema.slot("episode_return_min"), returns - 10 * (rank + 1))
    writer.set_gauge(schema.slot("policy_loss"), 0.1 * (rank + 1))
    writer.set_text(schema.slot("device"), f"cuda:{rank}")
    if rank == 1:
        writer.set_text(schema.slot("warning"), "checkpoint refused")
    writer.publish_snapshot(np.array([0.01 * (rank + 1)]))
    writer.heartbeat()
    return writer


@pytest.fixture
def two_ranks(tmp_path):
    """A run of two ranks, both written by this process: rank 1 has more episodes than its
    return window, rank 0 fewer."""
    root = tmp_path / "runs"
    run_dir = runs.create_run_dir(root, RUN_ID)
    runs.update_latest(root, RUN_ID)
    writers = [
        write_rank(run_dir, 0, 2, steps=3000, sps=1000.0, episodes=20, returns=20.0),
        write_rank(run_dir, 1, 2, steps=5000, sps=1500.0, episodes=400, returns=80.0),
    ]
    yield root, run_dir
    for writer in writers:
        writer.close()


def test_metrics_path_and_files(tmp_path):
    assert runs.metrics_path(tmp_path) == tmp_path / "metrics.bin"
    assert runs.metrics_path(tmp_path, 3, 4) == tmp_path / "metrics" / "rank-00003.bin"
    assert runs.metrics_files(tmp_path) == [tmp_path / "metrics.bin"]
    (tmp_path / "metrics").mkdir()
    for name in ("rank-00010.bin", "rank-00002.bin", ".rank-00001.bin.77.tmp", "notes.txt"):
        (tmp_path / "metrics" / name).write_bytes(b"")
    assert [path.name for path in runs.metrics_files(tmp_path)] == [
        "rank-00002.bin",
        "rank-00010.bin",
    ]


def test_combining_rules():
    assert combine(SUM, [3000, 5000, math.nan]) == 8000
    # Pooled: each mean weighted by the episodes it holds; unweighted ranks count equally.
    assert combine(POOLED, [20.0, 80.0], [50.0, 100.0]) == pytest.approx(60.0)
    assert combine(POOLED, [20.0, 80.0]) == pytest.approx(50.0)
    assert math.isnan(combine(POOLED, [math.nan, math.nan], [1.0, 1.0]))
    assert rule_of("some_counter", fmt.KIND_COUNTER) == SUM
    assert rule_of("some_text", fmt.KIND_TEXT) == "rank 0"
    declared = {d.name for d in (*RECORD_METRICS, *RUN_METRICS)}
    assert set(RULES) <= declared, set(RULES) - declared


def test_two_ranks_read_as_one_run(two_ranks):
    _, run_dir = two_ranks
    with RunReader(run_dir) as reader:
        run = reader.read()
        history = reader.history(0)
    total = run.total
    assert (run.world_size, total.status, run.status_ranks) == (2, "running", ())
    assert total.counters == {"global_step": 8000, "episodes": 420, "updates": 3}
    assert total.gauges["sps"] == 2500.0
    # Each rank's mean is of its newest ceil(100 / 2) = 50 episodes: rank 0 has finished only
    # 20, rank 1 400; so the run's is the mean of 20 episodes of rank 0 and 50 of rank 1.
    assert return_window(2) == 50 == -(-RETURN_WINDOW // 2)
    assert total.gauges["episode_return_mean"] == pytest.approx((20.0 * 20 + 80.0 * 50) / 70)
    assert total.gauges["episode_return_min"] == 10.0  # min(20 - 10, 80 - 20)
    assert total.gauges["policy_loss"] == pytest.approx(0.15)
    assert total.snapshot == {"phase_env_s": pytest.approx(0.015)}
    assert total.texts == {"device": "cuda:0", "warning": "rank 1: checkpoint refused"}
    assert [(r.rank, r.node, r.status, r.global_step, r.sps) for r in run.ranks] == [
        (0, "node-0", "running", 3000, 1000.0),
        (1, "node-1", "running", 5000, 1500.0),
    ]
    # Record n of the run: the ranks' record n, steps and steps/s summed.
    assert [value for record in history.records for value in record.values] == pytest.approx(
        [8000 / 3, 2500.0, 50.0, 2 * 8000 / 3, 2500.0, 50.0, 8000.0, 2500.0, 50.0]
    )
    assert history.head == 3


def test_monitor_json_and_once_show_every_rank(two_ranks, capsys):
    root, _ = two_ranks
    assert monitor_cli.main(["--json", "--runs-dir", str(root)]) == 0
    document = json.loads(capsys.readouterr().out)
    # The existing keys keep their meaning, for the run as a whole.
    assert (document["run_id"], document["status"]) == (RUN_ID, "running")
    assert (document["global_step"], document["sps"]) == (8000, 2500.0)
    assert document["world_size"] == 2
    assert [
        (rank["rank"], rank["node"], rank["status"], rank["global_step"], rank["sps"])
        for rank in document["ranks"]
    ] == [(0, "node-0", "running", 3000, 1000.0), (1, "node-1", "running", 5000, 1500.0)]

    assert monitor_cli.main(["--once", "--runs-dir", str(root)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("status  running: 2 ranks on node-0, node-1, heartbeat")
    table = lines[lines.index(next(line for line in lines if line.startswith("RANK"))) :]
    assert table[0].split() == ["RANK", "NODE", "PID", "STATUS", "STEPS", "STEPS/S", "HEARTBEAT"]
    assert [line.split()[:6] for line in table[1:]] == [
        ["0", "node-0", str(document["pid"]), "running", "3,000", "1,000"],
        ["1", "node-1", str(document["pid"]), "running", "5,000", "1,500"],
    ]


def test_runs_lists_the_run_once_with_its_ranks(two_ranks):
    _, run_dir = two_ranks
    row = describe_run(run_dir)
    assert (row.status, row.global_step, row.sps, row.world_size) == ("running", 8000, 2500.0, 2)
    header, line = runs_table([row]).splitlines()
    assert header.split()[-1] == "RANKS"
    assert line.split()[2:5] + line.split()[-1:] == ["running", "8,000", "2,500", "2"]


class Registry:
    """What prometheus_client's generate_latest reads: families to collect."""

    def __init__(self, families):
        self.families = families

    def collect(self):
        return iter(self.families)


def test_exporter_labels_each_rank_and_adds_run_totals(two_ranks):
    import test_exporter  # its strict parser of both text formats

    _, run_dir = two_ranks
    with RunReader(run_dir) as reader:
        run = reader.read()
    for openmetrics in (True, False):
        families = families_of([(RUN_ID, run)], {"read_errors": 0, "bad_requests": 0})
        text = render(Registry(families), openmetrics).decode()
        samples, types = test_exporter.parse(text, openmetrics)

        def sample(name, samples=samples, **labels):
            return samples[(name, frozenset({"run": RUN_ID, **labels}.items()))]

        steps = "operant_global_step"  # a gauge: the run's position
        assert (sample(steps, rank="0"), sample(steps, rank="1")) == (3000, 5000)
        assert sample("operant_run_status", rank="1", status="running") == 1
        assert sample("operant_run_global_step") == 8000
        assert sample("operant_run_sps") == 2500.0
        assert sample("operant_run_ranks") == 2
        assert samples[("operant_exporter_runs", frozenset())] == 2  # metrics files
        assert types["operant_run_sps"] == "gauge"


def read_until(reader, status, timeout_s=5.0):
    """The run once its status is `status` (a signal takes a moment to land), or as it is
    when the time is up."""
    deadline = time.monotonic() + timeout_s
    while True:
        run = reader.read()
        if run.total.status == status or time.monotonic() > deadline:
            return run
        time.sleep(0.01)


def test_a_killed_rank_is_named_while_the_others_keep_their_values(tmp_path, capsys):
    """Rank 1 is a real process, SIGKILLed: the run reads crashed, naming rank 1; rank 0
    keeps its values, and the steps rank 1 took still count."""
    root = tmp_path / "runs"
    run_dir = runs.create_run_dir(root, RUN_ID)
    rank0 = write_rank(run_dir, 0, 2, steps=3000, sps=1000.0, episodes=50, returns=20.0)
    path1 = runs.metrics_path(run_dir, 1, 2)
    proc = subprocess.Popen(
        [sys.executable, str(WRITER), "live", str(path1), "0.1", "--rank", "1/2"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        with RunReader(run_dir) as reader:
            before = reader.read()
            assert [row.status for row in before.ranks] == ["running", "running"]
            assert before.ranks[1].pid == proc.pid
            proc.send_signal(signal.SIGSTOP)  # a stopped process: stalled, by number
            stalled = read_until(reader, "stalled")
            assert (stalled.total.status, stalled.status_ranks) == ("stalled", (1,))
            assert [row.status for row in stalled.ranks] == ["running", "stalled"]
            proc.send_signal(signal.SIGCONT)
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            after = read_until(reader, "crashed")
        assert (after.total.status, after.status_ranks) == ("crashed", (1,))
        assert after.total.reason == "rank 1 crashed"
        assert [(r.rank, r.status, r.global_step, r.sps) for r in after.ranks] == [
            (0, "running", 3000, 1000.0),
            (1, "crashed", 1234, 567.5),
        ]
        # Its steps are done; its rate is not: a dead rank steps nothing.
        assert after.total.counters["global_step"] == 3000 + 1234
        assert after.total.gauges["sps"] == 1000.0

        assert monitor_cli.main(["--json", RUN_ID, "--runs-dir", str(root)]) == 0
        document = json.loads(capsys.readouterr().out)
        assert (document["status"], document["status_ranks"]) == ("crashed", [1])
        assert [rank["status"] for rank in document["ranks"]] == ["running", "crashed"]
        assert monitor_cli.main(["--once", RUN_ID, "--runs-dir", str(root)]) == 0
        once = capsys.readouterr().out
        assert "status  crashed (rank 1): 2 ranks on node-0, node-1" in once
        rows = [line.split() for line in once.splitlines()[-2:]]
        assert [row[:4] + [row[4]] for row in rows] == [
            ["0", "node-0", rows[0][2], "running", "3,000"],
            ["1", "node-1", str(proc.pid), "crashed", "1,234"],
        ]
        assert describe_run(run_dir).status_ranks == (1,)
        assert "crashed (rank 1)" in runs_table([describe_run(run_dir)])

        # What torchrun's peers do next (seen with gloo: within a second): rank 0's
        # collective fails. The crash stays the run's status; the reason tells both, the
        # rank whose heartbeat stopped first first; with no rank left stepping, the run's
        # rate is its ranks' last.
        rank0.set_state(fmt.STATE_FAILED, "the gradient all-reduce failed")
        with RunReader(run_dir) as reader:
            ended = reader.read()
        assert (ended.total.status, ended.status_ranks) == ("crashed", (1,))
        assert ended.total.reason == (
            "rank 1 crashed; rank 0 failed: the gradient all-reduce failed"
        )
        assert [row.status for row in ended.ranks] == ["failed", "crashed"]
        assert ended.total.gauges["sps"] == 1000.0 + 567.5
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        rank0.close()


def test_a_missing_rank_waits_and_an_old_single_file_still_reads(tmp_path):
    run_dir = runs.create_run_dir(tmp_path, RUN_ID)
    writer = write_rank(run_dir, 0, 3, steps=10, sps=1.0, episodes=1, returns=1.0)
    with writer, RunReader(run_dir) as reader:
        run = reader.read()
    assert [(row.rank, row.status) for row in run.ranks] == [
        (0, "running"),
        (1, "waiting"),
        (2, "waiting"),
    ]
    assert run.total.status == "running" and run.total.counters["global_step"] == 10
    # ... and says so wherever its totals are shown: they are rank 0's alone
    assert run.unread_ranks == (1, 2)
    assert status_text(run.total.status, run.status_ranks, run.unread_ranks) == (
        "running (ranks 1, 2 unread)"
    )
    assert describe_run(run_dir).unread_ranks == (1, 2)
    assert status_text("crashed", (1,), (2,)) == "crashed (rank 1; rank 2 unread)"

    # A file left by an earlier start with another world size is not one of this world's.
    restarted = runs.create_run_dir(tmp_path, "restarted")
    old = write_rank(restarted, 1, 2, steps=99, sps=9.0, episodes=9, returns=9.0)
    new = write_rank(restarted, 0, 3, steps=10, sps=1.0, episodes=1, returns=1.0)
    with old, new, RunReader(restarted) as reader:
        run = reader.read()
    assert [(row.rank, row.status) for row in run.ranks] == [
        (0, "running"),
        (1, "unknown"),
        (2, "waiting"),
    ]
    assert "written as rank 1 of 2, not rank 1 of 3" in run.ranks[1].error
    assert run.total.counters["global_step"] == 10

    single = runs.create_run_dir(tmp_path, "single")
    writer = write_rank(single, 0, 1, steps=10, sps=1.0, episodes=1, returns=1.0)
    writer.close()
    path = runs.metrics_path(single)
    data = bytearray(path.read_bytes())  # as a 1.0 writer left it: the minor version 0
    data[fmt.HEADER_OFFSETS["version_minor"]] = 0
    path.write_bytes(bytes(data))
    with RunReader(single) as reader:
        run = reader.read()
    assert not reader.distributed
    assert (run.total.format_version, run.world_size, run.total.path) == ("1.0", 1, str(path))
    assert [(row.rank, row.node, row.global_step) for row in run.ranks] == [
        (0, socket.gethostname(), 10)
    ]


def test_the_live_monitor_shows_a_row_per_rank(two_ranks):
    """ReaderSource's view of the real files, then the app drawing a crashed rank 1."""
    import asyncio

    from monitor_fixtures import FakeSource, make_view, screen_text

    from operant.monitor.app import MonitorApp
    from operant.monitor.source import ReaderSource
    from operant.shared.ranks import RankRow

    root, _ = two_ranks
    view = ReaderSource(root).poll()
    assert (view.world_size, view.metrics["global_step"], view.metrics["sps"]) == (2, 8000, 2500.0)
    assert [row.node for row in view.ranks] == ["node-0", "node-1"]
    assert view.history["global_step"] == pytest.approx((8000 / 3, 2 * 8000 / 3, 8000.0))

    ranks = (
        RankRow(rank=0, node="node-0", pid=101, status="running", global_step=3000, sps=1000.0),
        RankRow(rank=1, node="node-1", pid=102, status="crashed", global_step=1234, sps=567.5),
    )
    crashed = make_view(
        status="crashed",
        world_size=2,
        ranks=ranks,
        status_ranks=(1,),
        reason="crashed (rank 1)",
    )

    async def draw() -> str:
        app = MonitorApp(FakeSource(crashed))
        async with app.run_test(size=(120, 40)) as pilot:
            while app.view is None:
                await pilot.pause(0.02)
            await pilot.pause()
            return screen_text(app)

    text = asyncio.run(draw())
    assert "● crashed (rank 1)" in text
    assert "2 ranks on node-0, node-1" in text
    assert "A rank CRASHED (gone without saying it finished): rank 1 (pid 102 on node-1)." in text
    rows = [line.split() for line in text.splitlines() if line.split()[:1] in (["0"], ["1"])]
    assert [row[:5] for row in rows] == [
        ["0", "node-0", "101", "running", "3,000"],
        ["1", "node-1", "102", "crashed", "1,234"],
    ]


def test_a_torchrun_run_id_names_its_env_as_a_lone_run_does():
    """`<env>-<rendezvous id>` with the env part of a lone run's id (lower case, the
    namespace dropped), so `operant runs` lists both kinds of run alike."""
    from types import SimpleNamespace

    from operant.trainer.distributed.ranks import default_run_id

    launch = SimpleNamespace(run_id="job/7")
    assert default_run_id("operant/MinAtar-Breakout-v1", launch) == "minatar-breakout-v1-job-7"
    assert default_run_id("CartPole-v1", SimpleNamespace(run_id=None)) == "cartpole-v1-torchrun"
    assert runs.make_run_id("operant/MinAtar-Breakout-v1").startswith("minatar-breakout-v1-")
    assert runs.valid_run_id(default_run_id("CartPole-v1", launch))

"""The writer and the reader against each other in one process: values, texts, state, history
ring, file creation, and the writer's refusals."""

import errno
import math
import os
import re
import time
from pathlib import Path

import msgspec
import numpy as np
import pytest

from operant.cext.metrics import MetricsWriter
from operant.shared import metrics_layout as fmt
from operant.shared.reader import MetricsFileError, MetricsReader

DOC = Path(__file__).resolve().parents[1] / "docs" / "metrics-file.md"


def schema(**overrides):
    spec = dict(
        env_id="CartPole-v1",
        counters=[("global_step", "steps", "environment steps so far"), "episodes", "updates"],
        gauges=[("sps", "1/s"), "episode_return_mean", "loss/policy"],
        texts=["phase"],
        snapshot=["snap_a", "snap_b", "snap_c"],
        history=["global_step", "episode_return_mean"],
    )
    spec.update(overrides)
    return fmt.make_schema("run-1", **spec)


@pytest.fixture
def made(tmp_path):
    path = tmp_path / "metrics.bin"
    writer = MetricsWriter.create(path, schema(), history_capacity=4, heartbeat_interval_s=60)
    yield path, writer
    writer.close()


def test_new_file_reads_as_initializing_with_unset_values(made, tmp_path):
    path, writer = made
    assert sorted(os.listdir(tmp_path)) == ["metrics.bin"]  # no temporary file left behind
    assert path.stat().st_size == writer.layout.file_size
    assert writer.layout.file_size % fmt.PAGE == 0
    with MetricsReader(path) as reader:
        snap = reader.snapshot()
    assert (snap.state, snap.status, snap.run_id, snap.env_id) == (
        "initializing",
        "running",
        "run-1",
        "CartPole-v1",
    )
    assert snap.pid == os.getpid()
    assert snap.counters == {"global_step": 0, "episodes": 0, "updates": 0}
    assert all(math.isnan(v) for v in snap.gauges.values())
    assert all(math.isnan(v) for v in snap.snapshot.values())
    assert snap.texts == {"phase": ""}
    assert snap.heartbeat_count == 1 and snap.heartbeat_age_s < 5
    assert snap.history_head == 0 and snap.format_version == "1.2"
    assert snap.schema == writer.schema


def test_values_round_trip(made):
    path, writer = made
    s = writer.schema
    writer.set_counter(s.slot("global_step"), 2**63 + 5)
    writer.add_counter(s.slot("episodes"), 3)
    writer.add_counter(s.slot("episodes"))
    writer.set_gauge(s.slot("sps"), 12345.625)
    writer.set_gauge(s.slot("loss/policy"), -0.0)
    writer.set_text(s.slot("phase"), "update ✓")
    writer.publish_snapshot(np.array([1.5, -2.5, 1e300]))
    writer.set_state(fmt.STATE_RUNNING)
    with MetricsReader(path) as reader:
        snap = reader.snapshot()
    assert snap.state == "running"
    assert snap.counters == {"global_step": 2**63 + 5, "episodes": 4, "updates": 0}
    assert snap.gauges["sps"] == 12345.625
    assert math.copysign(1, snap.gauges["loss/policy"]) == -1
    assert snap.texts == {"phase": "update ✓"}
    assert snap.snapshot == {"snap_a": 1.5, "snap_b": -2.5, "snap_c": 1e300}
    assert snap.metrics()["global_step"] == 2**63 + 5


def test_text_is_cut_at_a_character_boundary(made):
    path, writer = made
    capacity = fmt.TEXT_STRIDE - fmt.TEXT_HEADER_SIZE
    writer.set_text(0, "é" * capacity)  # two bytes each
    writer.set_text(0, "ab" + "é" * capacity)  # a longer text over a shorter one
    with MetricsReader(path) as reader:
        text = reader.snapshot().texts["phase"]
    assert text == "ab" + "é" * ((capacity - 2) // 2)
    assert len(text.encode()) <= capacity


def test_states_and_reasons(made):
    path, writer = made
    with MetricsReader(path) as reader:
        writer.set_state(fmt.STATE_FINISHED, "SIGTERM", interrupted=True)
        snap = reader.snapshot()
        assert (snap.status, snap.interrupted, snap.reason) == ("finished", True, "SIGTERM")
        writer.set_state(fmt.STATE_FAILED, "RuntimeError: " + "x" * 5000)
        snap = reader.snapshot()
        assert (snap.status, snap.interrupted) == ("failed", False)
        assert snap.reason.startswith("RuntimeError: xxx")
        assert len(snap.reason) == fmt.REASON_SIZE - fmt.TEXT_HEADER_SIZE


def test_history_ring_keeps_the_newest_records(made):
    path, writer = made
    for step in range(10):
        writer.append_history(np.array([step * 100.0, step / 2]))
    assert writer.history_head == 10
    with MetricsReader(path) as reader:
        batch = reader.history(0)
        assert [r.index for r in batch.records] == [6, 7, 8, 9]
        assert batch.records[0].values == (600.0, 3.0)
        assert (batch.head, batch.skipped) == (10, 6)
        later = reader.history(8)
        assert [r.index for r in later.records] == [8, 9] and later.skipped == 0
        assert reader.history(10).records == ()
        assert reader.history(11) == reader.history(10)


def test_writer_refuses_wrong_slots_lengths_and_closed_use(made):
    _, writer = made
    s = writer.schema
    with pytest.raises(IndexError, match="not a gauge"):
        writer.set_gauge(s.slot("global_step"), 1.0)
    with pytest.raises(IndexError, match="not a counter"):
        writer.add_counter(s.slot("sps"), 1)
    with pytest.raises(IndexError):
        writer.set_counter(99, 1)
    with pytest.raises(IndexError):
        writer.set_text(1, "x")
    with pytest.raises(ValueError, match="takes 3 values"):
        writer.publish_snapshot(np.zeros(2))
    with pytest.raises(ValueError, match="takes 2 values"):
        writer.append_history(np.zeros(3))
    with pytest.raises(ValueError, match="unknown state"):
        writer.set_state(7)
    with pytest.raises(ValueError, match="interrupted"):
        writer.set_state(fmt.STATE_FAILED, interrupted=True)
    writer.close()
    writer.close()
    assert writer.closed
    with pytest.raises(ValueError, match="closed"):
        writer.set_counter(0, 1)
    with pytest.raises(ValueError, match="closed"):
        writer.heartbeat()


def test_heartbeat_thread_ticks_without_the_main_thread(tmp_path):
    path = tmp_path / "metrics.bin"
    writer = MetricsWriter.create(path, schema(), heartbeat_interval_s=0.02)
    with MetricsReader(path) as reader:
        writer.start_heartbeat()
        writer.start_heartbeat()  # idempotent
        time.sleep(0.3)
        ticking = reader.snapshot().heartbeat_count
        writer.stop_heartbeat()
        stopped = reader.snapshot().heartbeat_count
        time.sleep(0.1)
        assert reader.snapshot().heartbeat_count == stopped
    assert ticking >= 6
    writer.close()


def test_context_manager_records_the_outcome(tmp_path):
    outcomes = {}
    for name, error in (
        ("ok", None),
        ("boom", ValueError("bad config")),
        ("ctrl-c", KeyboardInterrupt()),
    ):
        path = tmp_path / f"{name}.bin"
        try:
            with MetricsWriter.create(path, schema()) as writer:
                writer.set_state(fmt.STATE_RUNNING)
                if error is not None:
                    raise error
        except (ValueError, KeyboardInterrupt):
            pass
        assert writer.closed
        with MetricsReader(path) as reader:
            snap = reader.snapshot()
        outcomes[name] = (snap.status, snap.interrupted, snap.reason)
    assert outcomes == {
        "ok": ("finished", False, ""),
        "boom": ("failed", False, "ValueError: bad config"),
        "ctrl-c": ("finished", True, "interrupted"),
    }


def test_create_replaces_atomically_and_old_readers_notice(tmp_path):
    path = tmp_path / "metrics.bin"
    first = MetricsWriter.create(path, schema())
    reader = MetricsReader(path)
    second = MetricsWriter.create(path, schema(env_id="Pendulum-v1"))
    with pytest.raises(MetricsFileError, match="replaced by a new file"):
        reader.snapshot()
    reader.close()
    with MetricsReader(path) as fresh:
        assert fresh.snapshot().env_id == "Pendulum-v1"
    first.close()
    second.close()
    assert sorted(os.listdir(tmp_path)) == ["metrics.bin"]


def test_create_leaves_nothing_behind_when_it_fails(tmp_path, monkeypatch):
    def disk_error(fd):
        raise OSError(errno.EIO, "I/O error")

    with monkeypatch.context() as patch:
        patch.setattr(os, "fsync", disk_error)  # shared.atomic syncs the new file
        with pytest.raises(OSError, match="I/O error"):
            MetricsWriter.create(tmp_path / "metrics.bin", schema())
    with pytest.raises(FileNotFoundError):
        MetricsWriter.create(tmp_path / "missing" / "metrics.bin", schema())
    bad = msgspec.structs.replace(
        schema(),
        metrics=(
            fmt.Metric(name="a", kind="counter", slot=0),
            fmt.Metric(name="a", kind="gauge", slot=1),
        ),
    )
    with pytest.raises(ValueError, match="twice"):
        MetricsWriter.create(tmp_path / "metrics.bin", bad)
    assert os.listdir(tmp_path) == []


def test_schema_lookups_and_unknown_fields_are_ignored():
    s = schema()
    assert (
        s.slot("sps"),
        s.slot("phase"),
        s.snapshot_index("snap_b"),
        s.history_index("episode_return_mean"),
    ) == (3, 0, 1, 1)
    assert s.metric("global_step").description == "environment steps so far"
    with pytest.raises(KeyError):
        s.slot("nope")
    # A newer minor version's extra fields and kinds decode in an old reader.
    blob = msgspec.json.encode(
        {
            "run_id": "r",
            "future": 1,
            "metrics": [{"name": "h", "kind": "histogram", "slot": 0, "buckets": 8}],
        }
    )
    decoded = fmt.decode_schema(blob)
    assert decoded.run_id == "r" and decoded.metrics[0].kind == "histogram"


def test_header_offsets_match_the_documentation():
    """docs/metrics-file.md's header table is what a third-party reader will trust."""
    rows = re.findall(r"^\| (\d+) \| `(\w+)` \| (\w+) \|", DOC.read_text(), re.MULTILINE)
    documented = {name: int(offset) for offset, name, _ in rows}
    expected = dict(fmt.HEADER_OFFSETS)
    expected.update(
        state=fmt.STATE_OFFSET,
        heartbeat_wall_ns=fmt.HEARTBEAT_WALL_OFFSET,
        heartbeat_mono_ns=fmt.HEARTBEAT_MONO_OFFSET,
        heartbeat_count=fmt.HEARTBEAT_COUNT_OFFSET,
        history_head=fmt.HISTORY_HEAD_OFFSET,
    )
    assert documented == expected

"""Liveness with real writer processes: killed -> crashed, stopped -> stalled, silent ->
stalled, done -> finished/failed; and a pid that now belongs to another process."""

import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import pytest

from operant.cext.metrics import MetricsWriter
from operant.shared import metrics_layout as fmt
from operant.shared.reader import MetricsReader

WRITER = Path(__file__).with_name("metrics_writer_proc.py")
INTERVAL = 0.1


@pytest.fixture
def live_writer(tmp_path):
    procs = []

    def start(*extra):
        path = tmp_path / f"metrics-{len(procs)}.bin"
        proc = subprocess.Popen(
            [sys.executable, str(WRITER), "live", str(path), str(INTERVAL), *extra],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        procs.append(proc)
        assert proc.stdout.readline().strip() == "ready"
        return proc, MetricsReader(path)

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
        proc.wait()


def status_within(reader, wanted, timeout=5.0):
    """Poll until the status is `wanted`; return the last snapshot either way."""
    deadline = time.monotonic() + timeout
    while True:
        snap = reader.snapshot()
        if snap.status == wanted or time.monotonic() > deadline:
            return snap
        time.sleep(INTERVAL / 4)


def test_running_then_sigkill_is_crashed(live_writer):
    proc, reader = live_writer()
    snap = reader.snapshot()
    assert (snap.status, snap.state, snap.pid) == ("running", "running", proc.pid)
    assert snap.counters == {"global_step": 1234} and snap.gauges == {"sps": 567.5}
    proc.kill()
    proc.wait()
    snap = reader.snapshot()
    assert (snap.status, snap.state) == ("crashed", "running")
    # The values it published are still there to read.
    assert snap.counters == {"global_step": 1234}


def test_sigkilled_but_not_yet_reaped_is_crashed(live_writer):
    proc, reader = live_writer()
    proc.kill()
    assert status_within(reader, "crashed").status == "crashed"  # a zombie until wait()


def test_sigstop_is_stalled_and_sigcont_recovers(live_writer):
    proc, reader = live_writer()
    assert reader.snapshot().status == "running"
    proc.send_signal(signal.SIGSTOP)
    try:
        assert status_within(reader, "stalled").status == "stalled"
        # The heartbeat really stopped: it ages past the stall threshold.
        time.sleep(5 * INTERVAL)
        snap = reader.snapshot()
        assert snap.status == "stalled"
        assert snap.heartbeat_age_s > 4 * INTERVAL
    finally:
        proc.send_signal(signal.SIGCONT)
    snap = status_within(reader, "running")
    assert snap.status == "running" and snap.heartbeat_age_s < 4 * INTERVAL


def test_alive_without_heartbeats_is_stalled(live_writer):
    proc, reader = live_writer("--no-heartbeat")
    first = reader.snapshot()
    time.sleep(5 * INTERVAL)
    later = reader.snapshot()
    assert later.status == "stalled" and proc.poll() is None
    assert later.heartbeat_count == first.heartbeat_count


@pytest.mark.parametrize(
    "command, expected",
    [
        ("finish", ("finished", "finished", False, "")),
        ("interrupt", ("finished", "finished", True, "SIGINT")),
        ("fail CUDA out of memory", ("failed", "failed", False, "CUDA out of memory")),
    ],
)
def test_final_states_outlive_the_process(live_writer, command, expected):
    proc, reader = live_writer()
    proc.stdin.write(command + "\n")
    proc.stdin.flush()
    assert proc.wait(timeout=10) == 0
    snap = reader.snapshot()
    assert (snap.status, snap.state, snap.interrupted, snap.reason) == expected


def test_reused_pid_is_crashed(tmp_path):
    """A file naming a live pid whose start time differs belongs to a dead process."""
    path = tmp_path / "metrics.bin"
    schema = fmt.make_schema("reused", counters=["global_step"])
    writer = MetricsWriter.create(path, schema, heartbeat_interval_s=60)
    writer.set_state(fmt.STATE_RUNNING)
    with MetricsReader(path) as reader:
        assert reader.snapshot().status == "running"
    data = bytearray(path.read_bytes())
    (start,) = struct.unpack_from("<d", data, fmt.HEADER_OFFSETS["pid_start_time"])
    struct.pack_into("<d", data, fmt.HEADER_OFFSETS["pid_start_time"], start - 3600)
    copy = tmp_path / "copy.bin"
    copy.write_bytes(bytes(data))
    with MetricsReader(copy) as reader:
        snap = reader.snapshot()
    assert (snap.status, snap.pid) == ("crashed", os.getpid())
    writer.close()


def test_another_host_is_judged_by_its_heartbeat(tmp_path):
    path = tmp_path / "metrics.bin"
    schema = msgspec.structs.replace(
        fmt.make_schema("remote"), hostname="elsewhere", boot_id="other-boot"
    )
    writer = MetricsWriter.create(path, schema, heartbeat_interval_s=0.05)
    writer.set_state(fmt.STATE_RUNNING)
    with MetricsReader(path) as reader:
        assert reader.snapshot().status == "running"
        time.sleep(0.3)  # no heartbeats: the pid (ours, alive) is not checkable from here
        assert reader.snapshot().status == "stalled"
        writer.heartbeat()
        assert reader.snapshot().status == "running"
    writer.close()


def test_same_host_after_a_reboot_is_crashed(tmp_path):
    path = tmp_path / "metrics.bin"
    schema = msgspec.structs.replace(fmt.make_schema("rebooted"), boot_id="a-previous-boot")
    writer = MetricsWriter.create(path, schema, heartbeat_interval_s=60)
    writer.set_state(fmt.STATE_RUNNING)
    with MetricsReader(path) as reader:
        assert reader.snapshot().status == ("crashed" if fmt.boot_id() else "running")
    writer.close()

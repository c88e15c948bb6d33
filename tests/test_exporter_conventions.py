"""The exporter by Prometheus's conventions (issue 41): its exposition passes `promtool check
metrics` and prometheus_client's strict OpenMetrics parser, it compresses when asked, it
exports its build and process metrics, it serves 2,000 scrapes from 40 threads while 100
slowloris clients stall (and drops those), and a run's step counter is right over a SIGKILL
and a resume, as Prometheus's increase() reads it."""

from __future__ import annotations

import gzip
import http.client
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families
from test_exporter import OPENMETRICS, SMALL, parse, value, wait_until_stopped
from test_record import make_record

from operant.monitor.exporter import CLIENT_TIMEOUT_S
from operant.shared.runs import METRICS_FILE, create_run_dir
from operant.trainer.services.telemetry import Publisher


def start_exporter(root: Path, *extra: str) -> tuple[subprocess.Popen, int]:
    operant = str(Path(sys.executable).with_name("operant"))
    command = [operant, "exporter", "--listen", "127.0.0.1:0", "--runs-dir", str(root), *extra]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = process.stdout.readline()
    match = re.search(r"serving http://127\.0\.0\.1:(\d+)/metrics", line)
    assert match, line + process.stderr.read()
    return process, int(match.group(1))


def get(port: int, headers: dict[str, str] | None = None) -> tuple[dict[str, str], bytes]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers=headers or {})
    with urllib.request.urlopen(request, timeout=30) as response:
        return dict(response.headers), response.read()


@pytest.fixture
def published(tmp_path):
    """A runs root holding one run whose file the trainer's own Publisher wrote (the real
    schema: every name, unit and counter a trainer exports), running, with one update."""
    run_dir = create_run_dir(tmp_path, "real")
    publisher = Publisher(
        run_dir / METRICS_FILE, "real", "CartPole-v1", "native", "cpu", 100_000,
        prepare=lambda first: first.set_counters({"updates": 2, "global_step": 4096,
                                                  "episodes": 9}),
    )  # fmt: skip
    publisher.start()
    publisher.publish(make_record(updates=3, global_step=4352, episodes=20))
    process, port = start_exporter(tmp_path)
    yield port
    process.kill()
    process.wait()
    publisher.close()


def test_conventions_gzip_build_and_process_metrics(published):
    port = published
    headers, body = get(port, {"Accept": OPENMETRICS, "Accept-Encoding": "gzip"})
    assert headers["Content-Encoding"] == "gzip"
    text = gzip.decompress(body).decode()
    assert headers["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
    families = {family.name: family for family in text_string_to_metric_families(text)}
    samples, types = parse(text, openmetrics=True)
    run = {"run": "real", "rank": "0"}
    # The position is a gauge, what this process trained a counter from 0 (the Publisher
    # started from a checkpoint's 4096 steps and published one update of 256).
    assert types["operant_global_step"] == "gauge"
    assert value(samples, "operant_global_step", **run) == 4352
    assert value(samples, "operant_process_steps_total", **run) == 256
    assert value(samples, "operant_process_episodes_total", **run) == 11
    assert value(samples, "operant_run_process_steps_total", run="real") == 256
    assert value(samples, "operant_trained_steps_total", **run) == 256  # a new file: from 0
    # Units: base units only, as UNIT metadata and as the name's suffix.
    assert families["operant_elapsed_seconds"].unit == "seconds"
    assert families["operant_rss_bytes"].unit == "bytes"
    assert families["operant_cpu_ratio"].unit == "ratio"
    assert families["operant_last_update_timestamp_seconds"].unit == "seconds"
    assert families["operant_phase_env_seconds"].unit == "seconds"
    assert value(samples, "operant_elapsed_seconds", **run) == 0.2179
    assert abs(value(samples, "operant_last_update_timestamp_seconds", **run) - time.time()) < 60
    # approx_kl was None (NaN in the file) and a single-agent env has no env-episodes: absent.
    names = {name for name, _ in samples}
    assert not {"operant_approx_kl", "operant_env_episodes"} & names
    assert not [line for line in text.splitlines() if line.endswith(" NaN")]
    assert value(samples, "operant_sps", **run) == 36520.6  # running: its rate is exported
    build = [dict(labels) for name, labels in samples if name == "operant_exporter_build_info"]
    assert build[0]["version"] and build[0]["metrics_format"].startswith("1.")
    exporter_pid_start = value(samples, "process_start_time_seconds")
    assert time.time() - 120 < exporter_pid_start <= time.time()
    assert value(samples, "process_cpu_seconds_total") > 0
    # Not compressed when not asked; the same families in the Prometheus text format.
    headers, body = get(port)
    assert "Content-Encoding" not in headers
    assert headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    plain, plain_types = parse(body.decode(), openmetrics=False)
    assert plain_types["operant_process_steps_total"] == "counter"
    assert value(plain, "operant_global_step", **run) == 4352


@pytest.mark.skipif(
    shutil.which("promtool") is None,
    reason="promtool missing (Debian: apt-get install prometheus; .ci/run installs it as root)",
)
def test_promtool_check_metrics_is_clean(published):
    _, body = get(published)
    result = subprocess.run(
        ["promtool", "check", "metrics"], input=body, capture_output=True, timeout=30
    )
    assert (result.returncode, result.stdout + result.stderr) == (0, b"")
    assert b"operant_process_steps_total{" in body


def test_2000_scrapes_from_40_threads_while_100_slowloris_clients_stall(published):
    port = published
    stalled = []
    for _ in range(100):  # each sends half a request, then nothing
        connection = socket.create_connection(("127.0.0.1", port), timeout=CLIENT_TIMEOUT_S + 10)
        connection.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        stalled.append(connection)
    opened = time.monotonic()
    answers: list[tuple[int, bool]] = []
    lock = threading.Lock()

    def scrape_50() -> None:
        for _ in range(50):
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            connection.request("GET", "/metrics")
            response = connection.getresponse()
            ok = b'operant_global_step{rank="0",run="real"} 4352.0' in response.read()
            connection.close()
            with lock:
                answers.append((response.status, ok))

    threads = [threading.Thread(target=scrape_50) for _ in range(40)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    loaded = time.monotonic() - opened
    assert len(answers) == 2000 and set(answers) == {(200, True)}
    # The stalled clients are dropped, each after CLIENT_TIMEOUT_S, without an answer.
    for connection in stalled:
        assert connection.recv(100) == b""
        connection.close()
    dropped = time.monotonic() - opened
    assert CLIENT_TIMEOUT_S - 1 < max(dropped, loaded) < max(CLIENT_TIMEOUT_S, loaded) + 10, (
        loaded,
        dropped,
    )


def increase(samples: list[float]) -> float:
    """Prometheus's increase() over a counter's samples without extrapolation: a sample below
    the one before is a reset, after which the counter counts from 0."""
    total = 0.0
    for before, after in zip(samples, samples[1:], strict=False):
        total += after - before if after >= before else after
    return total


def test_steps_counter_is_right_over_a_sigkill_and_a_resume(tmp_path, trainer_server):
    root, run = tmp_path / "runs", {"run": "resumed", "rank": "0"}
    exporter, port = start_exporter(root)
    try:
        argv = ["--runs-dir", root, "--run-id", "resumed", *SMALL, "--quiet",
                "--set", "checkpoint.every_updates=4"]  # fmt: skip
        pid = trainer_server.start([*argv, "--total-steps", 256 * 5000], tmp_path / "first")
        progress = root / "resumed" / "progress.jsonl"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (
            progress.exists() and progress.read_bytes().count(b"\n") >= 6
        ):
            time.sleep(0.01)
        latest = root / "resumed" / "checkpoints" / "latest"
        while True:  # stopped past its last checkpoint: the kill costs updates to redo
            os.kill(pid, signal.SIGSTOP)  # its last scrape is its final word
            wait_until_stopped(pid)
            lines = progress.read_bytes().count(b"\n")
            if f"ckpt-{lines:09d}" not in latest.read_text():
                break
            os.kill(pid, signal.SIGCONT)
            while progress.read_bytes().count(b"\n") == lines:
                time.sleep(0.001)
        before, _ = parse(get(port, {"Accept": OPENMETRICS})[1].decode(), openmetrics=True)
        os.kill(pid, signal.SIGKILL)
        assert trainer_server.wait() == -signal.SIGKILL
        first_steps = value(before, "operant_process_steps_total", **run)
        assert first_steps == value(before, "operant_global_step", **run) >= 6 * 256
        checkpoint = (root / "resumed" / "checkpoints" / "latest").read_text().strip()
        checkpoint_step = int(re.search(r"ckpt-(\d+)", checkpoint).group(1)) * 256
        assert checkpoint_step < first_steps  # the updates after it are trained again
        # Three more updates: fewer steps than the first process took, so its counter's fall
        # is the reset Prometheus sees.
        total = checkpoint_step + 3 * 256
        returncode, _, stderr = trainer_server.run(
            ["--runs-dir", root, "--resume", "resumed", "--total-steps", total, "--quiet"],
            tmp_path / "second",
        )
        assert returncode == 0, stderr
        after, _ = parse(get(port, {"Accept": OPENMETRICS})[1].decode(), openmetrics=True)
    finally:
        exporter.kill()
        exporter.wait()
    assert value(after, "operant_run_status", status="finished", **run) == 1
    assert value(after, "operant_global_step", **run) == total  # the position: a gauge
    second_steps = value(after, "operant_process_steps_total", **run)
    assert second_steps == 3 * 256
    trained = first_steps + (total - checkpoint_step)  # the redone updates count twice
    assert increase([0, first_steps, second_steps]) == trained
    # The run's own count continues over the resume: no reset for a scrape to miss.
    assert value(before, "operant_trained_steps_total", **run) == first_steps
    assert value(after, "operant_trained_steps_total", **run) == trained
    assert value(after, "operant_run_trained_steps_total", run="resumed") == trained
    # The position read as a counter (the old operant_global_step_total) says otherwise.
    positions = [0, first_steps, value(after, "operant_global_step", **run)]
    assert increase(positions) != trained

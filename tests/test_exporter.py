"""`operant exporter` against a real training run: scraped over HTTP in both formats, the
exposition parsed strictly and compared with the shared reader's values, bad requests
refused with 4xx, and the daemon shown to be read-only and free of torch.
(tests/test_exporter_conventions.py: Prometheus's conventions, gzip, promtool, load.)"""

from __future__ import annotations

import math
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from operant.monitor.exporter import render, wants_openmetrics
from operant.monitor.exporter_metrics import POSITIONS, PRESENT, RunsCollector, exported_name
from operant.shared.reader import STATUSES, MetricsReader

OPENMETRICS = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
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

# One line of the text formats: a sample, or a # HELP / # TYPE / # EOF line.
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"')
TYPES = {"counter", "gauge", "info"}


def parse(text: str, openmetrics: bool) -> tuple[dict, dict]:
    """(samples {(name, frozenset(labels)): value}, types {family: type}); fails the test on
    any line either format would refuse."""
    lines = text.split("\n")
    assert lines[-1] == "", "the exposition ends with a newline"
    lines = lines[:-1]
    if openmetrics:
        assert lines[-1] == "# EOF"
        lines = lines[:-1]
    else:
        assert "# EOF" not in lines
    samples, types, family, seen_help = {}, {}, None, set()
    for line in lines:
        if line.startswith("# UNIT "):
            assert openmetrics, line
            _, _, name, unit = line.split(" ")
            assert name == family and name.endswith("_" + unit), line  # after its TYPE
            continue
        if line.startswith("# HELP "):
            name = line.split(" ", 3)[2]
            assert name not in seen_help
            seen_help.add(name)
            continue
        if line.startswith("# TYPE "):
            _, _, family, kind = line.split(" ")
            assert kind in TYPES and (openmetrics or kind != "info"), line
            assert family not in types, f"family {family} declared twice"
            assert family in seen_help, f"{family}: TYPE without HELP"
            types[family] = kind
            continue
        assert not line.startswith("#"), line
        match = SAMPLE.match(line)
        assert match, f"not a sample line: {line!r}"
        name, label_text, value_text = match.groups()
        kind = types[family]
        if openmetrics:
            suffix = {"counter": "_total", "info": "_info"}.get(kind, "")
            assert name == family + suffix, (name, family)
        else:
            assert name == family, (name, family)
        labels = {}
        if label_text is not None:
            rest = label_text
            while rest:
                label = LABEL.match(rest)
                assert label, f"bad labels in {line!r}"
                labels[label.group(1)] = label.group(2)
                rest = rest[label.end() :]
                if rest:
                    assert rest.startswith(","), line
                    rest = rest[1:]
        value = float(value_text)  # NaN, +Inf, -Inf and numbers
        key = (name, frozenset(labels.items()))
        assert key not in samples, f"duplicate sample {line!r}"
        samples[key] = value
    return samples, types


def scrape(port: int, accept: str | None = None) -> tuple[str, str]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics")
    if accept:
        request.add_header("Accept", accept)
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.headers["Content-Type"], response.read().decode()


def raw(port: int, data: bytes) -> int:
    """Send raw bytes; the status code of the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        connection.sendall(data)
        answer = connection.recv(4096)
    return int(answer.split(b" ", 2)[1])


def wait_until_stopped(pid: int) -> None:
    """SIGSTOP takes effect asynchronously: wait for the process state T."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if state == "T":
            return
        time.sleep(0.005)
    raise AssertionError(f"process {pid} did not stop")


def value(samples: dict, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


@pytest.fixture
def exporter(tmp_path):
    command = [
        str(Path(sys.executable).with_name("operant")),
        "exporter",
        "--listen",
        "127.0.0.1:0",
        "--runs-dir",
        str(tmp_path),
    ]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = process.stdout.readline()
    match = re.search(r"serving http://127\.0\.0\.1:(\d+)/metrics", line)
    assert match, line + process.stderr.read()
    yield process, int(match.group(1))
    if process.poll() is None:
        process.kill()
        process.wait()


def test_exporter_serves_a_live_run_that_matches_the_reader(tmp_path, exporter, trainer_server):
    process, port = exporter
    run_dir = tmp_path / "live"
    server = trainer_server
    pid = server.start(
        [
            "--runs-dir",
            tmp_path,
            "--run-id",
            "live",
            *SMALL,
            "--total-steps",
            256 * 5000,
            "--quiet",
        ],
        tmp_path.parent / "live",
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (
        (run_dir / "progress.jsonl").exists()
        and (run_dir / "progress.jsonl").read_bytes().count(b"\n") >= 3
    ):
        time.sleep(0.01)

    content_type, text = scrape(port, OPENMETRICS)
    assert content_type == "application/openmetrics-text; version=1.0.0; charset=utf-8"
    samples, types = parse(text, openmetrics=True)
    run = {"run": "live", "rank": "0"}
    assert types["operant_global_step"] == "gauge" and types["operant_sps"] == "gauge"
    assert types["operant_process_steps"] == "counter"
    assert types["operant_run"] == "info"
    assert value(samples, "operant_run_status", status="running", **run) == 1
    assert (
        sum(value(samples, "operant_run_status", status=status, **run) for status in STATUSES) == 1
    )
    assert value(samples, "operant_global_step", **run) >= 3 * 256
    # A new run: this process trained every step of it.
    assert value(samples, "operant_process_steps_total", **run) == value(
        samples, "operant_global_step", **run
    )
    info = [labels for (name, labels) in samples if name == "operant_run_info"]
    assert dict(info[0]) == {
        **run,
        "env_id": "CartPole-v1",
        "hostname": socket.gethostname(),
        "writer": dict(info[0])["writer"],
        "env_impl": "native",
        "device": "cpu",
        "warning": "",
    }

    content_type, text = scrape(port)
    assert content_type == "text/plain; version=0.0.4; charset=utf-8"
    samples, types = parse(text, openmetrics=False)
    assert types["operant_process_steps_total"] == "counter"
    assert types["operant_global_step"] == "gauge"
    assert types["operant_run_info"] == "gauge"

    # Frozen (SIGSTOP), the run's values hold still: the exporter's equal the reader's.
    os.kill(pid, signal.SIGSTOP)
    try:
        wait_until_stopped(pid)
        with MetricsReader(run_dir / "metrics.bin") as reader:
            snapshot = reader.snapshot()
        samples, _ = parse(scrape(port, OPENMETRICS)[1], openmetrics=True)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert snapshot.status == "stalled"  # a stopped process is stalled, to both
    assert value(samples, "operant_run_status", status="stalled", **run) == 1
    for name, number in snapshot.counters.items():
        family = exported_name(name, "")[0]
        assert value(samples, family + ("" if name in POSITIONS else "_total"), **run) == number
    units = {item.name: item.unit for item in [*snapshot.schema.metrics, *snapshot.schema.snapshot]}
    absent = []
    for name, number in [*snapshot.gauges.items(), *snapshot.snapshot.items()]:
        family, _, factor = exported_name(name, units[name])
        if math.isnan(number) or name in PRESENT:  # unpublished; a stalled run's rates
            absent.append(family)
            assert (family, frozenset(run.items())) not in samples, name
        else:
            assert value(samples, family, **run) == number * factor, name
    assert "operant_sps" in absent and "operant_env_episodes" in absent  # single-agent env
    assert value(samples, "operant_run_start_time_seconds", **run) == snapshot.created_wall_ns / 1e9

    # Bad requests: 4xx, counted, and the exporter goes on serving.
    statuses = [
        raw(port, b"GARBAGE\r\n\r\n"),
        raw(port, b"GET /metrics HTTP/9.9\r\n\r\n"),
        raw(port, b"POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"),
        raw(port, b"BREW /metrics HTTP/1.1\r\n\r\n"),
        raw(port, b"GET /nothing-here HTTP/1.1\r\n\r\n"),
        raw(port, b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n"),
        raw(port, b"\x00\xff\xfe binary \r\n\r\n"),
    ]
    assert statuses == [400, 400, 405, 405, 404, 414, 400]
    with pytest.raises(urllib.error.HTTPError) as error:
        urllib.request.urlopen(
            urllib.request.Request(f"http://127.0.0.1:{port}/metrics", method="DELETE"), timeout=10
        )
    assert error.value.code == 405 and error.value.headers["Allow"] == "GET, HEAD"
    samples, _ = parse(scrape(port)[1], openmetrics=False)
    assert value(samples, "operant_exporter_bad_requests_total") == len(statuses) + 1

    # Read-only and torch-free: no metrics file open for writing, no libtorch mapped.
    maps = Path(f"/proc/{process.pid}/maps").read_text()
    assert "libtorch" not in maps and "torch/lib" not in maps
    for fd in os.listdir(f"/proc/{process.pid}/fd"):
        try:
            target = os.readlink(f"/proc/{process.pid}/fd/{fd}")
            flags = Path(f"/proc/{process.pid}/fdinfo/{fd}").read_text()
        except FileNotFoundError:
            continue
        if target.startswith(str(tmp_path)):
            mode = int(re.search(r"flags:\s+(\d+)", flags).group(1), 8) & os.O_ACCMODE
            assert mode == os.O_RDONLY, target

    os.kill(pid, signal.SIGTERM)
    assert server.wait() == 0
    samples, _ = parse(scrape(port, OPENMETRICS)[1], openmetrics=True)
    assert value(samples, "operant_run_status", status="finished", **run) == 1
    assert value(samples, "operant_run_interrupted", **run) == 1

    # A finished run stays for --keep-finished seconds after its last heartbeat, then goes.
    assert [run_id for run_id, _ in RunsCollector(tmp_path, 600).runs()] == ["live"]
    assert [run_id for run_id, _ in RunsCollector(tmp_path, math.inf).runs()] == ["live"]
    assert RunsCollector(tmp_path, 0).runs() == []

    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=10) == 0


def test_accept_header_negotiation():
    assert wants_openmetrics(OPENMETRICS)
    assert wants_openmetrics("application/openmetrics-text")
    assert not wants_openmetrics("application/openmetrics-text;q=0, text/plain")
    assert not wants_openmetrics("text/plain;version=0.0.4")
    assert not wants_openmetrics(None)
    # relative q-values: text preferred, text served (OpenMetrics was, for any q > 0)
    assert not wants_openmetrics("text/plain;version=0.0.4;q=1,application/openmetrics-text;q=0.1")
    # Prometheus's own header (3.x)
    assert wants_openmetrics(
        "application/openmetrics-text;version=1.0.0;q=0.6,application/openmetrics-text;"
        "version=0.0.1;q=0.5,text/plain;version=1.0.0;q=0.4,text/plain;version=0.0.4;q=0.3,"
        "*/*;q=0.2"
    )


def test_bad_listen_address_is_one_line_exit_2(tmp_path):
    operant = str(Path(sys.executable).with_name("operant"))
    for listen, message in (
        ("nowhere", "expected HOST:PORT"),
        ("127.0.0.1:http", "a number"),
        ("127.0.0.1:70000", "between 0 and 65535"),
    ):
        result = subprocess.run(
            [operant, "exporter", "--listen", listen, "--runs-dir", str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert result.returncode == 2 and message in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1


def test_keep_finished_takes_inf_and_refuses_what_is_no_duration(tmp_path):
    operant = str(Path(sys.executable).with_name("operant"))
    for keep in ("-1", "nan"):
        result = subprocess.run(
            [operant, "exporter", "--keep-finished", keep, "--runs-dir", str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert result.returncode == 2
        assert result.stderr.strip().splitlines() == [
            "operant exporter: --keep-finished must be a non-negative number of seconds "
            "(inf: forever)"
        ]


def test_unreadable_files_is_the_last_scrapes_count(tmp_path):
    # The counter grows by one a scrape for as long as a bad file stays (so `increase() > 0`
    # never clears for one stale directory); the gauge says how many this scrape could not
    # read, and is 0 again once the file is removed.
    from monitor_fixtures import Run

    from operant.shared.runs import METRICS_FILE, create_run_dir

    good = Run(tmp_path, "good")
    bad = create_run_dir(tmp_path, "bad") / METRICS_FILE
    bad.write_bytes(b"not a metrics file" * 100)
    collector = RunsCollector(tmp_path, math.inf)
    try:
        for scraped in (1, 2):
            samples, _ = parse(render(collector, False).decode(), openmetrics=False)
            assert value(samples, "operant_exporter_unreadable_files") == 1
            assert value(samples, "operant_exporter_read_errors_total") == scraped
        bad.unlink()
        samples, _ = parse(render(collector, False).decode(), openmetrics=False)
        assert value(samples, "operant_exporter_unreadable_files") == 0
        assert value(samples, "operant_exporter_read_errors_total") == 2
        assert value(samples, "operant_exporter_runs") == 1
    finally:
        collector.close()
        good.close()


def test_a_root_that_is_not_there_yet_is_said(tmp_path):
    # served an empty page without a word (a typo in --runs-dir looked like "no runs")
    command = [str(Path(sys.executable).with_name("operant")), "exporter", "--listen",
               "127.0.0.1:0", "--runs-dir", str(tmp_path / "later")]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline()
    finally:
        process.kill()
        process.wait()
    assert line.rstrip().endswith(
        f"for the runs under {tmp_path / 'later'} (not there yet: runs will appear as they start)"
    )

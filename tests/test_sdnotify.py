"""sd_notify without systemd: a real AF_UNIX datagram socket stands in for the manager, and a
subprocess uses the notifier as the trainer does, with NOTIFY_SOCKET / WATCHDOG_USEC set in
its environment. The tests assert what arrives and when."""

from __future__ import annotations

import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from operant.trainer.run.sdnotify import (
    SystemdNotifier,
    parse_notify_socket,
    parse_watchdog_usec,
)

# Runs in the child. argv[1] names a scenario; the notifier comes from the environment,
# exactly as in the service. With OPERANT_TEST_PIN_WATCHDOG_PID set, the child first
# re-executes itself with WATCHDOG_PID set to its own pid, as systemd sets it.
CHILD = textwrap.dedent("""
    import json, os, sys, time
    if os.environ.pop("OPERANT_TEST_PIN_WATCHDOG_PID", None):
        os.environ["WATCHDOG_PID"] = str(os.getpid())
        os.execv(sys.executable, [sys.executable, *sys.argv])
    from operant.trainer.run.sdnotify import SystemdNotifier

    def busy_with_progress(notifier, seconds, step):
        # Holds the GIL in bytecode the whole time, like a Python-heavy update, and reports
        # a finished update every 20 ms.
        end = time.monotonic() + seconds
        next_update = time.monotonic()
        x = 1.0
        while time.monotonic() < end:
            x = x * 1.0000001 + 1e-9
            if time.monotonic() >= next_update:
                step += 1
                notifier.progress(step)
                next_update += 0.02
        return step

    def busy_without_progress(seconds):
        end = time.monotonic() + seconds
        x = 1.0
        while time.monotonic() < end:
            x = x * 1.0000001 + 1e-9

    notifier = SystemdNotifier.from_environ()
    scenario = sys.argv[1]
    if scenario == "lifecycle":
        notifier.extend_timeout(90)
        notifier.progress(0)
        notifier.ready("step 0")
        notifier.status("dropped: within status_interval_s of the last one")
        notifier.status("step 128 | 5000 sps\\nsecond line", force=True)
        busy_with_progress(notifier, 0.5, 0)
        pid = os.fork()
        if pid == 0:
            os._exit(0 if notifier.status("from a forked child", force=True) is False else 1)
        _, child_status = os.waitpid(pid, 0)
        notifier.stopping("checkpointing")
    elif scenario == "watchdog":
        notifier.progress(0)
        notifier.ready("step 0")
        step = busy_with_progress(notifier, 1.2, 0)
        notifier.status("phase=stalled", force=True)
        busy_without_progress(1.2)
        notifier.status("phase=resumed", force=True)
        busy_with_progress(notifier, 0.4, step)
        notifier.stopping("done")
        time.sleep(0.5)
        child_status = 0
    print(json.dumps({"sent": notifier.sent, "failures": notifier.failures,
                      "watchdog_pings": notifier.watchdog_pings,
                      "fork_child_status": child_status}))
    notifier.close()
""")


def _bind(kind: str, tmp_path) -> tuple[socket.socket, str]:
    """A datagram socket playing systemd, and the NOTIFY_SOCKET value that names it."""
    receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    if kind == "path":
        path = str(tmp_path / "notify.sock")
        receiver.bind(path)
        return receiver, path
    name = f"operant-test-{os.getpid()}-{secrets.token_hex(4)}"
    receiver.bind("\0" + name)
    return receiver, "@" + name


def _run_child(
    scenario: str, notify_socket: str, receiver: socket.socket, extra_env: dict[str, str], tmp_path
) -> tuple[list[tuple[float, str]], dict]:
    """Run the child scenario; return (arrival time, message) for every datagram, and the
    child's own counters."""
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")
    }
    env.update(NOTIFY_SOCKET=notify_socket, **extra_env)
    child = subprocess.Popen(
        [sys.executable, str(script), scenario],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    receiver.settimeout(0.05)
    messages: list[tuple[float, str]] = []
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            data = receiver.recv(4096)
        except TimeoutError:
            if child.poll() is not None:
                break
            continue
        messages.append((time.monotonic(), data.decode()))
    stdout, stderr = child.communicate(timeout=5)
    assert child.returncode == 0, stderr
    return messages, json.loads(stdout)


def _watchdog_times(messages, start: float, end: float) -> list[float]:
    return [t for t, text in messages if text == "WATCHDOG=1" and start <= t < end]


def _time_of(messages, text: str) -> float:
    (found,) = [t for t, message in messages if message == text]
    return found


@pytest.mark.parametrize("kind", ["path", "abstract"])
def test_lifecycle_messages(kind, tmp_path):
    receiver, address = _bind(kind, tmp_path)
    with receiver:
        # WATCHDOG_PID names another process: the watchdog is not ours to feed, so no ping
        # may arrive although progress advances for longer than the interval.
        messages, counters = _run_child(
            "lifecycle",
            address,
            receiver,
            {"WATCHDOG_USEC": "200000", "WATCHDOG_PID": "1"},
            tmp_path,
        )
    assert [text for _, text in messages] == [
        "EXTEND_TIMEOUT_USEC=90000000",
        "READY=1\nSTATUS=step 0",
        "STATUS=step 128 | 5000 sps second line",
        "STOPPING=1\nSTATUS=checkpointing",
    ]
    assert counters == {"sent": 4, "failures": 0, "watchdog_pings": 0, "fork_child_status": 0}


def test_watchdog_pings_only_while_progress_advances(tmp_path):
    interval = 0.2  # half of WATCHDOG_USEC
    receiver, address = _bind("path", tmp_path)
    with receiver:
        messages, counters = _run_child(
            "watchdog",
            address,
            receiver,
            {"WATCHDOG_USEC": "400000", "OPERANT_TEST_PIN_WATCHDOG_PID": "1"},
            tmp_path,
        )
    ready = _time_of(messages, "READY=1\nSTATUS=step 0")
    stalled = _time_of(messages, "STATUS=phase=stalled")
    resumed = _time_of(messages, "STATUS=phase=resumed")
    stopping = _time_of(messages, "STOPPING=1\nSTATUS=done")
    assert counters["failures"] == 0
    assert counters["watchdog_pings"] == sum(text == "WATCHDOG=1" for _, text in messages)

    # Advancing (1.2 s, main thread busy in bytecode): a ping every half interval.
    advancing = _watchdog_times(messages, ready, stalled)
    assert 4 <= len(advancing) <= 7, advancing
    gaps = [b - a for a, b in zip([ready, *advancing], advancing)]
    assert 0.15 <= statistics.median(gaps) <= 0.3, gaps
    assert max(gaps) < 2 * interval, gaps  # never past systemd's deadline

    # Stalled (1.2 s without a step): at most the one ping owed to the last steps before the
    # stall, within one interval; then silence, so systemd would kill the hung trainer.
    during_stall = _watchdog_times(messages, stalled, resumed)
    assert len(during_stall) <= 1, during_stall
    assert all(t - stalled < interval + 0.1 for t in during_stall), during_stall
    assert resumed - stalled > 1.0

    # Progress again: the pinger has been re-checking, so a ping follows the first new step
    # quickly rather than a whole interval later.
    after_resume = _watchdog_times(messages, resumed, stopping)
    assert after_resume, "no ping after progress resumed"
    assert after_resume[0] - resumed < 0.12, after_resume[0] - resumed

    # STOPPING=1 ends the pinging although the process lives on for another 0.5 s.
    assert _watchdog_times(messages, stopping, float("inf")) == []


def test_parse_notify_socket():
    assert parse_notify_socket("/run/systemd/notify") == b"/run/systemd/notify"
    assert parse_notify_socket("@/org/freedesktop/systemd1/notify") == (
        b"\0/org/freedesktop/systemd1/notify"
    )
    assert parse_notify_socket(None) is None
    assert parse_notify_socket("") is None
    assert parse_notify_socket("relative/notify") is None
    assert parse_notify_socket("vsock:2:1234") is None


def test_parse_watchdog_usec_follows_sd_watchdog_enabled():
    pid = 4242
    assert parse_watchdog_usec({"WATCHDOG_USEC": "30000000"}, pid) == 30_000_000
    assert parse_watchdog_usec({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "4242"}, pid) == (
        30_000_000
    )
    assert parse_watchdog_usec({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "4243"}, pid) is None
    assert parse_watchdog_usec({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "x"}, pid) is None
    assert parse_watchdog_usec({"WATCHDOG_USEC": "0"}, pid) is None
    assert parse_watchdog_usec({"WATCHDOG_USEC": "-5"}, pid) is None
    assert parse_watchdog_usec({"WATCHDOG_USEC": "30s"}, pid) is None
    assert parse_watchdog_usec({}, pid) is None


def test_without_notify_socket_everything_is_a_no_op():
    before = {thread.ident for thread in threading.enumerate()}
    notifier = SystemdNotifier.from_environ({"WATCHDOG_USEC": "1000000"})
    assert notifier.enabled is False
    assert notifier.watchdog_interval_s is None
    assert notifier.environment_error is None
    assert notifier.ready("step 0") is False
    notifier.progress(1)
    assert notifier.status("step 1", force=True) is False
    assert notifier.extend_timeout(10) is False
    assert notifier.stopping() is False
    assert {thread.ident for thread in threading.enumerate()} == before
    assert (notifier.sent, notifier.failures) == (0, 0)


def test_unusable_notify_socket_is_reported_not_raised():
    notifier = SystemdNotifier.from_environ({"NOTIFY_SOCKET": "relative/notify"})
    assert notifier.enabled is False
    assert "relative/notify" in notifier.environment_error


def test_send_failures_are_counted_never_raised(tmp_path):
    missing = str(tmp_path / "no-manager-here.sock")
    notifier = SystemdNotifier.from_environ({"NOTIFY_SOCKET": missing})
    assert notifier.enabled is True
    assert notifier.ready("step 0") is False
    assert notifier.status("step 1", force=True) is False
    assert (notifier.sent, notifier.failures) == (0, 2)
    assert notifier.last_error.startswith("FileNotFoundError")
    notifier.close()


def test_unset_environment_hides_the_socket_from_children(monkeypatch, tmp_path):
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "notify.sock"))
    monkeypatch.setenv("WATCHDOG_USEC", "2000000")
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    notifier = SystemdNotifier.from_environ(unset_environment=True)
    assert notifier.enabled is True
    assert notifier.watchdog_interval_s == 1.0
    assert not {"NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"} & set(os.environ)


def test_import_starts_no_thread_and_installs_no_handler():
    probe = textwrap.dedent("""
        import json, signal, threading
        watched = [signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1]
        before = [signal.getsignal(s) for s in watched]
        import operant.trainer.run.sdnotify
        print(json.dumps({"threads": threading.active_count(),
                          "handlers_unchanged": before == [signal.getsignal(s) for s in watched]}))
    """)
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=30, check=True
    )
    assert json.loads(result.stdout) == {"threads": 1, "handlers_unchanged": True}


def test_repeating_a_step_is_not_progress_but_beat_is(tmp_path):
    receiver, address = _bind("path", tmp_path)
    receiver.settimeout(0.01)

    def pings_during(seconds: float, report) -> int:
        end = time.monotonic() + seconds
        count = 0
        while time.monotonic() < end:
            report()
            try:
                count += receiver.recv(4096) == b"WATCHDOG=1"
            except TimeoutError:
                pass
        return count

    with (
        receiver,
        SystemdNotifier(parse_notify_socket(address), watchdog_usec=100_000) as notifier,
    ):  # ping every 50 ms
        notifier.progress(5)
        notifier.ready()
        assert receiver.recv(4096) == b"READY=1"
        assert pings_during(0.4, lambda: notifier.progress(5)) == 0
        assert pings_during(0.4, notifier.beat) >= 4
        notifier.stop_watchdog()
        assert "operant-sd-watchdog" not in {thread.name for thread in threading.enumerate()}

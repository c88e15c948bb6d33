"""Talking to systemd over `$NOTIFY_SOCKET`, with no dependency: readiness, status, watchdog.

The protocol (sd_notify(3), sd_watchdog_enabled(3)) is one datagram of newline-separated
`KEY=value` fields sent to an AF_UNIX socket. `$NOTIFY_SOCKET` is a filesystem path, or a
Linux abstract name when it starts with '@'. The kernel attaches our credentials, which
systemd checks against `NotifyAccess=`; with `NotifyAccess=main` only the unit's main
process is heard, so a forked child never sends (the notifier notices the pid change).

The watchdog pinger sends `WATCHDOG=1` only while training advances: the trainer reports
each finished update with `progress(global_step)` (one attribute store, nothing else), and a
daemon thread pings at half of `$WATCHDOG_USEC` if the step moved since its last ping. A
trainer whose loop hangs stops pinging, and systemd restarts it. The thread spends its life
in `Event.wait`, which releases the GIL, so a long update in the main thread delays nothing.

Importing this module starts nothing: no thread, no socket, no signal handler. Without
`$NOTIFY_SOCKET` every method is a cheap no-op, and no send failure ever raises into the
trainer: failures are counted in `failures` and the last one kept in `last_error`.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Mapping

NOTIFY_SOCKET_ENV = "NOTIFY_SOCKET"
WATCHDOG_USEC_ENV = "WATCHDOG_USEC"
WATCHDOG_PID_ENV = "WATCHDOG_PID"

# When a ping is due but the step has not moved yet, look again this often (as a fraction of
# the watchdog interval), so an update that ends after the due time is still acknowledged well
# before systemd's deadline: the trainer is restarted only after a whole WatchdogSec without a
# finished update, not after half of it.
_RECHECK_FRACTION = 1 / 16


def parse_notify_socket(value: str | None) -> bytes | None:
    """The address `$NOTIFY_SOCKET` names, as bytes for `sendto`; None when unset or unusable.

    A path must be absolute; '@name' is the abstract name '\\0name'. Other forms (a relative
    path, systemd 254's 'vsock:') are not supported. A name too long for `sockaddr_un` is
    returned as is and fails at the first send, where it is counted.
    """
    if not value:
        return None
    if value.startswith("@"):
        return b"\0" + os.fsencode(value[1:])
    if value.startswith("/"):
        return os.fsencode(value)
    return None


def parse_watchdog_usec(environ: Mapping[str, str], pid: int) -> int | None:
    """The watchdog timeout in microseconds that the manager expects from process `pid`.

    As sd_watchdog_enabled(3): `$WATCHDOG_USEC` must be a positive integer, and when
    `$WATCHDOG_PID` is set it must be `pid` (the variable is inherited by children, who must
    not ping for their parent). None when the watchdog is not enabled for `pid`.
    """
    usec_text = environ.get(WATCHDOG_USEC_ENV)
    if not usec_text:
        return None
    try:
        usec = int(usec_text, 10)
    except ValueError:
        return None
    if usec <= 0:
        return None
    pid_text = environ.get(WATCHDOG_PID_ENV)
    if pid_text:
        try:
            if int(pid_text, 10) != pid:
                return None
        except ValueError:
            return None
    return usec


def _one_line(text: str) -> str:
    # A newline inside a value would start a new field in the datagram.
    return " ".join(text.splitlines())


class SystemdNotifier:
    """Readiness, status, stopping and progress-gated watchdog pings for one process.

    Build it with `SystemdNotifier.from_environ()` in the process systemd started. All
    methods are safe to call when systemd is absent (`enabled` is False): they return False
    and do nothing.
    """

    def __init__(
        self,
        address: bytes | None,
        *,
        watchdog_usec: int | None = None,
        status_interval_s: float = 1.0,
        send_timeout_s: float = 1.0,
    ) -> None:
        """`address` as from `parse_notify_socket`; `watchdog_usec` as from
        `parse_watchdog_usec` (ignored without an address). STATUS= updates closer together
        than `status_interval_s` are dropped unless forced, so a trainer that finishes
        hundreds of updates a second does not wake PID 1 for each. A send that cannot finish
        within `send_timeout_s` (the manager's queue full) is counted as a failure."""
        self.address = address
        self.watchdog_usec = watchdog_usec if address is not None else None
        self.status_interval_s = status_interval_s
        self.send_timeout_s = send_timeout_s
        self.sent = 0
        self.failures = 0
        self.watchdog_pings = 0
        self.last_error: str | None = None
        # Set by from_environ when $NOTIFY_SOCKET is present but unusable: log it once.
        self.environment_error: str | None = None
        self._pid = os.getpid()
        self._socket: socket.socket | None = None
        # Guards the counters and the lazy creation of the socket (the trainer's thread and
        # the pinger both send); never held across a send.
        self._lock = threading.Lock()
        self._last_status_at = float("-inf")
        # Written by the trainer's thread, read by the pinger: plain attribute stores of ints
        # are atomic under the GIL, so no lock sits on the trainer's path.
        self._step: int | None = None
        self._beats = 0
        self._stop = threading.Event()
        self._pinger: threading.Thread | None = None

    @classmethod
    def from_environ(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        unset_environment: bool = False,
        **options: float,
    ) -> SystemdNotifier:
        """A notifier for the socket and watchdog that `environ` (default `os.environ`)
        names for this process. With `unset_environment`, NOTIFY_SOCKET, WATCHDOG_USEC and
        WATCHDOG_PID are removed from `os.environ` afterwards so that child processes (env
        workers, compilers) inherit none of them."""
        source = os.environ if environ is None else environ
        socket_text = source.get(NOTIFY_SOCKET_ENV)
        address = parse_notify_socket(socket_text)
        watchdog_usec = parse_watchdog_usec(source, os.getpid())
        if unset_environment:
            for name in (NOTIFY_SOCKET_ENV, WATCHDOG_USEC_ENV, WATCHDOG_PID_ENV):
                os.environ.pop(name, None)
        notifier = cls(address, watchdog_usec=watchdog_usec, **options)
        if socket_text and address is None:
            notifier.environment_error = (
                f"${NOTIFY_SOCKET_ENV}={socket_text!r} is neither an absolute path nor an "
                "'@' abstract name; not notifying systemd"
            )
        return notifier

    @property
    def enabled(self) -> bool:
        """True when a notification socket is configured."""
        return self.address is not None

    @property
    def watchdog_interval_s(self) -> float | None:
        """Seconds between watchdog pings (half of WATCHDOG_USEC), or None without a watchdog."""
        if self.watchdog_usec is None:
            return None
        return self.watchdog_usec / 2e6

    # -- sending ---------------------------------------------------------------------------

    def notify(self, *fields: str) -> bool:
        """Send `fields` ('KEY=value' each) as one datagram. True if it was sent; False when
        disabled, in a forked child, or on failure (counted, never raised)."""
        if self.address is None or not fields or os.getpid() != self._pid:
            return False
        payload = "\n".join(fields).encode("utf-8", "replace")
        try:
            sock = self._socket
            if sock is None:
                with self._lock:
                    if self._socket is None:
                        created = socket.socket(
                            socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC
                        )
                        created.settimeout(self.send_timeout_s)
                        self._socket = created
                    sock = self._socket
            # sendto on every message rather than connect once: a manager that re-executes
            # (daemon-reexec) binds its socket anew, and a path is looked up again each time.
            sock.sendto(payload, self.address)
        except OSError as error:
            with self._lock:
                self.failures += 1
                self.last_error = f"{type(error).__name__}: {error}"
            return False
        with self._lock:
            self.sent += 1
        return True

    def ready(self, status: str | None = None) -> bool:
        """READY=1 (with an optional STATUS=), then start the watchdog pinger if the manager
        asked for one: systemd arms the watchdog when start-up completes, which is this."""
        fields = ["READY=1"]
        if status is not None:
            fields.append(f"STATUS={_one_line(status)}")
            self._last_status_at = time.monotonic()
        sent = self.notify(*fields)
        self.start_watchdog()
        return sent

    def status(self, text: str, *, force: bool = False) -> bool:
        """STATUS=text, shown by `systemctl status`. Dropped (False) if the previous status
        went out less than `status_interval_s` ago, unless `force`."""
        if self.address is None:
            return False
        now = time.monotonic()
        if not force and now - self._last_status_at < self.status_interval_s:
            return False
        self._last_status_at = now
        return self.notify(f"STATUS={_one_line(text)}")

    def stopping(self, status: str | None = None) -> bool:
        """STOPPING=1 (with an optional STATUS=) and stop the pinger: systemd does not watch
        a stopping service, and the shutdown checkpoint must not look like progress."""
        self.stop_watchdog()
        fields = ["STOPPING=1"]
        if status is not None:
            fields.append(f"STATUS={_one_line(status)}")
        return self.notify(*fields)

    def extend_timeout(self, seconds: float) -> bool:
        """EXTEND_TIMEOUT_USEC: ask for `seconds` more from now, during start-up (a slow
        first update) or stop (a large final checkpoint). Must be sent before the current
        timeout runs out."""
        return self.notify(f"EXTEND_TIMEOUT_USEC={max(0, int(seconds * 1e6))}")

    def watchdog_ping(self) -> bool:
        """WATCHDOG=1 now, regardless of progress; the pinger thread calls this."""
        sent = self.notify("WATCHDOG=1")
        if sent:
            with self._lock:
                self.watchdog_pings += 1
        return sent

    # -- progress-gated watchdog -----------------------------------------------------------

    def progress(self, global_step: int) -> None:
        """Report that training reached `global_step`; call once per finished update. Costs
        one attribute store: no syscall, no lock."""
        self._step = global_step

    def beat(self) -> None:
        """Count as progress without a new step: for long phases that are not stuck but do
        not advance the step (an evaluation, a periodic checkpoint). Call it from inside
        their loop, not once around them, or a hang inside would go unnoticed."""
        self._beats += 1

    def _progress_marker(self) -> tuple[int | None, int]:
        return (self._step, self._beats)

    def start_watchdog(self) -> bool:
        """Start the daemon pinger thread if the watchdog is enabled for this process and
        it is not running yet. True if a pinger is running afterwards."""
        if self.watchdog_usec is None or os.getpid() != self._pid:
            return False
        if self._pinger is not None and self._pinger.is_alive():
            return True
        # A fresh event per pinger: one that outlived its join timeout must not be revived.
        self._stop = threading.Event()
        self._pinger = threading.Thread(
            target=self._run_pinger, args=(self._stop,), name="operant-sd-watchdog", daemon=True
        )
        self._pinger.start()
        return True

    def stop_watchdog(self, timeout_s: float = 1.0) -> None:
        """Stop the pinger thread (if any) and wait up to `timeout_s` for it to end."""
        self._stop.set()
        pinger = self._pinger
        if pinger is not None and pinger is not threading.current_thread():
            pinger.join(timeout_s)
        self._pinger = None

    def _run_pinger(self, stop: threading.Event) -> None:
        assert self.watchdog_usec is not None
        interval = self.watchdog_usec / 2e6
        recheck = max(interval * _RECHECK_FRACTION, 0.001)
        # The baseline is the progress at start-up (READY): the manager's first deadline
        # counts from READY, and only a step taken after it earns the first ping.
        pinged_marker = self._progress_marker()
        wait = interval
        while not stop.wait(wait):
            marker = self._progress_marker()
            if marker == pinged_marker:
                wait = recheck
                continue
            self.watchdog_ping()
            pinged_marker = marker
            wait = interval

    # -- lifetime --------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the pinger and close the socket; the notifier stays usable (it reopens)."""
        self.stop_watchdog()
        if self._socket is not None:
            self._socket.close()
            self._socket = None

    def __enter__(self) -> SystemdNotifier:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

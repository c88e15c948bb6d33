# Over 400 lines: one command's exposition format, collector and HTTP server, side by side.
"""`operant exporter`: the metrics of every run under a runs root, for Prometheus, over HTTP.

    operant exporter [--listen 127.0.0.1:9464] [--runs-dir DIR] [--keep-finished SECONDS]

`GET /metrics` answers in the OpenMetrics 1.0 text format when the request's Accept header
asks for `application/openmetrics-text` (as Prometheus does), else in the Prometheus text
format 0.0.4. Each scrape reads the runs' metrics files through the shared read-only reader
(operant.shared.reader): the exporter is one more reader, like the monitor. It never writes
to a run directory, never signals a trainer, and never imports torch.

Which runs: every run whose status is running or stalled, and every finished, failed or
crashed one for `--keep-finished` seconds (default 600) after its last heartbeat, so the
scrape after a run ends still shows its final values and status. A resumed run (a new metrics
file in the same directory) is shown again at once.

What each run exports, for each of its ranks (each metrics file: a single-process run has
one, rank 0; a run trained by several processes one per rank), labelled `run` (the run id)
and `rank`:
- `operant_run_info` (an info metric: env_id, hostname, writer and the run's text metrics
  such as env_impl and device as labels), `operant_run_status{status=...}` (1 for the current
  status, 0 for the others: running, finished, failed, crashed, stalled),
  `operant_run_interrupted`, `operant_run_start_time_seconds`,
  `operant_run_heartbeat_age_seconds`, `operant_run_update_age_seconds` (since the trainer's
  last update, NaN once the run has ended: a run whose heartbeat is fresh while this grows is
  stuck, operant.shared.progress);
- every counter of the file's schema as a counter (`operant_global_step_total`, ...) and
  every gauge and snapshot field as a gauge (`operant_sps`, `operant_episode_return_mean`,
  `operant_phase_env_seconds`, ...): names are `operant_` + the schema's name, with a
  trailing `_s` spelled `_seconds`. Values the trainer has not published yet are NaN.
The run as a whole, labelled `run` only: `operant_run_ranks` (its processes),
`operant_run_global_step_total`, `operant_run_sps` and `operant_run_episode_return_mean` (its
ranks' steps and steps/s summed, their returns pooled: operant.shared.ranks). These are
families of their own, not a `rank`-less sample of the per-rank ones, so that `sum by (run)`
over a per-rank family stays right (Prometheus's rule that a sum or average over a metric's
labels must mean something). A rank that died keeps its series, its `operant_run_status`
saying `crashed`; `sum by (run) (operant_run_status{status="crashed"})` counts such ranks.
The exporter's own: `operant_exporter_runs`, `operant_exporter_read_errors_total` (metrics
files that could not be read, one per file per scrape), `operant_exporter_unreadable_files`
(those of the last scrape: an alert on it clears once a bad file is mended or removed, where
`increase()` of the counter stays above 0 while one stale bad directory remains) and
`operant_exporter_bad_requests_total`.

Anything but `GET`/`HEAD` of `/metrics` or `/` gets a 4xx answer (404 unknown path, 405 other
methods, 400 a malformed request); a client that stalls is dropped after 10 s. It listens on
loopback by default; the systemd unit (deploy/operant-exporter.service) keeps it there.
"""

from __future__ import annotations

import argparse
import ipaddress
import math
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType
from urllib.parse import urlsplit

from operant.shared import metrics_layout as fmt
from operant.shared import progress, runs
from operant.shared.cli_parser import OneLineParser
from operant.shared.ranks import RANK_UNKNOWN, RunReader, RunSnapshot
from operant.shared.reader import (
    STATUS_CRASHED,
    STATUS_FAILED,
    STATUS_FINISHED,
    STATUS_RUNNING,
    STATUS_STALLED,
    STATUSES,
    MetricsFileError,
    Snapshot,
)

PROG = "operant exporter"
DEFAULT_LISTEN = "127.0.0.1:9464"
DEFAULT_KEEP_FINISHED_S = 600.0
FINAL_STATUSES = (STATUS_FINISHED, STATUS_FAILED, STATUS_CRASHED)
LIVE_STATUSES = (STATUS_RUNNING, STATUS_STALLED)
PREFIX = "operant_"
OPENMETRICS_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"
PROMETHEUS_TYPE = "text/plain; version=0.0.4; charset=utf-8"
CLIENT_TIMEOUT_S = 10.0
# Labels a run's text metrics may not take over.
_RESERVED_LABELS = {"run", "rank", "status", "env_id", "hostname", "writer"}


class _Stop(Exception):
    """Raised by the SIGTERM/SIGINT handler to leave serve_forever()."""


# --- exposition ----------------------------------------------------------------------------


def metric_name(name: str) -> str:
    """`operant_` + the schema's name, as a valid metric name, `_s` spelled `_seconds`."""
    base = re.sub(r"[^a-zA-Z0-9_]", "_", name)
    if base.endswith("_s"):
        base = base[:-2] + "_seconds"
    return PREFIX + base


def label_name(name: str) -> str:
    base = re.sub(r"[^a-zA-Z0-9_]", "_", name).lstrip("_")
    return base if base and not base[0].isdigit() else f"label_{base}"


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str, openmetrics: bool) -> str:
    text = text.replace("\\", "\\\\").replace("\n", "\\n")
    return text.replace('"', '\\"') if openmetrics else text


def format_value(value: float | int | bool) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


@dataclass
class Family:
    """One metric family: its samples for every run, rendered together as both formats need."""

    name: str
    """The family's name; a counter's samples add `_total`, an info's `_info`."""
    kind: str
    """counter, gauge or info."""
    help: str
    samples: list[tuple[dict[str, str], float | int | bool]] = field(default_factory=list)

    def render(self, openmetrics: bool) -> list[str]:
        sample_name = self.name + {"counter": "_total", "info": "_info"}.get(self.kind, "")
        if openmetrics:
            header_name, kind = self.name, self.kind
        else:  # 0.0.4 names the family by its samples and has no info type
            header_name, kind = sample_name, ("gauge" if self.kind == "info" else self.kind)
        lines = [
            f"# HELP {header_name} {_escape_help(self.help, openmetrics)}",
            f"# TYPE {header_name} {kind}",
        ]
        for labels, value in self.samples:
            text = ",".join(f'{key}="{_escape_label(str(val))}"' for key, val in labels.items())
            lines.append(
                f"{sample_name}{{{text}}} {format_value(value)}"
                if text
                else f"{sample_name} {format_value(value)}"
            )
        return lines


def exposition(
    runs_seen: list[tuple[str, RunSnapshot]], exporter_stats: dict[str, int], openmetrics: bool
) -> str:
    """The text of one scrape."""
    families: dict[str, Family] = {}

    def add(
        name: str, kind: str, help_text: str, labels: dict[str, str], value: float | int | bool
    ) -> None:
        family = families.get(name)
        if family is None:
            family = families[name] = Family(name, kind, help_text)
        elif family.kind != kind:
            return  # two runs disagree on a metric's kind (different versions): first wins
        family.samples.append((labels, value))

    for run_id, run in runs_seen:
        for snapshot in run.per_rank:
            _add_run(add, run_id, snapshot)
    for run_id, run in runs_seen:
        _add_totals(add, run_id, run)
    _add_exporter(add, sum(len(run.per_rank) for _, run in runs_seen), exporter_stats)
    lines = [line for family in families.values() for line in family.render(openmetrics)]
    if openmetrics:
        lines.append("# EOF")
    return "\n".join(lines) + "\n"


_Add = Callable[[str, str, str, dict[str, str], float | int | bool], None]


def _add_run(add: _Add, run_id: str, snapshot: Snapshot) -> None:
    """Add one rank's samples (a single-process run's: rank 0): its info, status, timing,
    and every metric it declares."""
    labels = {"run": run_id, "rank": str(snapshot.schema.rank)}
    info = {
        **labels,
        "env_id": snapshot.env_id,
        "hostname": snapshot.hostname,
        "writer": snapshot.schema.writer,
    }
    for name, text in snapshot.texts.items():
        key = label_name(name)
        if key not in _RESERVED_LABELS:
            info[key] = text
    add(PREFIX + "run", "info", "The run: environment, host, writer, implementation.", info, 1)
    for status in STATUSES:
        add(
            PREFIX + "run_status",
            "gauge",
            "1 for the run's status (running, finished, failed, crashed, stalled), else 0.",
            {**labels, "status": status},
            snapshot.status == status,
        )
    add(
        PREFIX + "run_interrupted",
        "gauge",
        "1 if the run finished early on request (SIGTERM/SIGINT), else 0.",
        labels,
        snapshot.interrupted,
    )
    add(
        PREFIX + "run_start_time_seconds",
        "gauge",
        "When the run's current metrics file was created (a resume makes a new one), "
        "seconds since the Unix epoch.",
        labels,
        snapshot.created_wall_ns / 1e9,
    )
    add(
        PREFIX + "run_heartbeat_age_seconds",
        "gauge",
        "Seconds since the trainer's last heartbeat.",
        labels,
        snapshot.heartbeat_age_s,
    )
    # NaN once the run has ended, and for an older trainer's file (no last_update_unix_s).
    measured = progress.update_age(snapshot) if snapshot.status in LIVE_STATUSES else None
    add(
        PREFIX + "run_update_age_seconds",
        "gauge",
        "Seconds since the trainer last finished an update (before its first, since it "
        "started): grows while the heartbeat stays fresh when training hangs.",
        labels,
        measured[0] if measured is not None else math.nan,
    )
    metrics = {metric.name: metric for metric in snapshot.schema.metrics}
    for name, count in snapshot.counters.items():
        add(metric_name(name), "counter", _describe(metrics.get(name), name), labels, count)
    for name, value in snapshot.gauges.items():
        add(metric_name(name), "gauge", _describe(metrics.get(name), name), labels, value)
    fields = {item.name: item for item in snapshot.schema.snapshot}
    for name, value in (snapshot.snapshot or {}).items():
        add(metric_name(name), "gauge", _describe(fields.get(name), name), labels, value)


# (family, kind, help, metric) of the run's totals; the metric's value comes from the run's
# combined snapshot (operant.shared.ranks.RULES).
_TOTALS = (
    (
        "run_global_step",
        "counter",
        "Environment steps taken by all of the run's ranks together.",
        "global_step",
    ),
    ("run_sps", "gauge", "The run's steps per second: its active ranks' summed.", "sps"),
    (
        "run_episode_return_mean",
        "gauge",
        "Mean return of the run's last 100 episodes: its ranks' means, pooled.",
        "episode_return_mean",
    ),
)


def _add_totals(add: _Add, run_id: str, run: RunSnapshot) -> None:
    """Add the run's own samples: its rank count and its summed and pooled values."""
    labels = {"run": run_id}
    add(
        PREFIX + "run_ranks",
        "gauge",
        "Processes (ranks) that train the run.",
        labels,
        run.world_size,
    )
    metrics = run.total.metrics()
    for family, kind, help_text, name in _TOTALS:
        value = metrics.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            add(PREFIX + family, kind, help_text, labels, value)


def _add_exporter(add: _Add, files: int, exporter_stats: dict[str, int]) -> None:
    """Add the exporter's own samples: files scraped, read errors (ever, and in this
    scrape), bad requests."""
    add(PREFIX + "exporter_runs", "gauge", "Metrics files in this scrape.", {}, files)
    add(
        PREFIX + "exporter_read_errors",
        "counter",
        "Metrics files the exporter could not read (missing, corrupt, foreign).",
        {},
        exporter_stats["read_errors"],
    )
    add(
        PREFIX + "exporter_unreadable_files",
        "gauge",
        "Metrics files this scrape could not read: 0 again once they are mended or removed.",
        {},
        exporter_stats.get("unreadable", 0),
    )
    add(
        PREFIX + "exporter_bad_requests",
        "counter",
        "HTTP requests answered with a 4xx status.",
        {},
        exporter_stats["bad_requests"],
    )


def _describe(item: fmt.Metric | fmt.Field | None, name: str) -> str:
    if item is None:
        return name
    text = item.description or name
    return f"{text} ({item.unit})" if item.unit else text


def wants_openmetrics(accept: str | None) -> bool:
    """Whether an Accept header prefers OpenMetrics to the Prometheus text format: its
    highest q for application/openmetrics-text is above 0 and not below text/plain's (or a
    wildcard's, where text/plain is not named). Prometheus's own header asks for OpenMetrics
    first; one that ranks text/plain higher gets text."""
    best = {"openmetrics": 0.0, "text": 0.0}
    for part in (accept or "").split(","):
        media, *params = [piece.strip() for piece in part.split(";")]
        kind = {
            "application/openmetrics-text": "openmetrics",
            "text/plain": "text",
            "text/*": "text",
            "*/*": "text",
        }.get(media.lower())
        if kind is not None:
            best[kind] = max(best[kind], _quality(params))
    return best["openmetrics"] > 0 and best["openmetrics"] >= best["text"]


def _quality(params: list[str]) -> float:
    for param in params:
        key, _, value = param.partition("=")
        if key.strip().lower() == "q":
            try:
                return float(value)
            except ValueError:
                return 0.0
    return 1.0


# --- collection ----------------------------------------------------------------------------


class Collector:
    """Reads every run's metrics files; keeps one reader per run between scrapes."""

    def __init__(self, root: Path, keep_finished_s: float):
        self.root, self.keep_finished_s = root, keep_finished_s
        self.read_errors = 0
        self.unreadable = 0  # in the last scrape
        self.bad_requests = 0
        self.lock = threading.Lock()
        self._readers: dict[Path, RunReader] = {}
        # Runs found finished long ago, by their files' identities: skipped without opening
        # them until a file is replaced (a resumed run writes new ones).
        self._expired: dict[Path, tuple[tuple[int, int], ...]] = {}

    def collect(self) -> list[tuple[str, RunSnapshot]]:
        """(run id, the run's snapshots) of every run to export now."""
        found: list[tuple[str, RunSnapshot]] = []
        seen: set[Path] = set()
        self.unreadable = 0
        try:
            run_dirs = runs.list_run_dirs(self.root)
        except OSError:  # the root vanished or changed while being listed
            run_dirs = []
        for run_dir in run_dirs:
            seen.add(run_dir)
            run = self._exportable(run_dir)
            if run is not None:
                found.append((run_dir.name, run))
        for run_dir in [run_dir for run_dir in self._readers if run_dir not in seen]:
            self._forget(run_dir)
        self._expired = {
            run_dir: identity for run_dir, identity in self._expired.items() if run_dir in seen
        }
        return found

    def _exportable(self, run_dir: Path) -> RunSnapshot | None:
        """The run's snapshots; None when it has no readable file, or it ended more than
        --keep-finished seconds ago (remembered by its files' identities until one is
        replaced)."""
        identity = []
        for path in runs.metrics_files(run_dir):
            try:
                status = os.stat(path)
            except OSError:
                continue
            identity.append((status.st_dev, status.st_ino))
        if not identity:
            return None
        if self._expired.get(run_dir) == tuple(identity):
            return None
        run = self._read(run_dir)
        if run is None:
            return None
        total = run.total
        if total.status in FINAL_STATUSES and total.heartbeat_age_s > self.keep_finished_s:
            self._expired[run_dir] = tuple(identity)
            self._forget(run_dir)
            return None
        return run

    def _read(self, run_dir: Path) -> RunSnapshot | None:
        for _ in range(2):  # a file replaced since the last scrape is opened again once
            reader = self._readers.get(run_dir)
            try:
                if reader is None:
                    reader = self._readers[run_dir] = RunReader(run_dir)
                run = reader.read()
            except MetricsFileError:
                self._forget(run_dir)
                continue
            # A rank whose file cannot be read is one read error, as a run's file is.
            self._unreadable(sum(1 for row in run.ranks if row.status == RANK_UNKNOWN))
            return run
        self._unreadable(1)
        return None

    def _unreadable(self, files: int) -> None:
        self.read_errors += files
        self.unreadable += files

    def _forget(self, run_dir: Path) -> None:
        reader = self._readers.pop(run_dir, None)
        if reader is not None:
            reader.close()

    def scrape(self, openmetrics: bool) -> str:
        with self.lock:
            found = self.collect()
            return exposition(
                found,
                {
                    "read_errors": self.read_errors,
                    "unreadable": self.unreadable,
                    "bad_requests": self.bad_requests,
                },
                openmetrics,
            )

    def close(self) -> None:
        with self.lock:
            for path in list(self._readers):
                self._forget(path)


# --- HTTP ----------------------------------------------------------------------------------

LANDING = b"Operant exporter: the metrics of the runs under this host's runs root are at /metrics\n"


class Handler(BaseHTTPRequestHandler):
    server_version = "operant-exporter"
    # No HTTP/0.9: its answers have no status line, so a garbled request would get a bare
    # body; every answer here says its status.
    default_request_version = "HTTP/1.0"
    timeout = CLIENT_TIMEOUT_S
    collector: Collector  # set on the subclass made by make_server

    def version_string(self) -> str:
        return self.server_version

    def do_GET(self) -> None:
        self._answer(send_body=True)

    def do_HEAD(self) -> None:
        self._answer(send_body=False)

    def __getattr__(self, name: str):
        # Every other method (POST, PUT, DELETE, any token at all) is refused with 405,
        # where http.server would answer 501.
        if name.startswith("do_"):
            return self._not_allowed
        raise AttributeError(name)

    def _not_allowed(self) -> None:
        self.send_error(HTTPStatus.METHOD_NOT_ALLOWED, "only GET and HEAD")

    def _answer(self, send_body: bool) -> None:
        path = urlsplit(self.path).path
        if path == "/metrics":
            openmetrics = wants_openmetrics(self.headers.get("Accept"))
            try:
                body = self.collector.scrape(openmetrics).encode("utf-8")
            except Exception as error:  # a bug: answer 500, keep serving, say what it was
                self.log_error("scrape failed: %s: %s", type(error).__name__, error)
                self.send_error(HTTPStatus.INTERNAL_SERVER_ERROR, "scrape failed")
                return
            content_type = OPENMETRICS_TYPE if openmetrics else PROMETHEUS_TYPE
        elif path == "/":
            body, content_type = LANDING, "text/plain; charset=utf-8"
        else:
            self.send_error(HTTPStatus.NOT_FOUND, "not found: the metrics are at /metrics")
            return
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if send_body:
            self.wfile.write(body)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        # A request line http.server cannot parse gets 400, whatever it says about it
        # (505 for an unknown protocol version, 501 for a method token it dislikes).
        if code in (HTTPStatus.HTTP_VERSION_NOT_SUPPORTED, HTTPStatus.NOT_IMPLEMENTED):
            code, message = HTTPStatus.BAD_REQUEST, "malformed request"
        if 400 <= code < 500:
            with self.collector.lock:
                self.collector.bad_requests += 1
        if code == HTTPStatus.METHOD_NOT_ALLOWED:
            self._allow_header = True
        super().send_error(code, message, explain)

    def end_headers(self) -> None:
        if getattr(self, "_allow_header", False):
            self.send_header("Allow", "GET, HEAD")
            self._allow_header = False
        super().end_headers()

    def log_message(self, format: str, *args: object) -> None:
        # No line per request (a scrape every few seconds would flood the journal);
        # client errors are counted in operant_exporter_bad_requests_total instead.
        pass

    def log_error(self, format: str, *args: object) -> None:
        if format.startswith("scrape failed"):
            sys.stderr.write(f"{PROG}: {format % args}\n")


def parse_listen(text: str) -> tuple[str, int]:
    """HOST:PORT, [IPv6]:PORT or :PORT (loopback); ValueError with the reason otherwise."""
    host, sep, port_text = text.rpartition(":")
    if not sep:
        raise ValueError(f"--listen {text!r}: expected HOST:PORT, e.g. {DEFAULT_LISTEN}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    host = host or "127.0.0.1"
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"--listen {text!r}: the port must be a number") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"--listen {text!r}: the port must be between 0 and 65535")
    return host, port


def make_server(host: str, port: int, collector: Collector) -> ThreadingHTTPServer:
    try:
        family = 6 if isinstance(ipaddress.ip_address(host), ipaddress.IPv6Address) else 4
    except ValueError:
        family = 4  # a host name: IPv4 resolution
    import socket

    class Server(ThreadingHTTPServer):
        address_family = socket.AF_INET6 if family == 6 else socket.AF_INET
        daemon_threads = True

    handler = type("BoundHandler", (Handler,), {"collector": collector})
    return Server((host, port), handler)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=PROG,
        description="Serve the live metrics of every run under the runs root in "
        "the OpenMetrics / Prometheus text format, at /metrics.",
    )
    parser.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        metavar="HOST:PORT",
        help=f"address to serve on (default {DEFAULT_LISTEN}: loopback only)",
    )
    parser.add_argument(
        "--runs-dir",
        metavar="DIR",
        help="runs root (default: $OPERANT_RUNS_DIR, else $XDG_STATE_HOME/operant/runs)",
    )
    parser.add_argument(
        "--keep-finished",
        type=float,
        default=DEFAULT_KEEP_FINISHED_S,
        metavar="SECONDS",
        help="keep exporting a finished, failed or crashed run this long after "
        f"its last heartbeat (default {DEFAULT_KEEP_FINISHED_S:.0f}; inf: as long as its "
        "files stay)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        host, port = parse_listen(args.listen)
    except ValueError as error:
        print(f"{PROG}: {error}", file=sys.stderr)
        return 2
    if math.isnan(args.keep_finished) or args.keep_finished < 0:
        print(
            f"{PROG}: --keep-finished must be a non-negative number of seconds (inf: forever)",
            file=sys.stderr,
        )
        return 2
    root = runs.runs_root(args.runs_dir)
    problem = runs.root_problem(root)
    if problem is not None:  # a root that does not exist yet is fine: runs appear later
        print(f"{PROG}: runs root {root}: {problem}; pass --runs-dir a directory", file=sys.stderr)
        return 2
    collector = Collector(root, args.keep_finished)
    try:
        server = make_server(host, port, collector)
    except OSError as error:
        # The host's environment (a port taken, an address not on this host): bad input.
        print(
            f"{PROG}: cannot listen on {args.listen}: {error.strerror or error}; choose "
            "another --listen HOST:PORT",
            file=sys.stderr,
        )
        return 2

    def stop(signum: int, frame: FrameType | None) -> None:
        raise _Stop

    previous = {signum: signal.signal(signum, stop) for signum in (signal.SIGTERM, signal.SIGINT)}
    bound_host, bound_port = server.socket.getsockname()[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    print(
        f"{PROG}: serving http://{shown}:{bound_port}/metrics for the runs under {root}"
        + ("" if root.is_dir() else " (not there yet: runs will appear as they start)"),
        flush=True,
    )
    started = time.monotonic()
    try:
        server.serve_forever(poll_interval=0.5)
    except _Stop:
        pass
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        server.server_close()
        collector.close()
    print(f"{PROG}: stopped after {time.monotonic() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`operant exporter`: the metrics of every run under a runs root, for Prometheus, over HTTP.

    operant exporter [--listen 127.0.0.1:9464] [--runs-dir DIR] [--keep-finished SECONDS]

The metrics are prometheus_client's: a custom collector over the shared read-only reader
(operant.monitor.exporter_metrics, which says how a metrics file's values become metrics),
the exporter's build info, and prometheus_client's own process_* and python_info of this
process. `GET /metrics` answers in OpenMetrics 1.0 when the request's Accept header prefers
`application/openmetrics-text` (Prometheus's does), else in the Prometheus text format 0.0.4,
gzip-compressed when Accept-Encoding allows gzip. It never writes to a run directory, never
signals a trainer, and never imports torch.

Which runs: every run whose status is running or stalled, and every finished, failed or
crashed one for `--keep-finished` seconds (default 600) after its last heartbeat, so the
scrape after a run ends still shows how it ended. A resumed run (a new metrics file in the same
directory) is shown again at once.

The HTTP server is this module's, not prometheus_client's `start_http_server`, which was
measured (prometheus_client 0.26, 2026-11-29) to keep a stalled client's connection and thread
for ever (200 slowloris connections: 200 threads, none released after 12 s), to answer a
garbled request line and an unknown protocol version with a bare HTML body without a status
line, and to serve the metrics at every path (`/nothing` got 200). Here anything but
`GET`/`HEAD` of `/metrics` or `/` gets a 4xx answer (404 unknown path, 405 other methods, 400 a
malformed request), counted in operant_exporter_bad_requests_total, and a client that stalls is
dropped after 10 s. It listens on loopback by default; the systemd unit
(deploy/operant-exporter.service) keeps it there.
"""

from __future__ import annotations

import argparse
import gzip
import ipaddress
import math
import signal
import socket
import sys
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector
from prometheus_client.exposition import generate_latest, gzip_accepted
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest

from operant.monitor.exporter_metrics import RunsCollector
from operant.shared import runs
from operant.shared.cli_parser import OneLineParser

PROG = "operant exporter"
DEFAULT_LISTEN = "127.0.0.1:9464"
DEFAULT_KEEP_FINISHED_S = 600.0
OPENMETRICS_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"
PROMETHEUS_TYPE = "text/plain; version=0.0.4; charset=utf-8"
CLIENT_TIMEOUT_S = 10.0


class _Stop(Exception):
    """Raised by the SIGTERM/SIGINT handler to leave serve_forever()."""


def wants_openmetrics(accept: str | None) -> bool:
    """Whether an Accept header prefers OpenMetrics to the Prometheus text format: its
    highest q for application/openmetrics-text is above 0 and not below text/plain's (or a
    wildcard's, where text/plain is not named). Prometheus's own header asks for OpenMetrics
    first; one that ranks text/plain higher gets text. (prometheus_client's choose_encoder
    ignores q: it serves OpenMetrics to any header that names it.)"""
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


def make_registry(collector: RunsCollector) -> CollectorRegistry:
    """The runs' metrics and this process's own (process_*, python_info)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    return registry


def render(registry: object, openmetrics: bool) -> bytes:
    """One scrape's exposition of `registry` (anything with collect())."""
    return (openmetrics_latest if openmetrics else generate_latest)(registry)  # type: ignore[arg-type]


# --- HTTP ----------------------------------------------------------------------------------

LANDING = b"Operant exporter: the metrics of the runs under this host's runs root are at /metrics\n"


class Handler(BaseHTTPRequestHandler):
    server_version = "operant-exporter"
    # No HTTP/0.9: its answers have no status line, so a garbled request would get a bare
    # body; every answer here says its status.
    default_request_version = "HTTP/1.0"
    timeout = CLIENT_TIMEOUT_S
    collector: RunsCollector  # set on the subclass made by make_server
    registry: CollectorRegistry

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
                body = render(self.registry, openmetrics)
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
        compressed = gzip_accepted(self.headers.get("Accept-Encoding", ""))
        if compressed:
            body = gzip.compress(body, compresslevel=6)
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", content_type)
        if compressed:
            self.send_header("Content-Encoding", "gzip")
        self.send_header("Vary", "Accept, Accept-Encoding")
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
            self.collector.count_bad_request()
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


def make_server(host: str, port: int, collector: RunsCollector) -> ThreadingHTTPServer:
    try:
        family = 6 if isinstance(ipaddress.ip_address(host), ipaddress.IPv6Address) else 4
    except ValueError:
        family = 4  # a host name: IPv4 resolution

    class Server(ThreadingHTTPServer):
        address_family = socket.AF_INET6 if family == 6 else socket.AF_INET
        daemon_threads = True
        # socketserver's default backlog of 5 left a burst of clients (100 at once, in the
        # tests) waiting out the kernel's SYN retransmits, 1 s and then 3 s, before a scrape.
        request_queue_size = 128

    handler = type(
        "BoundHandler", (Handler,), {"collector": collector, "registry": make_registry(collector)}
    )
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
    collector = RunsCollector(root, args.keep_finished)
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

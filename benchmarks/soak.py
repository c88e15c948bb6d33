"""The chaos soak (issue 41): the real stack under seeded random faults, watched by a real
Prometheus, with clock-independent checks at the end.

    python benchmarks/soak.py --duration 3600 --env MinAtar-Breakout-v1 --seed 1   # the hour
    python benchmarks/soak.py --duration 240 --gap 8 20 --seed 1                   # a short one

The stack: `operant-train --resume auto` under a supervisor that restarts it as systemd's
unit would (after `--restart-delay` seconds; exit 0 ends it; exit 75, a full disk, waits until
the disk has room; a damaged newest checkpoint is the trainer's own business: `--resume auto`
falls back to the newest one that reads and sets the damaged one aside, and the report counts
those fallbacks; an exit 2 would still get the documented manual fallback, counted as an
operator's recovery), `operant monitor` in tmux, `operant exporter`, and Debian's Prometheus
scraping it every second and evaluating deploy/prometheus/operant-alerts.yml every second. As
root the runs root is a tmpfs of `--disk-mib` MiB, so the disk can fill; else a plain folder
and no disk fault.

Faults, one every `--gap MIN MAX` seconds (seeded): SIGKILL and SIGTERM of the trainer, SIGKILL
of the monitor and of the exporter (restarted at once), SIGSTOP/SIGCONT of the trainer for
`--stop-s` seconds (beyond OperantRunStalled's 30 s), a disk that fills for `--full-s` seconds
and empties, a crash that leaves the checkpoint a restart takes damaged (a flipped byte), a
deleted `latest` (the runs root's link and the checkpoints' pointer).

The checks (exit 1 if one fails): progress.jsonl holds every update from 1 to the last exactly
once, apart from the updates redone after a kill (counted); every checkpoint left reads
(digest checked); the final policy evaluates; Prometheus's increase() of
operant_trained_steps_total (the run's count over all its processes: a resumed process
continues it, so no restart resets it) over the soak, plus the series' first sample (which
increase() cannot count: nothing before it to compare with), is within 1% of the steps the
trainer processes published (read from each process's metrics file when it ended); every fault
an alert covers fired that alert, and no alert fired without a fault. Prints one JSON report.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

from operant.shared.reader import MetricsReader

REPO = Path(__file__).resolve().parent.parent
RULES = REPO / "deploy" / "prometheus" / "operant-alerts.yml"
BIN = Path(sys.executable).parent
RUN_ID = "soak"
EXPECTED = {
    "kill": {"OperantRunCrashed"},
    "corrupt": {"OperantRunCrashed"},
    "stop": {"OperantRunStalled"},
    "fill": {"OperantDiskFull"},
}
"""Faults an alert covers: the alert each must fire."""
SEEN = {
    "kill": 'operant_run_status{status="crashed"} == 1',
    "corrupt": 'operant_run_status{status="crashed"} == 1',
    "stop": 'operant_run_status{status="stalled"} == 1',
    "fill": 'operant_run_info{warning=~".+"}'
    ' or operant_run_reason_info{reason=~"the disk is full.*"}',
}
"""What Prometheus scrapes when each of those faults happens (the alert's condition): so a
fault whose alert was still firing from an earlier one shows it was seen all the same."""
ALLOWED = {**EXPECTED, "fill": {"OperantDiskFull", "OperantRunFailed"}}
"""Alerts each fault may fire (a full disk that refuses progress.jsonl fails the run)."""
FAULTS = (
    "kill",
    "term",
    "kill-monitor",
    "kill-exporter",
    "stop",
    "fill",
    "corrupt",
    "delete-latest",
)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Stack:
    """The processes of the soak, each restartable."""

    def __init__(self, args: argparse.Namespace, work: Path, root: Path):
        self.args, self.work, self.root = args, work, root
        self.exporter_port, self.prometheus_port = free_port(), free_port()
        self.trainer: subprocess.Popen | None = None
        self.exporter: subprocess.Popen | None = None
        self.prometheus: subprocess.Popen | None = None
        self.tmux = ["tmux", "-L", f"soak-{os.getpid()}"]

    def _log(self, name: str):
        return open(self.work / f"{name}.log", "ab")  # noqa: SIM115 (the child keeps it)

    def start_trainer(self) -> None:
        args = self.args
        command = [str(BIN / "operant-train"), "--env", args.env, "--run-id", RUN_ID,
                   "--runs-dir", str(self.root), "--resume", "auto", "--quiet",
                   "--total-steps", str(2**40), "--seed", str(args.seed),
                   "--set", "checkpoint.every_seconds=5", "--set", "checkpoint.keep=3",
                   *args.trainer_args]  # fmt: skip
        self.trainer = subprocess.Popen(command, stdout=self._log("trainer"),
                                        stderr=subprocess.STDOUT)  # fmt: skip

    def start_exporter(self) -> None:
        listen = f"127.0.0.1:{self.exporter_port}"
        command = [str(BIN / "operant"), "exporter", "--runs-dir", str(self.root),
                   "--listen", listen, "--keep-finished", "inf"]  # fmt: skip
        self.exporter = subprocess.Popen(command, stdout=self._log("exporter"),
                                         stderr=subprocess.STDOUT)  # fmt: skip

    def start_monitor(self) -> None:
        monitor = f"{BIN / 'operant'} monitor --runs-dir {self.root} {RUN_ID}"
        subprocess.run([*self.tmux, "kill-server"], capture_output=True)
        subprocess.run([*self.tmux, "new-session", "-d", "-x", "120", "-y", "40", monitor],
                       check=True)  # fmt: skip

    def monitor_pid(self) -> int | None:
        listed = subprocess.run([*self.tmux, "list-panes", "-F", "#{pane_pid}"],
                                capture_output=True, text=True)  # fmt: skip
        return int(listed.stdout.split()[0]) if listed.returncode == 0 and listed.stdout else None

    def start_prometheus(self) -> None:
        config = self.work / "prometheus.yml"
        config.write_text(json.dumps({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(RULES)],
            "scrape_configs": [{"job_name": "operant", "static_configs": [
                {"targets": [f"127.0.0.1:{self.exporter_port}"]}]}],
        }))  # fmt: skip
        command = ["prometheus", f"--config.file={config}",
                   f"--storage.tsdb.path={self.work / 'tsdb'}",
                   f"--web.listen-address=127.0.0.1:{self.prometheus_port}"]  # fmt: skip
        self.prometheus = subprocess.Popen(command, stdout=self._log("prometheus"),
                                           stderr=subprocess.STDOUT)  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                self.query("up")
                return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"prometheus did not start: see {self.work / 'prometheus.log'}")

    def wait_scraped(self, timeout: float = 60) -> None:
        """Until Prometheus has scraped the exporter (its first scrape of a new target comes
        seconds after it starts)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(sample["value"][1] == "1" for sample in self.query('up{job="operant"}')):
                return
            time.sleep(0.2)
        raise RuntimeError(f"prometheus never scraped the exporter: see {self.work}")

    def query(self, expr: str, at: float | None = None) -> list:
        params = {"query": expr, **({"time": str(at)} if at is not None else {})}
        url = f"http://127.0.0.1:{self.prometheus_port}/api/v1/query?"
        with urllib.request.urlopen(url + urllib.parse.urlencode(params), timeout=30) as answer:
            return json.load(answer)["data"]["result"]

    def query_range(self, expr: str, start: float, end: float, step: float) -> list:
        params = {"query": expr, "start": str(start), "end": str(end), "step": str(step)}
        url = f"http://127.0.0.1:{self.prometheus_port}/api/v1/query_range?"
        with urllib.request.urlopen(url + urllib.parse.urlencode(params), timeout=60) as answer:
            return json.load(answer)["data"]["result"]

    def stop_all(self) -> None:
        subprocess.run([*self.tmux, "kill-server"], capture_output=True)
        for process in (self.trainer, self.exporter, self.prometheus):
            if process is not None and process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


class Soak:
    """The supervisor, the fault injector and their bookkeeping."""

    def __init__(self, stack: Stack, args: argparse.Namespace):
        self.stack, self.args = stack, args
        self.rng = random.Random(args.seed)
        self.run_dir = stack.root / RUN_ID
        self.faults: list[dict] = []
        self.counts: dict[str, int] = {}
        self.trained = 0
        self.updates_trained = 0
        self.processes_that_trained = 0
        self.counted: set[tuple[int, int]] = set()
        self.restarts = 0
        self.operator_recoveries = 0
        self.exits: dict[str, int] = {}
        self.filler = stack.root / ".filler"
        self.corrupted: set[str] = set()
        self.last_exit = 0

    def account(self) -> None:
        """Add the steps the ended trainer published, once per metrics file."""
        path = self.run_dir / "metrics.bin"
        try:
            with MetricsReader(path) as reader:
                snapshot = reader.snapshot()
        except Exception:  # noqa: BLE001 (no file yet, or a half-made one: nothing trained)
            return
        identity = (os.stat(path).st_ino, snapshot.created_wall_ns)
        if identity not in self.counted:
            self.counted.add(identity)
            self.trained += snapshot.counters.get("process_steps", 0)
            self.updates_trained += snapshot.counters.get("process_updates", 0)
            self.processes_that_trained += snapshot.counters.get("process_updates", 0) > 0

    def supervise(self) -> None:
        """Restart an ended trainer as systemd would (after the delay it waited)."""
        trainer = self.stack.trainer
        if trainer is not None:
            if trainer.poll() is None:
                return
            code = trainer.returncode
            self.exits[str(code)] = self.exits.get(str(code), 0) + 1
            self.account()
            self.stack.trainer = None
            if code == 2:
                self._fall_back()
            self.last_exit = code
        if self.last_exit == 75 and self.filler.exists():
            return  # not restarted into the same full disk: the fill fault empties it
        time.sleep(self.args.restart_delay)
        self.restarts += 1
        self.stack.start_trainer()

    def _fall_back(self) -> None:
        """docs/deploy.md section 8: a damaged newest checkpoint is deleted with `latest`,
        and the trainer takes the newest file left. (What the trainer refused is kept first,
        under the work folder's refused-N/, with each file's verdict.)"""
        checkpoints = sorted((self.run_dir / "checkpoints").glob("ckpt-*.pt"))
        self._keep_refused(checkpoints)
        damaged = [path for path in checkpoints if path.name in self.corrupted]
        for path in damaged[-1:] or checkpoints[-1:]:
            path.unlink()
        (self.run_dir / "checkpoints" / "latest").unlink(missing_ok=True)
        self.operator_recoveries += 1

    def _keep_refused(self, checkpoints: list[Path]) -> None:
        from operant.trainer.checkpoint.file_format import load

        kept = self.stack.work / f"refused-{self.operator_recoveries}"
        kept.mkdir()
        verdicts = []
        for path in checkpoints:
            shutil.copy2(path, kept / path.name)
            try:
                load(path)
                verdicts.append(f"{path.name}: reads")
            except Exception as error:  # noqa: BLE001 (the verdict is the finding)
                verdicts.append(f"{path.name}: {error}")
        pointer = self.run_dir / "checkpoints" / "latest"
        named = pointer.read_text() if pointer.exists() else "(no latest)"
        (kept / "verdicts.txt").write_text("\n".join([f"latest: {named.strip()}", *verdicts]))

    def inject(self, kind: str) -> float:
        """Apply one fault; the seconds it was held."""
        stack, trainer = self.stack, self.stack.trainer
        alive = trainer is not None and trainer.poll() is None
        held = 0.0
        if kind in ("kill", "term", "stop") and not alive:
            return -1.0
        if kind == "kill":
            trainer.kill()
            trainer.wait()
        elif kind == "term":
            trainer.terminate()
            trainer.wait(timeout=120)
        elif kind == "stop":
            trainer.send_signal(signal.SIGSTOP)
            held = self._hold(self.args.stop_s)
            trainer.send_signal(signal.SIGCONT)
        elif kind == "kill-monitor":
            pid = stack.monitor_pid()
            if pid is not None:
                os.kill(pid, signal.SIGKILL)
            time.sleep(0.5)
            stack.start_monitor()
        elif kind == "kill-exporter":
            stack.exporter.kill()
            stack.exporter.wait()
            stack.start_exporter()
        elif kind == "fill":
            held = self._fill()
        elif kind == "corrupt":
            return self._corrupt()
        elif kind == "delete-latest":
            (stack.root / "latest").unlink(missing_ok=True)
            (self.run_dir / "checkpoints" / "latest").unlink(missing_ok=True)
        return held

    def _hold(self, seconds: float) -> float:
        """Wait `seconds`, supervising the trainer meanwhile."""
        started = time.monotonic()
        while time.monotonic() - started < seconds:
            time.sleep(0.2)
            self.supervise()
        return seconds

    def _fill(self) -> float:
        usage = shutil.disk_usage(self.stack.root)
        leave = 64 * 1024
        with open(self.filler, "wb") as filler:
            try:
                filler.write(b"\0" * max(0, usage.free - leave))
            except OSError:
                pass
        held = self._hold(self.args.full_s)
        self.filler.unlink()
        return held

    def _corrupt(self) -> float:
        """A crash that leaves the checkpoint a restart would take damaged (a flipped byte,
        as a bad disk would): the trainer is stopped, the checkpoint `latest` names (else the
        newest) gets its middle byte flipped, and the trainer is SIGKILLed, so that its
        restart meets it. (Flipping a checkpoint the trainer then replaces tests nothing.)"""
        from operant.trainer.checkpoint.store import find_checkpoint

        trainer = self.stack.trainer
        alive = trainer is not None and trainer.poll() is None
        if alive:
            trainer.send_signal(signal.SIGSTOP)
            time.sleep(0.2)
        try:
            target = find_checkpoint(self.run_dir / "checkpoints")
        except Exception:  # noqa: BLE001 (a pointer the delete-latest fault left dangling)
            target = None
        if target is not None and target.name not in self.corrupted:  # (a second flip mends)
            with open(target, "r+b") as handle:
                handle.seek(target.stat().st_size // 2)
                byte = handle.read(1)
                handle.seek(-1, os.SEEK_CUR)
                handle.write(bytes([byte[0] ^ 0xFF]))
            self.corrupted.add(target.name)
        if alive:
            trainer.kill()
            trainer.wait()
        return 0.0 if target is not None or alive else -1.0

    def run(self) -> None:
        args = self.args
        kinds = [kind for kind in args.faults if kind != "fill" or args.can_fill]
        end = time.monotonic() + args.duration
        next_fault = time.monotonic() + self.rng.uniform(*args.gap)
        while time.monotonic() < end:
            time.sleep(0.2)
            self.supervise()
            if time.monotonic() < next_fault:
                continue
            kind = self.rng.choice(kinds)
            at = time.time()
            held = self.inject(kind)
            if held >= 0:
                self.faults.append({"kind": kind, "at": at, "held_s": held})
                self.counts[kind] = self.counts.get(kind, 0) + 1
            next_fault = time.monotonic() + self.rng.uniform(*args.gap)


def firing_intervals(stack: Stack, start: float, end: float) -> dict[str, list[list[float]]]:
    """Each alert's firing intervals, as Prometheus evaluated the rules: one list per alert
    name, the spans of each of its series (label sets) apart, so that a second series that
    began while another fired is not hidden in the first's span."""
    step = max(1.0, (end - start) / 5000)
    intervals: dict[str, list[list[float]]] = {}
    for series in stack.query_range('ALERTS{alertstate="firing"}', start, end, step):
        spans: list[list[float]] = []
        for stamp, _ in series["values"]:
            if spans and stamp - spans[-1][1] <= 2 * step:
                spans[-1][1] = stamp
            else:
                spans.append([stamp, stamp])
        intervals.setdefault(series["metric"]["alertname"], []).extend(spans)
    return intervals


def window(fault: dict) -> tuple[float, float]:
    """When an alert may begin for `fault`: from its start (2 s of clock slack) to 90 s after
    it ended (a `for:` clause and the rule's evaluation)."""
    return fault["at"] - 2, fault["at"] + fault["held_s"] + 90


def check_alerts(faults: list[dict], intervals: dict[str, list[list[float]]], stop_s: float):
    """(faults whose alert did not fire, alerts that fired without a fault)."""
    allowed = {**ALLOWED, "stop": {"OperantRunStalled", "OperantRunStuck"}}
    missed = []
    for fault in faults:
        expected = EXPECTED.get(fault["kind"], set())
        if fault["kind"] == "stop" and stop_s < 35:  # shorter than OperantRunStalled's for:
            continue
        low, high = window(fault)
        for name in expected:
            if not any(a <= high and b >= low for a, b in intervals.get(name, [])):
                missed.append({"fault": fault, "alert": name})
    spurious = []
    for name, spans in intervals.items():
        for first, last in spans:
            if not any(
                name in allowed.get(fault["kind"], set())
                and window(fault)[0] <= first <= window(fault)[1]
                for fault in faults
            ):
                spurious.append({"alert": name, "from": first, "to": last})
    return missed, spurious


def check_run(run_dir: Path, corrupted: set[str]) -> dict:
    """progress.jsonl's updates, the checkpoints' digests, the final policy's evaluation."""
    from operant.trainer.checkpoint.file_format import load

    updates, torn = [], []
    for number, line in enumerate((run_dir / "progress.jsonl").open(), 1):
        try:
            updates.append(json.loads(line)["update"])
        except ValueError:
            torn.append(number)
    unreadable, damaged_by_soak = [], []
    checkpoints = sorted((run_dir / "checkpoints").glob("ckpt-*.pt"))
    for path in checkpoints:
        try:
            load(path)
        except Exception as error:  # noqa: BLE001 (any refusal is the finding)
            (damaged_by_soak if path.name in corrupted else unreadable).append(f"{path}: {error}")
    evaluation = subprocess.run(
        [str(BIN / "operant"), "eval", str(run_dir), "--episodes", "3", "--json"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    return {
        "updates": len(updates),
        "every_update_once": not torn and updates == list(range(1, len(updates) + 1)),
        "torn_lines": torn,
        "checkpoints": len(checkpoints),
        "unreadable_checkpoints": unreadable,
        "damaged_by_the_soak_left": damaged_by_soak,
        "set_aside_by_the_trainer": sorted(
            path.name for path in (run_dir / "checkpoints").glob("*.damaged")
        ),
        "evaluates": evaluation.returncode == 0,
        "evaluation": evaluation.stdout.strip()[-400:] or evaluation.stderr.strip()[-400:],
    }


def runs_root(work: Path, args: argparse.Namespace) -> tuple[Path, bool]:
    """A tmpfs of --disk-mib as root (so the disk can fill), else a plain folder."""
    root = work / "runs"
    root.mkdir()
    if os.geteuid() == 0:
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={args.disk_mib}m", "tmpfs", str(root)],
            capture_output=True,
        )  # fmt: skip
        if mounted.returncode == 0:
            return root, True
    return root, False


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=3600.0, help="seconds of faults")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--gap", type=float, nargs=2, default=(30.0, 90.0), metavar=("MIN", "MAX"))
    parser.add_argument("--env", default="MinAtar-Breakout-v1")
    parser.add_argument("--faults", default=",".join(FAULTS), help="a comma-separated subset")
    parser.add_argument("--stop-s", type=float, default=40.0, help="SIGSTOP held this long")
    parser.add_argument("--full-s", type=float, default=20.0, help="the disk kept full this long")
    parser.add_argument("--restart-delay", type=float, default=3.0)
    parser.add_argument("--disk-mib", type=int, default=256)
    parser.add_argument("--trainer-arg", dest="trainer_args", action="append", default=[])
    parser.add_argument("--work", help="keep the soak's files here (default: a temporary folder)")
    args = parser.parse_args(argv)
    args.faults = [kind for kind in args.faults.split(",") if kind]
    unknown = set(args.faults) - set(FAULTS)
    if unknown or not args.faults:
        parser.error(f"--faults: choose from {', '.join(FAULTS)}")
    return args


def wait_for_updates(run_dir: Path, count: int, after: float = 0.0, timeout: float = 300) -> None:
    """Until progress.jsonl holds `count` lines and was written after `after` (a time)."""
    deadline = time.monotonic() + timeout
    progress = run_dir / "progress.jsonl"
    while time.monotonic() < deadline:
        try:
            if progress.stat().st_mtime > after and progress.read_bytes().count(b"\n") >= count:
                return
        except FileNotFoundError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"no training in {run_dir}")


def wait_for_own_update(run_dir: Path, since_ns: int, timeout: float = 300) -> None:
    """Until a trainer started after `since_ns` (its metrics file's creation) has finished an
    update of its own."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with MetricsReader(run_dir / "metrics.bin") as reader:
                snapshot = reader.snapshot()
            if snapshot.created_wall_ns > since_ns and snapshot.counters["process_updates"]:
                return
        except Exception:  # noqa: BLE001 (being replaced: look again)
            pass
        time.sleep(0.2)
    raise RuntimeError(f"the restarted trainer made no update in {run_dir}")


def count_steps(stack: Stack, started: float, ended: float) -> dict:
    """Prometheus's count of the steps trained over the soak: increase() of the run's
    trained-steps counter from its first sample to its last exactly (increase() extrapolates a
    window's ends by up to half a scrape interval of the average rate, which is no step
    trained), plus the first sample (what the counter held then: nothing earlier to compare
    with); and, for reference, the plain increase() over the whole window."""
    window = int(ended - started) + 5
    series = f'operant_trained_steps_total{{run="{RUN_ID}"}}'
    samples = stack.query(f"{series}[{window}s]", at=ended)[0]["values"]
    (first_at, first_text), last_at = samples[0], samples[-1][0]
    span_ms = round((last_at - first_at) * 1000)
    result = stack.query(f"sum(increase({series}[{span_ms}ms]))", at=last_at)
    plain = stack.query(f"sum(increase({series}[{window}s]))", at=ended)
    return {
        "increase": float(result[0]["value"][1]) if result else 0.0,
        "first": float(first_text),
        "plain": float(plain[0]["value"][1]) if plain else 0.0,
        "samples": len(samples),
    }


def finish(stack: Stack, soak: Soak, started: float) -> dict:
    """End the run cleanly, let Prometheus scrape its end, and run the checks."""
    before = time.time_ns()
    alive = stack.trainer is not None and stack.trainer.poll() is None
    soak.supervise()  # a trainer the last fault ended starts again, as under systemd
    if soak.filler.exists():
        soak.filler.unlink()
        soak.supervise()
    if not alive:
        wait_for_own_update(soak.run_dir, before)
    stack.trainer.terminate()  # the run's end: a clean stop with a checkpoint
    stack.trainer.wait(timeout=300)
    soak.account()
    time.sleep(3)  # a few scrapes of the final state
    ended = time.time()
    steps = count_steps(stack, started, ended)
    intervals = firing_intervals(stack, started, ended)
    missed, spurious = check_alerts(soak.faults, intervals, soak.args.stop_s)
    run = check_run(soak.run_dir, soak.corrupted)
    counters = MetricsReader(soak.run_dir / "metrics.bin").snapshot().counters
    counted = steps["increase"] + steps["first"]
    trained = soak.trained
    steps_ok = trained > 0 and abs(counted - trained) <= 0.01 * trained
    log = (stack.work / "trainer.log").read_text(errors="replace")
    return {
        "seconds": round(ended - started, 1),
        "faults": soak.counts,
        "alerts_fired": alerts_per_fault(soak.faults, intervals),
        "fault_seen_by_prometheus": seen_per_fault(stack, soak.faults, started, ended),
        "trainer_exits": soak.exits,
        "restarts": soak.restarts,
        "restarts_that_trained_again": soak.processes_that_trained - 1,
        "checkpoint_fallbacks": log.count("the newest checkpoint that reads"),
        "operator_recoveries": soak.operator_recoveries,
        "steps_trained": trained,
        "final_global_step": counters["global_step"],
        "steps_redone": trained - counters["global_step"],
        "updates_trained": soak.updates_trained,
        "updates_redone": soak.updates_trained - counters["updates"],
        "trained_steps_counter": counters.get("trained_steps"),
        "prometheus_increase": round(steps["increase"]),
        "first_sample": round(steps["first"]),
        "prometheus_samples": steps["samples"],
        "increase_error_percent": round(100 * (counted - trained) / max(1, trained), 3),
        "plain_increase_error_percent": round(
            100 * (steps["plain"] - trained) / max(1, trained), 3
        ),
        "increase_within_1_percent": steps_ok,
        "alerts_missed": missed,
        "alerts_without_fault": spurious,
        "monitor_alive": stack.monitor_pid() is not None,
        **run,
        "ok": bool(
            steps_ok and run["every_update_once"] and not run["unreadable_checkpoints"]
            and run["evaluates"] and not missed and not spurious
        ),
    }  # fmt: skip


def seen_per_fault(stack: Stack, faults: list[dict], start: float, end: float) -> dict:
    """For each fault kind in SEEN: its faults, and how many of them Prometheus scraped the
    condition of (a sample within 30 s after the fault began)."""
    seen: dict[str, list[int]] = {}
    for kind, expr in SEEN.items():
        stamps = [
            stamp
            for series in stack.query_range(expr, start, end, 1.0)
            for stamp, _ in series["values"]
        ]
        for fault in faults:
            if fault["kind"] == kind:
                row = seen.setdefault(kind, [0, 0])
                row[0] += 1
                row[1] += any(fault["at"] <= stamp <= fault["at"] + 30 for stamp in stamps)
    return {kind: f"{hits} of {total}" for kind, (total, hits) in seen.items()}


def alerts_per_fault(faults: list[dict], intervals: dict[str, list[list[float]]]) -> dict:
    """For each fault kind: its faults, and for each alert how many of them it fired for. A
    firing belongs to the latest fault whose window holds its start (none: "without a
    fault"); a fault its alert covers that began no firing of its own, because the alert was
    still firing (held by its rule) from an earlier fault, counts under "<alert> (firing
    already)"."""
    table: dict[str, dict[str, int]] = {}
    began: dict[int, set[str]] = {}
    for name, spans in intervals.items():
        for first, _ in spans:
            owners = [n for n, fault in enumerate(faults) if window(fault)[0] <= first]
            owners = [n for n in owners if first <= window(faults[n])[1]]
            began.setdefault(owners[-1] if owners else -1, set()).add(name)
    for number, fault in enumerate(faults):
        row = table.setdefault(fault["kind"], {"faults": 0})
        row["faults"] += 1
        for name in began.get(number, set()):
            row[name] = row.get(name, 0) + 1
        low, high = window(fault)
        for name in EXPECTED.get(fault["kind"], set()) - began.get(number, set()):
            if any(a <= high and b >= low for a, b in intervals.get(name, [])):
                row[f"{name} (firing already)"] = row.get(f"{name} (firing already)", 0) + 1
    if -1 in began:
        table["without a fault"] = {name: 1 for name in began[-1]}
    return table


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    for tool in ("prometheus", "tmux"):
        if shutil.which(tool) is None:
            print(
                f"soak: {tool} is missing (Debian: apt-get install prometheus tmux)",
                file=sys.stderr,
            )
            return 2
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="operant-soak-"))
    work.mkdir(parents=True, exist_ok=True)
    root, args.can_fill = runs_root(work, args)
    stack = Stack(args, work, root)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(143))  # clean up as on Ctrl-C
    try:
        stack.start_prometheus()
        stack.start_exporter()
        stack.wait_scraped()  # so the trained-steps series starts near 0
        started = time.time() - 1  # before the first trainer: its steps are in the window
        stack.start_trainer()
        wait_for_updates(root / RUN_ID, 1)
        stack.start_monitor()
        soak = Soak(stack, args)
        soak.run()
        report = finish(stack, soak, started)
    finally:
        stack.stop_all()
        for _ in range(50 if args.can_fill else 0):  # the monitor takes a moment to go
            if subprocess.run(["umount", str(root)], capture_output=True).returncode == 0:
                break
            time.sleep(0.2)
    report["work"] = str(work)
    (work / "faults.json").write_text(json.dumps(soak.faults, indent=1))
    print(json.dumps(report, indent=1))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())

"""A fork server for tests that start many trainers: torch and operant are imported once, and
each trainer is a forked child that runs operant-train's real `main(argv)` in a fresh process
(its own pid, signal handlers, locks, metrics file, exit status). What it skips is only the
seconds of imports each `python -m operant.trainer.run.main` would pay, which is what makes dozens
of SIGKILL trials affordable.

Protocol (JSON lines): the server prints {"ready": pid}; for each request
{"argv": [...], "env": {...}, "stdout": path, "stderr": path, "poison_after_update": N?} it
forks, prints {"pid": child}, waits, and prints {"pid": child, "returncode": status} (negative
for a signal, as subprocess does). One child at a time.

`poison_after_update` (tests of the NaN guard only) fills a policy parameter with NaN at the end
of update N, as a diverging update would.

Use from tests: `ForkServer()` as a context manager; `start(...)` returns the child's pid,
`wait()` its exit status.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import traceback
from pathlib import Path

from signal_defaults import default_signals


def _poison(after_update: int) -> None:
    import torch

    from operant.trainer.loop.train import Trainer

    original = Trainer.check_finite

    # Poisoned where the loop's NaN guard looks, just before it looks (wherever it is called).
    def check_finite(self):
        if self.update == after_update:
            with torch.no_grad():
                next(self.policy.parameters()).fill_(float("nan"))
        original(self)

    Trainer.check_finite = check_finite


def _child(request: dict) -> None:
    code = 1
    try:
        os.environ.update(request.get("env", {}))
        for stream, name in ((1, "stdout"), (2, "stderr")):
            fd = os.open(request[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, stream)
            os.close(fd)
        fd = os.open(os.devnull, os.O_RDONLY)
        os.dup2(fd, 0)
        os.close(fd)
        if request.get("poison_after_update"):
            _poison(int(request["poison_after_update"]))
        from operant.trainer.run.main import main

        code = main(request["argv"])
    except SystemExit as error:  # argparse's usage errors
        code = error.code if isinstance(error.code, int) else 1
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def serve() -> None:
    # Everything a trainer imports, imported once; no torch op runs here (fork-safety).
    # torch.optim imports dynamo lazily, when the first optimizer is built: seconds.
    import torch._dynamo  # noqa: F401

    import operant.cext.cartpole  # noqa: F401
    import operant.cext.metrics  # noqa: F401
    import operant.envs  # noqa: F401
    import operant.trainer.loop.train  # noqa: F401
    import operant.trainer.run.main  # noqa: F401
    import operant.trainer.run.session  # noqa: F401
    import operant.trainer.services.telemetry  # noqa: F401

    out = sys.stdout
    out.write(json.dumps({"ready": os.getpid()}) + "\n")
    out.flush()
    for line in sys.stdin:
        request = json.loads(line)
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(request)
        out.write(json.dumps({"pid": pid}) + "\n")
        out.flush()
        _, status = os.waitpid(pid, 0)
        out.write(json.dumps({"pid": pid, "returncode": os.waitstatus_to_exitcode(status)}) + "\n")
        out.flush()


class ForkServer:
    """The test side: one server process, trainers started one at a time."""

    def __init__(self) -> None:
        # Trainers start as from an interactive shell, whatever the test run inherited.
        self.process = subprocess.Popen(
            [sys.executable, __file__],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
            preexec_fn=default_signals,
        )
        ready = json.loads(self.process.stdout.readline())
        assert "ready" in ready, ready
        self.pid: int | None = None
        self.count = 0

    def start(
        self,
        argv: list[str],
        logs: Path,
        env: dict[str, str] | None = None,
        poison_after_update: int | None = None,
    ) -> int:
        """Start `operant-train argv`; its stdout/stderr go to logs.out / logs.err."""
        assert self.pid is None, "one trainer at a time"
        self.count += 1
        self.stdout, self.stderr = logs.with_suffix(".out"), logs.with_suffix(".err")
        request = {
            "argv": [str(arg) for arg in argv],
            "env": env or {},
            "stdout": str(self.stdout),
            "stderr": str(self.stderr),
            "poison_after_update": poison_after_update,
        }
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        self.pid = json.loads(self.process.stdout.readline())["pid"]
        return self.pid

    def wait(self, timeout: float = 120.0) -> int:
        """The trainer's exit status; one that outlives `timeout` is killed and fails the test."""
        timed_out = threading.Event()

        def kill() -> None:
            timed_out.set()
            os.kill(pid, signal.SIGKILL)

        pid = self.pid
        killer = threading.Timer(timeout, kill)
        killer.start()
        try:
            reply = json.loads(self.process.stdout.readline())
        finally:
            killer.cancel()
        assert reply["pid"] == pid, reply
        self.pid = None
        assert not timed_out.is_set(), f"the trainer did not exit within {timeout} s"
        return reply["returncode"]

    def run(self, argv: list[str], logs: Path, **options) -> tuple[int, str, str]:
        self.start(argv, logs, **options)
        code = self.wait()
        return code, self.stdout.read_text(), self.stderr.read_text()

    def close(self) -> None:
        if self.pid is not None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.wait()
        self.process.stdin.close()
        self.process.wait(timeout=30)

    def __enter__(self) -> ForkServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


if __name__ == "__main__":
    serve()

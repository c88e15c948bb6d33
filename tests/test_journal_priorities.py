"""Under systemd, the trainer's warning and failure lines carry their syslog priority, so that
docs/deploy.md's `journalctl -u operant-train@NAME -b -p warning` shows them (journald filed
every line of the stream at info)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

from operant.trainer.run.terminal import JournalStream, to_journal

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_warning_and_failure_lines_carry_their_priority():
    inner = io.StringIO()
    stream = JournalStream(inner)
    print("operant-train: warning: checkpoint of update 9 not written", file=stream)
    print("operant-train: run r resumed at update 2", file=stream)
    print("operant-train[rank 1]: warning: slow", file=stream)
    stream.write("Traceback (most recent call last):\n  File 'x', line 1\nValueError: no\n")
    print("operant-train: training failed: the env raised", file=stream, flush=True)
    assert inner.getvalue().splitlines() == [
        "<4>operant-train: warning: checkpoint of update 9 not written",
        "operant-train: run r resumed at update 2",
        "<4>operant-train[rank 1]: warning: slow",
        "<3>Traceback (most recent call last):",
        "  File 'x', line 1",
        "ValueError: no",
        "<3>operant-train: training failed: the env raised",
    ]


def test_only_the_journals_own_stream_is_prefixed(tmp_path):
    with open(tmp_path / "stderr", "w") as err:
        status = os.fstat(err.fileno())
        stream = f"{status.st_dev}:{status.st_ino}"
        result = subprocess.run(
            [sys.executable, "-m", "operant.trainer.run.main", "--runs-dir", str(tmp_path / "runs"),
             "--set", "policy.kind=cleanrl_ppo:Agent", "--set", "policy.hidden_sizes=[32]",
             "--total-steps", "2048", "--quiet"],
            stderr=err, stdout=subprocess.DEVNULL, cwd=EXAMPLES, timeout=120,
            env={**os.environ, "JOURNAL_STREAM": stream},
        )  # fmt: skip
    assert result.returncode == 0
    lines = (tmp_path / "stderr").read_text().splitlines()
    warnings = [line for line in lines if "warning:" in line]
    assert warnings and all(line.startswith("<4>operant-train: warning: ") for line in warnings)
    assert not to_journal({"JOURNAL_STREAM": "1:2"})  # another file's: a pipe, a terminal

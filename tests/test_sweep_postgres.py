"""Two `operant sweep` processes share one study on a real PostgreSQL server, which the test
starts itself (a private cluster in a temporary directory, on a free port) from Debian's
`postgresql` package; where there is no server to start, the test skips and says why."""

from __future__ import annotations

import glob
import json
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from operant.trainer.sweep import show

pytest.importorskip("optuna")
pytest.importorskip("psycopg")


def _server_bin() -> Path | None:
    """The folder of PostgreSQL's initdb and pg_ctl (Debian keeps them out of PATH)."""
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    found = shutil.which("pg_ctl")
    candidates += [str(Path(found).parent)] if found else []
    for folder in candidates:
        if Path(folder, "initdb").exists() and Path(folder, "pg_ctl").exists():
            return Path(folder)
    return None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A PostgreSQL server of this test's own; its URL."""
    folder = _server_bin()
    if folder is None:
        pytest.skip("PostgreSQL's server is not installed (apt-get install postgresql)")
    as_user: list[str] = []
    owner = None
    if os.geteuid() == 0:  # the server refuses to run as root: as Debian's postgres user
        try:
            owner = pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root, and there is no postgres user to run the server as")
        as_user = ["runuser", "-u", "postgres", "--"]
    home = Path(tempfile.mkdtemp(prefix="operant-pg-"))
    if owner is not None:
        os.chown(home, owner.pw_uid, owner.pw_gid)
    data, port = home / "data", _free_port()
    init = subprocess.run(
        [*as_user, str(folder / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres",
         "--no-sync"],
        capture_output=True, text=True,
    )  # fmt: skip
    options = f"-p {port} -k {home} -c listen_addresses=127.0.0.1 -c fsync=off"
    start = subprocess.run(
        [*as_user, str(folder / "pg_ctl"), "-D", str(data), "-o", options, "-l",
         str(home / "log"), "-w", "-t", "60", "start"],
        capture_output=True, text=True,
    ) if init.returncode == 0 else init  # fmt: skip
    if start.returncode != 0:
        shutil.rmtree(home, ignore_errors=True)
        why = (start.stderr or start.stdout).strip().splitlines()[-1:]
        pytest.skip(f"a PostgreSQL server could not be started here: {why}")
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            [*as_user, str(folder / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
            capture_output=True,
        )
        shutil.rmtree(home, ignore_errors=True)


SWEEP = """
[sweep]
name = "shared"
confirm = 0
n_trials = 6
pruner = "none"
[sweep.objective]
metric = "final_return"
[sweep.params]
"ppo.learning_rate" = { log_uniform = [1e-3, 1e-2] }
[env]
num_envs = 16
[train]
total_steps = 40000
"""


def test_two_sweeps_share_one_postgresql_study(tmp_path: Path, postgres_url: str, capsys) -> None:
    sweep, runs = tmp_path / "s.toml", tmp_path / "runs"
    sweep.write_text(SWEEP)
    command = [sys.executable, "-m", "operant", "sweep", str(sweep), "--runs-dir", str(runs),
               "--storage", postgres_url]  # fmt: skip
    processes = [
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outputs = [process.communicate(timeout=120) for process in processes]
    assert [process.returncode for process in processes] == [0, 0], outputs
    ran = [
        {int(line.split()[1]) for line in out.splitlines() if line.startswith("trial ")}
        for out, _ in outputs
    ]
    assert not ran[0] & ran[1], "a trial was run by both processes"
    assert all(ran), f"one process ran every trial: {ran}"
    arguments = ["shared", "--runs-dir", str(runs), "--storage", postgres_url, "--json"]
    assert show.main([*arguments, "--no-plots"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["complete"] == 6 and len(summary["trials"]) == 6
    assert {row["number"] for row in summary["trials"]} == ran[0] | ran[1]
    run_ids = [row["run_ids"][0] for row in summary["trials"]]
    assert len(set(run_ids)) == 6
    for row in summary["trials"]:
        run_dir = runs / "sweeps" / "shared" / row["run_ids"][0]
        assert "resumes" not in json.loads((run_dir / "run.json").read_text())  # trained once
        last = json.loads((run_dir / "progress.jsonl").read_text().splitlines()[-1])
        assert row["value"] == last["episode_return_mean"]

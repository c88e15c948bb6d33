"""The systemd units in deploy/, checked by systemd's own tools.

docs/deploy.md gives two verify commands, and both run here exactly as written:
- for an installed tree, `systemd-analyze verify operant-train@cartpole.service ...`, run
  against a throwaway root (`--root`): the units are installed in it unchanged, as systemd
  would find them, beside a copy of this host's own unit files (sysinit.target and friends,
  which every service depends on) and stand-in executables at the units' ExecStart paths,
  as a server has the real ones;
- for a checkout, `deploy/verify-units`, with this test run's venv on PATH: the real
  operant-train and operant are what the units' ExecStart resolves to.
Any output at all, warnings included, fails the test. `systemd-analyze security
--offline=yes` scores the same installed units.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DEPLOY = REPO / "deploy"
GUIDE = REPO / "docs" / "deploy.md"
TRAINER_TEMPLATE = "operant-train@.service"
TRAINER = "operant-train@cartpole.service"
EXPORTER = "operant-exporter.service"
NODE_TEMPLATE = "operant-train-node@.service"
NODE = "operant-train-node@cartpole.service"
GPU_DROP_IN = "operant-train-gpu.conf"
MAX_EXPOSURE = 2.0

SYSTEMD_ANALYZE = shutil.which("systemd-analyze")
needs_systemd_analyze = pytest.mark.skipif(
    SYSTEMD_ANALYZE is None, reason="systemd-analyze is not installed"
)


def _host_unit_dir() -> Path:
    for candidate in ("/usr/lib/systemd/system", "/lib/systemd/system"):
        if (Path(candidate) / "sysinit.target").is_file():
            return Path(candidate)
    pytest.skip("no systemd unit directory with sysinit.target on this host")


def _exec_paths(unit: Path) -> list[str]:
    return [
        line.split("=", 1)[1].split()[0]
        for line in unit.read_text().splitlines()
        if line.startswith("ExecStart=")
    ]


@pytest.fixture
def root(tmp_path) -> Path:
    """A file-system root with the units installed as on a server (no drop-ins)."""
    root = tmp_path / "root"
    shutil.copytree(_host_unit_dir(), root / "usr/lib/systemd/system", symlinks=True)
    unit_dir = root / "etc/systemd/system"
    unit_dir.mkdir(parents=True)
    for name in (TRAINER_TEMPLATE, EXPORTER, NODE_TEMPLATE):
        shutil.copy(DEPLOY / name, unit_dir / name)
        for command in _exec_paths(DEPLOY / name):
            stand_in = root / command.lstrip("/")
            stand_in.parent.mkdir(parents=True, exist_ok=True)
            stand_in.write_text("#!/bin/sh\nexit 0\n")
            stand_in.chmod(0o755)
    return root


def _analyze(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SYSTEMD_ANALYZE, f"--root={root}", "--no-pager", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def _verify(root: Path, unit: str) -> str:
    result = _analyze(root, "verify", "--man=no", "--generators=no", unit)
    return (result.stdout + result.stderr).strip()


def _exposure(root: Path, unit: str) -> float:
    result = _analyze(root, "security", "--offline=yes", unit)
    match = re.search(rf"Overall exposure level for {re.escape(unit)}: (\d+\.\d+)", result.stdout)
    assert match, result.stdout + result.stderr
    return float(match.group(1))


def _settings(unit: Path) -> dict[str, list[str]]:
    """Key -> every value it is given, in order (systemd keys may repeat)."""
    settings: dict[str, list[str]] = {}
    for line in unit.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith(("#", ";", "[")):
            key, value = line.split("=", 1)
            settings.setdefault(key, []).append(value)
    return settings


def _documented(prefix: str) -> list[str]:
    """The command line in docs/deploy.md's shell blocks that starts with `prefix`."""
    blocks = re.findall(r"^```sh\n(.*?)^```", GUIDE.read_text(), re.MULTILINE | re.DOTALL)
    (line,) = [line for block in blocks for line in block.splitlines() if line.startswith(prefix)]
    return shlex.split(line)


@needs_systemd_analyze
def test_the_documented_verify_of_installed_units_says_nothing(root):
    command = _documented("systemd-analyze verify")
    assert command[2:] == [TRAINER, EXPORTER]
    result = subprocess.run(
        [SYSTEMD_ANALYZE, f"--root={root}", *command[1:]],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


def _verify_checkout(*args: str) -> subprocess.CompletedProcess[str]:
    """docs/deploy.md's checkout command, run from the repository's root with this venv's
    operant-train first on PATH, as after activating the venv."""
    command = _documented("deploy/verify-units")
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    return subprocess.run(
        [*command, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )


@needs_systemd_analyze
def test_the_documented_verify_of_a_checkout_passes():
    result = _verify_checkout()
    bin_dir = Path(sys.executable).parent
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.splitlines() == [
        f"ok: operant-train@.service, operant-exporter.service (ExecStart in {bin_dir})",
        "ok: operant-train-node@.service (a node of a multi-node job)",
        "ok: operant-train@.service with operant-train-gpu.conf",
    ]


@needs_systemd_analyze
def test_the_checkout_verify_fails_on_any_warning(tmp_path):
    copy = tmp_path / "deploy"
    shutil.copytree(DEPLOY, copy)
    conf = copy / GPU_DROP_IN
    lines = conf.read_text().splitlines()
    line = lines.index("DevicePolicy=closed")
    lines[line] = "DevicePolicyy=closed"
    conf.write_text("\n".join(lines) + "\n")
    result = _verify_checkout(str(copy))
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert lines[0].startswith("ok: operant-train@.service, operant-exporter.service")
    assert lines[1] == "ok: operant-train-node@.service (a node of a multi-node job)"
    assert lines[2:] == [
        "FAILED: operant-train@.service with operant-train-gpu.conf",
        f"operant-train@.service.d/gpu.conf:{line + 1}: Unknown key 'DevicePolicyy' in "
        "section [Service], ignoring.",
    ]


@needs_systemd_analyze
def test_the_checkout_verify_says_what_it_needs():
    result = subprocess.run(
        [str(DEPLOY / "verify-units")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, PATH="/usr/bin:/bin"),
    )
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        "verify-units: operant-train is not on PATH: activate the venv Operant is installed in\n"
    )


@needs_systemd_analyze
def test_trainer_with_gpu_drop_in_verifies_without_any_output(root):
    drop_ins = root / "etc/systemd/system" / f"{TRAINER_TEMPLATE}.d"
    drop_ins.mkdir()
    shutil.copy(DEPLOY / GPU_DROP_IN, drop_ins / "gpu.conf")
    assert _verify(root, TRAINER) == ""
    assert _exposure(root, TRAINER) <= MAX_EXPOSURE


@needs_systemd_analyze
def test_verify_reports_what_it_should(root):
    # The empty-output assertions above mean something only if verify speaks up here.
    unit_dir = root / "etc/systemd/system"
    text = (unit_dir / TRAINER_TEMPLATE).read_text()
    (unit_dir / TRAINER_TEMPLATE).write_text(text.replace("WatchdogSec=", "WatchdogSecs="))
    assert "Unknown key 'WatchdogSecs' in section [Service]" in _verify(root, TRAINER)
    (unit_dir / TRAINER_TEMPLATE).write_text(text)
    (root / "opt/operant/venv/bin/operant-train").unlink()
    assert "/opt/operant/venv/bin/operant-train is not executable" in _verify(root, TRAINER)


@needs_systemd_analyze
@pytest.mark.parametrize("unit", [TRAINER, EXPORTER, NODE])
def test_security_exposure_is_low(root, unit):
    assert _exposure(root, unit) <= MAX_EXPOSURE


def test_trainer_unit_settings_the_trainer_relies_on():
    settings = _settings(DEPLOY / TRAINER_TEMPLATE)
    assert settings["ExecStart"] == [
        "/opt/operant/venv/bin/operant-train --config /etc/operant/%i.toml "
        "--resume auto --log-format json"
    ]
    expected = {
        "Type": ["notify"],
        "NotifyAccess": ["main"],
        "Restart": ["on-failure"],
        "KillMode": ["mixed"],
        "KillSignal": ["SIGTERM"],
        "User": ["operant"],
        "Group": ["operant"],
        "UMask": ["0027"],
        "StateDirectory": ["operant"],
        "ProtectSystem": ["strict"],
        "CapabilityBoundingSet": [""],
        "RestrictAddressFamilies": ["AF_UNIX AF_INET AF_INET6"],
    }
    assert {key: settings.get(key) for key in expected} == expected
    assert "OPERANT_RUNS_DIR=%S/operant/runs" in settings["Environment"]
    assert "MemoryDenyWriteExecute" not in settings  # breaks PyTorch's and Triton's JIT
    assert len(settings["WatchdogSec"]) == 1 and len(settings["TimeoutStopSec"]) == 1


def test_exporter_reads_the_runs_root_the_trainer_writes():
    trainer = _settings(DEPLOY / TRAINER_TEMPLATE)
    exporter = _settings(DEPLOY / EXPORTER)
    (command,) = exporter["ExecStart"]
    assert command.split()[1:] == [
        "exporter",
        "--listen",
        "127.0.0.1:9464",
        "--runs-dir",
        "%S/operant/runs",
    ]
    assert "OPERANT_RUNS_DIR=%S/operant/runs" in trainer["Environment"]
    assert exporter["SupplementaryGroups"] == trainer["Group"]
    assert "StateDirectory" not in exporter


def test_example_config_parses():
    tomllib = pytest.importorskip("tomllib")
    config = tomllib.loads((DEPLOY / "cartpole.toml").read_text())
    assert config["env"]["id"] == "CartPole-v1"
    assert config["train"]["total_steps"] == 10_000_384
    assert config["train"]["run_id"] == "cartpole"  # stable, so --resume auto finds it


@needs_systemd_analyze
def test_the_multi_node_unit_verifies_without_any_output(root):
    etc = root / "etc/operant"
    etc.mkdir(parents=True)
    shutil.copy(DEPLOY / "cluster.env", etc / "cartpole.env")
    assert _verify(root, NODE) == ""


def test_the_multi_node_unit_starts_torchrun_through_operant_train():
    settings = _settings(DEPLOY / NODE_TEMPLATE)
    (command,) = settings["ExecStart"]
    words = command.split()
    assert words[0] == "/opt/operant/venv/bin/operant-train"
    flags = dict(zip(words[1::2], words[2::2], strict=False))
    assert flags["--rdzv-endpoint"] == "${RDZV_ENDPOINT}" and flags["--resume"] == "auto"
    assert settings["EnvironmentFile"] == ["/etc/operant/%i.env"]
    assert settings["KillMode"] == ["mixed"] and settings["Type"] == ["exec"]
    env = dict(
        line.split("=", 1)
        for line in (DEPLOY / "cluster.env").read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert {name[2:-1] for name in flags.values() if name.startswith("${")} <= set(env)

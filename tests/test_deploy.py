"""The systemd units in deploy/, checked by systemd's own tools.

`systemd-analyze verify` runs against a throwaway root (`--root`): the units are installed
in it unchanged, as systemd would find them, beside a copy of this host's own unit files
(sysinit.target and friends, which every service depends on) and stand-in executables at
the units' ExecStart paths, because verify refuses a command that does not exist. Any output
at all, warnings included, fails the test. `systemd-analyze security --offline=yes` scores
the same installed units.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
TRAINER_TEMPLATE = "operant-train@.service"
TRAINER = "operant-train@cartpole.service"
EXPORTER = "operant-exporter.service"
GPU_DROP_IN = "operant-train-gpu.conf"
MAX_EXPOSURE = 2.0

SYSTEMD_ANALYZE = shutil.which("systemd-analyze")
needs_systemd_analyze = pytest.mark.skipif(SYSTEMD_ANALYZE is None,
                                           reason="systemd-analyze is not installed")


def _host_unit_dir() -> Path:
    for candidate in ("/usr/lib/systemd/system", "/lib/systemd/system"):
        if (Path(candidate) / "sysinit.target").is_file():
            return Path(candidate)
    pytest.skip("no systemd unit directory with sysinit.target on this host")


def _exec_paths(unit: Path) -> list[str]:
    return [line.split("=", 1)[1].split()[0]
            for line in unit.read_text().splitlines() if line.startswith("ExecStart=")]


@pytest.fixture
def root(tmp_path) -> Path:
    """A file-system root with the units installed as on a server (no drop-ins)."""
    root = tmp_path / "root"
    shutil.copytree(_host_unit_dir(), root / "usr/lib/systemd/system", symlinks=True)
    unit_dir = root / "etc/systemd/system"
    unit_dir.mkdir(parents=True)
    for name in (TRAINER_TEMPLATE, EXPORTER):
        shutil.copy(DEPLOY / name, unit_dir / name)
        for command in _exec_paths(DEPLOY / name):
            stand_in = root / command.lstrip("/")
            stand_in.parent.mkdir(parents=True, exist_ok=True)
            stand_in.write_text("#!/bin/sh\nexit 0\n")
            stand_in.chmod(0o755)
    return root


def _analyze(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SYSTEMD_ANALYZE, f"--root={root}", "--no-pager", *args],
                          capture_output=True, text=True, timeout=60)


def _verify(root: Path, unit: str) -> str:
    result = _analyze(root, "verify", "--man=no", "--generators=no", unit)
    return (result.stdout + result.stderr).strip()


def _exposure(root: Path, unit: str) -> float:
    result = _analyze(root, "security", "--offline=yes", unit)
    match = re.search(rf"Overall exposure level for {re.escape(unit)}: (\d+\.\d+)",
                      result.stdout)
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


@needs_systemd_analyze
@pytest.mark.parametrize("unit", [TRAINER, EXPORTER])
def test_units_verify_without_any_output(root, unit):
    assert _verify(root, unit) == ""


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
@pytest.mark.parametrize("unit", [TRAINER, EXPORTER])
def test_security_exposure_is_low(root, unit):
    assert _exposure(root, unit) <= MAX_EXPOSURE


def test_trainer_unit_settings_the_trainer_relies_on():
    settings = _settings(DEPLOY / TRAINER_TEMPLATE)
    assert settings["ExecStart"] == [
        "/opt/operant/venv/bin/operant-train --config /etc/operant/%i.toml "
        "--resume auto --log-format json"]
    expected = {
        "Type": ["notify"], "NotifyAccess": ["main"], "Restart": ["on-failure"],
        "KillMode": ["mixed"], "KillSignal": ["SIGTERM"], "User": ["operant"],
        "Group": ["operant"], "UMask": ["0027"], "StateDirectory": ["operant"],
        "ProtectSystem": ["strict"], "CapabilityBoundingSet": [""],
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
    assert command.split()[1:] == ["exporter", "--listen", "127.0.0.1:9464",
                                   "--runs-dir", "%S/operant/runs"]
    assert "OPERANT_RUNS_DIR=%S/operant/runs" in trainer["Environment"]
    assert exporter["SupplementaryGroups"] == trainer["Group"]
    assert "StateDirectory" not in exporter


def test_example_config_parses():
    tomllib = pytest.importorskip("tomllib")
    config = tomllib.loads((DEPLOY / "cartpole.toml").read_text())
    assert config["env"]["id"] == "CartPole-v1"
    assert config["train"]["total_steps"] == 10_000_000
    assert config["train"]["run_id"] == "cartpole"  # stable, so --resume auto finds it

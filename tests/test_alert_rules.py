"""deploy/prometheus/operant-alerts.yml: promtool checks the rules and runs their unit tests
(each fault fires its alert as Prometheus evaluates it; a healthy run fires none), and every
metric the rules read is one the exporter serves (a renamed metric would silence an alert)."""

from __future__ import annotations

import math
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from test_record import make_record

from operant.monitor.exporter import render
from operant.monitor.exporter_metrics import RunsCollector
from operant.shared.runs import METRICS_FILE, create_run_dir
from operant.trainer.services.telemetry import Publisher

RULES = Path(__file__).resolve().parent.parent / "deploy" / "prometheus"
needs_promtool = pytest.mark.skipif(
    shutil.which("promtool") is None,
    reason="promtool missing (Debian: apt-get install prometheus; .ci/run installs it as root)",
)


@needs_promtool
def test_promtool_checks_the_rules_and_passes_their_unit_tests():
    checked = subprocess.run(
        ["promtool", "check", "rules", "operant-alerts.yml"],
        cwd=RULES, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert checked.returncode == 0 and "SUCCESS: 10 rules found" in checked.stdout, checked
    tested = subprocess.run(
        ["promtool", "test", "rules", "operant-alerts.test.yml"],
        cwd=RULES, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert tested.returncode == 0 and "SUCCESS" in tested.stdout, tested.stdout + tested.stderr


def test_every_metric_the_rules_read_is_exported(tmp_path):
    rules = (RULES / "operant-alerts.yml").read_text()
    read = set(re.findall(r"\b(operant_[a-z_]+)\b", rules)) - {"operant_run_stuck_after_seconds"}
    alerts = re.findall(r"- alert: (\w+)", rules)
    assert len(alerts) == 10 and len(set(alerts)) == 10
    run_dir = create_run_dir(tmp_path, "run")
    publisher = Publisher(run_dir / METRICS_FILE, "run", "CartPole-v1", "native", "cpu", 10_000)
    collector = RunsCollector(tmp_path, math.inf)
    try:
        publisher.start()
        publisher.publish(make_record())
        running = render(collector, True).decode()
        publisher.fail("non-finite values: policy_loss is nan")  # the NaN guard's words
        failed = render(collector, True).decode()
    finally:
        collector.close()
        publisher.close()
    served = {line.split("{")[0].split(" ")[0] for line in (running + failed).splitlines()}
    assert read <= served, read - served
    assert 'operant_run_stuck{run="run"} 0.0' in running
    assert (
        'operant_run_reason_info{rank="0",reason="non-finite values: policy_loss is nan",'
        'run="run"} 1.0' in failed
    )
    assert (
        "operant_run_stuck_after_seconds" in rules and "operant_run_stuck_after_seconds" in running
    )

"""deploy/: the alert rules pass `promtool check rules` and their own `promtool test rules`, and
the rules and the Grafana dashboard read only metrics jobnik serves."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from jobnik.api.telemetry.metrics import ServerMetrics
from jobnik.api.telemetry.service_metrics import JobnikServiceGauges, QueueMetrics
from jobnik.workers.metrics import WorkerMetrics

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
RULES = DEPLOY / "prometheus" / "alerts.yml"
RULE_TESTS = DEPLOY / "prometheus" / "alerts.test.yml"
DASHBOARD = DEPLOY / "grafana" / "jobnik.json"
OURS = re.compile(r"\b(?:http|jobnik|process)_[a-z0-9_]+\b")
SUFFIXES = {"histogram": ("_bucket", "_count", "_sum"), "counter": ("_total",), "gauge": ("",)}


def served() -> set[str]:
    """Every sample name the server's and a worker's registries can expose, and the metrics
    the server reads from its read models."""
    names = set()
    read_models = (*JobnikServiceGauges.families(), *QueueMetrics.families())  # (no database)
    for registry in (ServerMetrics().registry, WorkerMetrics("any").registry):
        for family in (*registry.collect(), *read_models):
            names.update(family.name + s for s in SUFFIXES.get(family.type, ("",)))
    return names


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.fail("promtool is missing: scripts/test.sh installs Debian's prometheus package")
    return found


def test_the_alert_rules_are_valid_and_pass_their_tests() -> None:
    tool = promtool()

    check = subprocess.run([tool, "check", "rules", str(RULES)], capture_output=True, text=True)
    tested = subprocess.run(
        [tool, "test", "rules", RULE_TESTS.name],
        cwd=RULE_TESTS.parent,
        capture_output=True,
        text=True,
    )

    assert check.returncode == 0, check.stdout + check.stderr
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def rule_expressions() -> Iterator[str]:
    for group in yaml.safe_load(RULES.read_text())["groups"]:
        for rule in group["rules"]:
            yield rule["expr"]


def dashboard_expressions() -> Iterator[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            yield target["expr"]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            yield variable["definition"]


@pytest.mark.parametrize("source", [rule_expressions, dashboard_expressions])
def test_rules_and_dashboard_read_only_metrics_jobnik_serves(source: object) -> None:
    expressions = list(source())  # type: ignore[operator]
    known = served()

    used = {name for expr in expressions for name in OURS.findall(expr)}

    assert expressions
    assert used
    assert used <= known, f"not served: {sorted(used - known)}"

"""deploy/: the alert rules pass `promtool check rules` and their own `promtool test rules`, and
the rules and the Grafana dashboard read only metrics jobnik serves."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
import yaml

from jobnik.api.settings import Settings
from jobnik.api.telemetry.metrics import ServerMetrics
from jobnik.api.telemetry.service_metrics import JobnikServiceGauges, QueueMetrics
from jobnik.scripts.cli import app as cli
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


# -- the container image recipe (built and run by deploy/smoke-image.sh in CI) ----------------

ROOT = DEPLOY.parent
CONTAINERFILE = ROOT / "Containerfile"


def instructions() -> list[tuple[str, str]]:
    """The Containerfile's instructions (continuation lines joined), as (KEYWORD, arguments)."""
    text = re.sub(r"\\\n\s*", " ", CONTAINERFILE.read_text())
    lines = [line.strip() for line in text.splitlines()]
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1])
        for line in lines
        if line and not line.startswith("#")
    ]


def test_the_image_recipe_serves_jobnik_as_a_user_from_a_venv_with_a_health_check() -> None:
    steps = instructions()
    final = steps[max(i for i, (k, _) in enumerate(steps) if k == "FROM") :]
    keys = [k for k, _ in final]
    arguments = {k: a for k, a in final}

    assert ("ARG", "BASE=docker.io/library/python:3.11-slim") in steps  # the public image
    assert all(a.startswith("${BASE}") for k, a in steps if k == "FROM")
    assert json.loads(arguments["ENTRYPOINT"]) == ["jobnik", "serve"]
    assert arguments["USER"] not in ("root", "0")
    assert keys.index("USER") < keys.index("ENTRYPOINT")
    assert "/liveness" in arguments["HEALTHCHECK"]
    assert "JOBNIK_PORT" in arguments["HEALTHCHECK"]  # the port the server listens on
    assert "/opt/jobnik/bin" in arguments["ENV"]  # the package's own venv
    assert "JOBNIK_HOST=0.0.0.0" in arguments["ENV"]


def test_the_image_is_built_from_the_package_sources_alone() -> None:
    ignore = (ROOT / ".containerignore").read_text().split()
    pyproject = (ROOT / "pyproject.toml").read_text()
    folders = set(re.findall(r'^"jobnik[\w.]*" = "(\w+)', pyproject, re.MULTILINE))

    assert "*" in ignore  # nothing but what is let in
    assert {f"!{f}" for f in folders} | {"!pyproject.toml", "!README.md"} <= set(ignore)


def test_ci_builds_and_runs_the_image() -> None:
    run = (ROOT / ".ci" / "run").read_text()
    script = DEPLOY / "smoke-image.sh"

    assert "bash deploy/smoke-image.sh" in run
    for step in ("mmdebstrap", "podman", "import", "buildah", "--isolation chroot", "BASE="):
        assert step in script.read_text(), step
    check = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr


# -- the systemd unit and its environment file (docs/operations.md) ---------------------------

SYSTEMD = DEPLOY / "systemd"
VENV_JOBNIK = "/opt/jobnik/bin/jobnik"


def unit_lines(path: Path) -> list[tuple[str, str]]:
    """A unit's `Key=value` lines, in order."""
    return [
        (key.strip(), value.strip())
        for key, _, value in (
            line.partition("=")
            for line in path.read_text().splitlines()
            if "=" in line and not line.lstrip().startswith(("#", ";"))
        )
    ]


def test_the_unit_runs_jobnik_serve_with_workers_and_commands_the_cli_takes() -> None:
    lines = unit_lines(SYSTEMD / "jobnik.service")
    commands = [shlex.split(v) for k, v in lines if k in ("ExecStartPre", "ExecStart")]
    root = typer.main.get_command(cli)

    assert [w for w in commands[-1][1:] if w in ("serve", "--workers")] == ["serve", "--workers"]
    for argv in commands:
        assert argv[0] == VENV_JOBNIK
        command = root.commands[argv[1]]  # (a command the jobnik command has)
        command.make_context(argv[1], argv[2:])  # raises on an option or value it refuses
    settings = dict(lines)
    assert settings["User"] != "root"
    assert settings["EnvironmentFile"] == "/etc/jobnik/jobnik.env"


def test_systemd_finds_nothing_wrong_with_the_unit(tmp_path: Path) -> None:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.fail("systemd-analyze is missing: scripts/test.sh installs Debian's systemd package")
    jobnik = shutil.which("jobnik") or str(Path(sys.executable).parent / "jobnik")
    unit = tmp_path / "jobnik.service"  # (verify wants the commands it runs to exist)
    unit.write_text((SYSTEMD / "jobnik.service").read_text().replace(VENV_JOBNIK, jobnik))

    verified = subprocess.run([tool, "verify", str(unit)], capture_output=True, text=True)

    assert (verified.returncode, verified.stdout + verified.stderr) == (0, "")


def test_the_environment_file_example_holds_settings_jobnik_reads() -> None:
    env = dict(
        line.split("=", 1)
        for line in (SYSTEMD / "jobnik.env").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    )
    serve = next(c for c in typer.main.get_command(cli).commands.values() if c.name == "serve")
    options = {p.envvar for p in serve.params if getattr(p, "envvar", None)}
    variables = {
        f.validation_alias if isinstance(f.validation_alias, str) else f"JOBNIK_{name.upper()}"
        for name, f in Settings.model_fields.items()
    }
    known = variables | options

    assert set(env) <= known, set(env) - known
    assert Settings.from_env(env).database_url.startswith("postgresql://")

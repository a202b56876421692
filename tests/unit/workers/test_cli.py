from __future__ import annotations

import io
import json
import os.path
import sys
from collections import OrderedDict
from typing import Any

import pytest
from typer.testing import CliRunner

from jobnik.scripts.cli import app
from jobnik.workers import AccessRefused, ApiError, Worker
from jobnik.workers.cli import load_handler, run_worker, status_line

from .fake_api import FakeApi


def test_a_module_and_function_spec_loads_the_function() -> None:
    spec = "json:dumps"

    handler = load_handler(spec)

    assert handler is json.dumps


def test_a_dotted_module_and_a_dotted_attribute_both_resolve() -> None:
    specs = ["os.path:join", "collections:OrderedDict.fromkeys"]

    handlers = [load_handler(s) for s in specs]

    assert handlers == [os.path.join, OrderedDict.fromkeys]


@pytest.mark.parametrize("spec", ["json", "json:", ":dumps", "", ":"])
def test_a_spec_without_both_module_and_function_is_refused(spec: str) -> None:
    with pytest.raises(ValueError, match="MODULE:FUNCTION"):
        load_handler(spec)


def test_a_spec_naming_something_not_callable_is_refused() -> None:
    spec = "math:pi"

    with pytest.raises(ValueError, match="not callable"):
        load_handler(spec)


def test_a_missing_module_or_attribute_raises_the_lookup_error() -> None:
    with pytest.raises(ImportError):
        load_handler("jobnik_no_such_module:handle")
    with pytest.raises(AttributeError):
        load_handler("json:no_such_function")


def test_the_command_exits_2_when_the_handler_cannot_be_loaded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))  # the command prepends the cwd
    runner = CliRunner()

    result = runner.invoke(app, ["worker", "run", "json:no_such_function", "--stage-type", "tiles"])

    assert result.exit_code == 2
    assert "cannot load handler" in result.output


@pytest.mark.parametrize(
    ("url", "why"),
    [("nonsense", "not an http(s) URL: 'nonsense'"), ("http://[::1", "does not parse")],
)
def test_the_command_exits_2_naming_an_api_url_that_does_not_parse(
    monkeypatch: pytest.MonkeyPatch, url: str, why: str
) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))

    result = CliRunner().invoke(
        app, ["worker", "run", "json:dumps", "--stage-type", "tiles"], env={"JOBNIK_API_URL": url}
    )

    assert result.exit_code == 2
    (line,) = result.output.strip().splitlines()
    assert line.startswith("jobnik: --api-url (JOBNIK_API_URL): ")
    assert why in line


@pytest.mark.parametrize(
    "option",
    [
        ["--concurrency", "0"],
        ["--heartbeat-interval", "0"],
        ["--heartbeat-interval", "nan"],
        ["--heartbeat-interval", "inf"],
        ["--grace-period", "-1"],
        ["--grace-period", "nan"],
        ["--grace-period", "1e300"],  # beyond a timer's range: SIGTERM would wait forever
        ["--lease-seconds", "0"],
        ["--lease-seconds", "604801"],  # more than a dequeue may ask for: every one refused
        ["--heartbeat-interval", "201601"],  # the default lease, 3 intervals, likewise
        ["--metrics-port", "70000"],
        ["--log-level", "LOUD"],
    ],
    ids=" ".join,
)
def test_the_command_exits_2_naming_an_option_no_worker_could_run_with(
    monkeypatch: pytest.MonkeyPatch, option: list[str]
) -> None:
    started: list[object] = []
    monkeypatch.setattr("jobnik.workers.cli.run_worker", lambda *a, **k: started.append(a))
    monkeypatch.setattr(sys, "path", list(sys.path))

    result = CliRunner().invoke(
        app, ["worker", "run", "json:dumps", "--stage-type", "tiles", *option]
    )

    assert result.exit_code == 2, result.output
    assert f"Invalid value for '{option[0]}'" in result.output
    assert started == []


def test_a_worker_may_ask_for_a_weeks_lease_and_wait_a_week_for_its_handlers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    started: list[dict[str, Any]] = []
    monkeypatch.setattr("jobnik.workers.cli.run_worker", lambda *a, **k: started.append(k))
    monkeypatch.setattr(sys, "path", list(sys.path))
    week = ["--lease-seconds", "604800", "--heartbeat-interval", "201600"]

    result = CliRunner().invoke(
        app, ["worker", "run", "json:dumps", "--stage-type", "t", *week, "--grace-period", "604800"]
    )

    assert result.exit_code == 0, result.output
    assert [(k["lease_seconds"], k["heartbeat_interval"], k["grace_period"]) for k in started] == [
        (604800, 201600.0, 604800.0)
    ]


def test_a_worker_the_api_refuses_exits_2_saying_why(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(*args: Any, **kwargs: Any) -> Worker:
        raise AccessRefused(ApiError(401, "UNAUTHENTICATED", "a bearer token is required"))

    monkeypatch.setattr("jobnik.workers.cli.run_worker", refused)
    monkeypatch.setattr(sys, "path", list(sys.path))

    result = CliRunner().invoke(app, ["worker", "run", "json:dumps", "--stage-type", "tiles"])

    assert result.exit_code == 2
    (line,) = result.output.strip().splitlines()
    assert line.startswith("jobnik: the API refused this worker (401 UNAUTHENTICATED: ")
    assert "check its token (JOBNIK_TOKEN)" in line


def test_the_status_line_counts_done_failed_running_cancelled_and_refused() -> None:
    worker = Worker("tiles", lambda task, context: None, client=FakeApi().client())
    s = worker.stats
    s.done, s.failed, s.running, s.cancelled, s.refused = 7, 2, 3, 4, 1

    line = status_line(worker)

    assert line == "[tiles] running: done 7  failed 2  running 3  cancelled 4  refused 1"


def test_run_worker_ends_with_a_final_status_line_when_not_on_a_tty() -> None:
    fake = FakeApi()
    out = io.StringIO()

    def make_worker(*args: Any, **kwargs: Any) -> Worker:
        kwargs.pop("base_url")
        worker = Worker(*args, client=fake.client(), **kwargs)
        worker.stop()  # run() drains at once
        return worker

    worker = run_worker(
        "json:dumps", "tiles", "http://unused", out=out, make_worker=make_worker, batch_size=5
    )

    assert worker.handler is json.dumps
    assert worker.batch_size == 5
    lines = out.getvalue().splitlines()
    assert lines[-1] == "[tiles] stopping: done 0  failed 0  running 0  cancelled 0  refused 0"
    logged = [json.loads(line) for line in lines if line.startswith("{")]
    assert {"worker started", "worker stopped"} <= {entry["message"] for entry in logged}
    assert next(e for e in logged if e["message"] == "worker started")["stage_type"] == "tiles"


def test_the_command_exits_2_saying_why_when_it_cannot_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Worker:
        raise RuntimeError("OpenTelemetry is not installed: pip install '.[otel]'")

    monkeypatch.setattr("jobnik.workers.cli.run_worker", refuse)
    runner = CliRunner()

    result = runner.invoke(app, ["worker", "run", "json:dumps", "--stage-type", "tiles"])

    assert result.exit_code == 2
    assert "cannot start: OpenTelemetry is not installed" in result.output

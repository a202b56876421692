from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from jobnik.workers.tracing import wanted

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, False),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "  "}, False),
    ],
)
def test_traces_are_exported_only_when_the_standard_variables_ask(
    env: dict[str, str], expected: bool
) -> None:
    assert wanted(env) is expected


# A process without OpenTelemetry: every `opentelemetry` import fails, as when the package is
# not installed. A worker still runs its task; asking for traces is refused with a clear error.
WITHOUT_OTEL = textwrap.dedent(
    """
    import sys

    class NoOtel:
        def find_spec(self, name, path=None, target=None):
            if name == "opentelemetry" or name.startswith("opentelemetry."):
                raise ImportError(f"No module named {name!r}")
            return None

    sys.meta_path.insert(0, NoOtel())
    import threading
    import time
    from tests.unit.workers.fake_api import FakeApi, task_json
    from jobnik.workers import Worker, tracing

    fake = FakeApi()
    fake.add(task_json(1))
    worker = Worker("tiles", lambda task, context: {"ok": True}, client=fake.client())
    thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
    thread.start()
    deadline = time.monotonic() + 10
    while not fake.reports and time.monotonic() < deadline:
        time.sleep(0.01)
    worker.stop()
    thread.join(10)
    print("available", tracing.available())
    print("reports", [r.body["status"] for r in fake.reports])
    try:
        tracing.export_from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, "w")
    except RuntimeError as exc:
        print("refused", exc)
    """
)


def test_the_sdk_works_without_opentelemetry_and_says_how_to_get_it() -> None:
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_OTEL], cwd=ROOT, capture_output=True, text=True, timeout=60
    )

    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "available False"
    assert lines[1] == "reports ['COMPLETED']"
    assert lines[2].startswith("refused ")
    assert "pip install '.[otel]'" in lines[2]

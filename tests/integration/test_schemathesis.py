"""Schemathesis against a live server on each backend: every check, a bounded time.

Every operation of /openapi.json is called, with an admin token, with generated valid and invalid
requests (examples, coverage, fuzzing and stateful phases) and each answer is checked against the
document. The run must find no server error, no answer that differs from the document (status,
content type, headers, schema, Allow), and no schema-valid request refused: the document states
the limits the server enforces (api/openapi.py). Generated strings hold no NUL, which the server
refuses anywhere (the document says so in words where a value is free-form), each generated
Idempotency-Key is used once (schemathesis_hooks.py), and 413 is an answer to any request
(schemathesis.toml: the body limit is in bytes, which a JSON schema cannot state).
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

from jobnik.domain.errors import IllegalTransition, JobnikError

from .test_access import tokens

MAX_SECONDS = 45  # per backend


def _codes(error: type[JobnikError]) -> set[str]:
    """The codes of `error` and of every error class derived from it."""
    return {error.code}.union(*(_codes(sub) for sub in error.__subclasses__()))


# 400 answers to schema-valid requests that depend on what no schema states: the state of the
# entity (Jobnik's contract answers an illegal transition with 400: every IllegalTransition,
# reruns' refusals included) or what a value means (a cron expression, a time zone, a regular
# expression, a range of times, a time and its offset, a retry policy's bounds against each
# other, a deadline against now, an integer of a free-form payload beyond the 64 bits its
# schema's description states).
STATE_OR_MEANING: Final = frozenset(
    _codes(IllegalTransition)
    | {
        "JOB_IN_FINITE_STATE",
        "JOB_NOT_IN_FINITE_STATE",
        "COMPLETION_STAGE_HELD",
        "JOB_FINISHING",
        "INVALID_BACKFILL_RANGE",
        "SCHEDULE_TIMING_REQUIRED",
        "INVALID_CRON_EXPRESSION",
        "INVALID_TIME_ZONE",
        "INVALID_FAILURE_PATTERN",
        "INVALID_JOB_TEMPLATE",
        "INVALID_NOT_BEFORE",
        "INVALID_RETRY_POLICY",
        "INVALID_DEADLINE",
        "INVALID_SCHEDULE_TO_START",
        "DELEGATION_REFUSED",
        "NOT_ALLOWED_TO_ADD_TASKS_TO_IN_PROGRESS_STAGE",
        "PARENT_TASK_NOT_IN_PROGRESS",
        "STAGE_NOT_IN_JOB",
        "BACKFILL_TOO_LARGE",
        "STAGE_IN_FINITE_STATE",
        "NUMBER_OUT_OF_RANGE",
    }
)
HOOKS = Path(__file__).with_name("schemathesis_hooks.py")
CONFIG = Path(__file__).with_name("schemathesis.toml")


def run_schemathesis(url: str, report: Path, token: str) -> tuple[int, Counter[str], list[str]]:
    """(test cases generated, checks failed by name, errors), from the run's output and its
    NDJSON report (which details the checks of the scenarios that failed one)."""
    st = Path(sys.executable).parent / "st"
    command = [
        str(st), "--config-file", str(CONFIG), "run", f"{url}/openapi.json",
        "--checks", "all",
        "--max-time", str(MAX_SECONDS),
        "--max-examples", "25",
        "--workers", "2",
        "--seed", "19",
        "--generation-database", "none",
        "--generation-allow-x00", "false",  # NUL is refused (documented), never stored
        # the live streams answer until the client leaves: test_fuzz_reads.py reads them; a
        # revoked token would end the run's access (revocation has tests of its own)
        "--exclude-path-regex", "/stream$|^/v1/tokens/",
        "--header", f"Authorization: Bearer {token}",
        "--request-timeout", "20",
        "--no-color",
        "--report", "ndjson", "--report-ndjson-path", str(report),
    ]  # fmt: skip
    out = subprocess.run(  # in the report's folder: the tool writes its cache where it runs
        command,
        capture_output=True,
        text=True,
        timeout=MAX_SECONDS + 120,
        cwd=report.parent,
        env={**os.environ, "SCHEMATHESIS_HOOKS": str(HOOKS)},
    )
    generated = re.search(r"(\d+) generated", out.stdout)
    (report.parent / "schemathesis.txt").write_text(out.stdout + out.stderr)  # for a failure
    failed: Counter[str] = Counter()
    errors: list[str] = []
    for line in report.read_text().splitlines():
        event: dict[str, Any] = json.loads(line)
        kind, body = next(iter(event.items()))
        if kind in ("NonFatalError", "FatalError") and _server_side(body):
            errors.append(json.dumps(body)[:500])
        if kind != "ScenarioFinished":
            continue
        recorder = body["recorder"]
        for case, checks in (recorder.get("checks") or {}).items():
            for check in checks:
                exchange = recorder.get("interactions", {}).get(case)
                if (
                    check["status"] != "failure"
                    or _refused_for_state_or_meaning(check, exchange)
                    or _kept_by_design(check, exchange)
                ):
                    continue
                failed[check["name"]] += 1
                errors.append(_described(check, recorder.get("interactions", {}).get(case)))
    return int(generated.group(1)) if generated else 0, failed, errors


def _refused_for_state_or_meaning(check: dict[str, Any], exchange: dict[str, Any] | None) -> bool:
    """A schema-valid request refused with one of `STATE_OR_MEANING`'s codes."""
    if check["name"] != "positive_data_acceptance" or exchange is None:
        return False
    response = exchange.get("response") or {}
    if response.get("status_code") != 400:
        return False
    path = urlsplit(str((exchange.get("request") or {}).get("uri"))).path
    if "None" in path.split("/"):
        return True  # the tool filled a path parameter from a null field of an earlier answer
    try:
        answer = json.loads(_content(response))
    except ValueError:
        return False
    return isinstance(answer, dict) and answer.get("code") in STATE_OR_MEANING


def _kept_by_design(check: dict[str, Any], exchange: dict[str, Any] | None) -> bool:
    """A read after a DELETE that answers by design, which the tool takes for a use after free:
    a deleted job's history and task counters (kept for audit until it is archived), and a stage
    type after a DELETE of /v1/limits/{type} (or .../keys, .../keys/rate), which removes one of its
    limits only (its others and its queue order, removed or changed apart, stay and still
    answer)."""
    if check["name"] != "use_after_free" or exchange is None:
        return False
    path = urlsplit(str((exchange.get("request") or {}).get("uri"))).path
    if re.fullmatch(r"/v1/jobs/[^/]+/(history|statistics)", path):
        return True
    try:
        found = json.loads(_content(exchange.get("response") or {}))
    except ValueError:
        return False
    kept = isinstance(found, dict) and (
        found.get("rate")
        or found.get("order") == "fair"
        or found.get("perKey")
        or found.get("maxInProgress")
    )
    return path.startswith("/v1/limits/") and bool(kept)


def _described(check: dict[str, Any], exchange: dict[str, Any] | None) -> str:
    """A failed check with its request and the answer's start, for the failure's message."""
    request = (exchange or {}).get("request") or {}
    response = (exchange or {}).get("response") or {}
    answer = _content(response)[:300].decode(errors="replace")
    said = f"{request.get('method')} {request.get('uri')} {str(request.get('body'))[:300]}"
    return f"{check['name']}: {said} -> {response.get('status_code')} {answer}"


def _content(response: dict[str, Any]) -> bytes:
    """The answer's body as the report records it (empty when it records none)."""
    try:
        return base64.b64decode((response.get("content") or {})["$base64"])
    except (KeyError, ValueError):
        return b""


def _server_side(error: dict[str, Any]) -> bool:
    """An error of the exchange with the server (a dropped connection, a timeout), not one of
    the tool's own test generation (which it reports the same way)."""
    kind = str((error.get("value") or {}).get("type", ""))
    return any(word in kind for word in ("Connection", "Timeout", "Protocol", "Chunked", "Decode"))


def test_schemathesis_finds_no_server_error_and_no_schema_violation(
    database_url: str, spawn_server: Callable[..., Any], tmp_path: Path
) -> None:
    env = {"JOBNIK_LIST_SHAPE": "page", "JOBNIK_MIN_POSITION_WAIT": "0.2", "JOBNIK_AUTH": "tokens"}
    token = tokens({"JOBNIK_DATABASE_URL": database_url}, "create", "fuzz", "--role", "admin")
    server = spawn_server(database_url, env=env)

    generated, failed, errors = run_schemathesis(server.url, tmp_path / "report.ndjson", token)

    # (a run bounded in time: on a machine busy with the rest of the suite it makes fewer)
    assert generated > 200
    assert failed == Counter(), errors
    assert errors == []
    assert "Traceback" not in server.log(), server.log()[-3000:]

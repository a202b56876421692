"""Task logs over HTTP: a cap on the lines of one append, checked before the
lines themselves; an append stored as one row whatever its lines; the read paged by lines."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from jobnik.api.main import app_from_env
from jobnik.projections.inline.tables import LOGS

from .conftest import Api, Json, Secured


def running_task(api: Api) -> Json:
    """A task dequeued by the API's client (its attempt is open), with its stage's type."""
    stage = api.add_stage(api.create_job()["id"])
    api.add_tasks(stage["id"])
    return {**api.dequeue(stage["type"]), "type": stage["type"]}


def append(api: Api, task: Json, lines: list[Any]) -> Any:
    return api.http.post(
        f"/v1/tasks/{task['id']}/logs", json={"lines": lines, "attempt": task["attempt"]}
    )


def read(api: Api, task: Json, **params: Any) -> Any:
    r = api.http.get(f"/v1/tasks/{task['id']}/logs", params=params)
    assert r.status_code == 200, r.text
    return r.json()


def test_an_append_of_more_lines_than_the_setting_allows_is_refused_before_any_is_read(
    database_url: str,
) -> None:
    env = {"JOBNIK_DATABASE_URL": database_url, "JOBNIK_MAX_LOG_LINES": "3"}
    with TestClient(app_from_env(env)) as http:
        api = Api(http)
        task = running_task(api)

        with api.nothing_written():
            too_many = append(api, task, ["x"] * 4)
            # items that are not even lines: the count is what is checked first
            not_lines = append(api, task, [{}] * 4)
        accepted = append(api, task, ["x"] * 3)

    refusal = {"message": "request/body/lines has 4 lines; at most 3 per request"}
    assert (too_many.status_code, too_many.json()) == (
        400,
        {**refusal, "code": "TOO_MANY_LOG_LINES"},
    )
    assert (not_lines.status_code, not_lines.json()) == (400, too_many.json())
    assert (accepted.status_code, accepted.json()) == (201, {"appended": 3})


def test_the_line_cap_holds_by_default(api: Api) -> None:
    task = running_task(api)

    with api.nothing_written():
        r = append(api, task, [""] * 250_000)

    assert (r.status_code, r.json()["code"]) == (400, "TOO_MANY_LOG_LINES")
    assert append(api, task, [""] * 1000).status_code == 201


def test_an_append_is_one_row_whatever_its_number_of_lines(api: Api) -> None:
    task = running_task(api)

    append(api, task, [""] * 1000)
    append(api, task, ["x"])

    store = api.http.app.state.store  # type: ignore[attr-defined]
    with store.cursor(write=False) as cur:
        [row] = cur.all(f"SELECT COUNT(*) AS n FROM {LOGS}")
    assert row["n"] == 2
    lines = [ln["line"] for ln in read(api, task, limit=1000)["items"]]
    assert lines == [""] * 1000
    assert read(api, task, after=read(api, task, limit=1000)["next"])["items"][0]["line"] == "x"


def test_the_logs_read_is_paged_by_lines_across_appends(api: Api) -> None:
    task = running_task(api)
    appends = [["a0", "a1", "a2"], ["b0"], ["c0", "c1", "c2", "c3"]]
    for lines in appends:
        assert append(api, task, lines).status_code == 201

    pages: list[list[str]] = []
    cursors: list[str | None] = []
    after: dict[str, Any] = {}
    while True:
        page = read(api, task, limit=3, **after)
        pages.append([ln["line"] for ln in page["items"]])
        cursors.append(page["next"])
        if page["next"] is None:
            break
        after = {"after": page["next"]}

    assert pages == [["a0", "a1", "a2"], ["b0", "c0", "c1"], ["c2", "c3"]]
    whole = read(api, task)  # (default limit: 100)
    assert [ln["line"] for ln in whole["items"]] == [ln for lines in appends for ln in lines]
    assert whole["next"] is None
    positions = [ln["position"] for ln in whole["items"]]
    assert positions == sorted(positions)
    assert len(set(positions)) == 3
    # a cursor ends an append ("position") or falls inside one ("position:lines read")
    assert cursors[:2] == [str(positions[2]), f"{positions[4]}:2"]
    # an append's position, as the history and the stream give it: the lines after it
    after_b = read(api, task, after=str(positions[3]))
    assert [ln["line"] for ln in after_b["items"]] == ["c0", "c1", "c2", "c3"]
    assert read(api, task, after=f"{positions[5]}:4") == {"items": [], "next": None}


@pytest.mark.parametrize("after", [str(2**63 - 1), f"{2**63 - 1}:0", f"{2**63 - 1}:999999999"])
def test_a_cursor_at_the_last_possible_position_reads_an_empty_page(api: Api, after: str) -> None:
    task = running_task(api)
    append(api, task, ["a0"])

    assert read(api, task, after=after) == {"items": [], "next": None}


def test_each_line_says_when_by_which_attempt_and_actor(api: Api) -> None:
    task = running_task(api)
    append(api, task, ["hello"])

    [line] = read(api, task)["items"]

    assert line.keys() == {"time", "attempt", "actor", "position", "line"}
    assert (line["attempt"], line["actor"], line["line"]) == (1, "worker", "hello")


@pytest.mark.parametrize(
    "params",
    [{"limit": 0}, {"limit": 1001}, {"after": "x"}, {"after": "1:"}, {"after": "-1"}],
    ids=["limit-0", "limit-1001", "after-x", "after-colon", "after-negative"],
)
def test_a_logs_read_out_of_bounds_is_a_400(api: Api, params: dict[str, Any]) -> None:
    task = running_task(api)

    r = api.http.get(f"/v1/tasks/{task['id']}/logs", params=params)

    assert (r.status_code, r.json()["code"]) == (400, "VALIDATION_ERROR"), r.text


@pytest.mark.parametrize("body", [b"", b"  ", b"null", b"[]", b'{"lines": 3}'])
def test_an_append_whose_body_is_not_lines_is_a_400(api: Api, body: bytes) -> None:
    task = running_task(api)

    with api.nothing_written():
        r = api.http.post(
            f"/v1/tasks/{task['id']}/logs",
            content=body,
            headers={"Content-Type": "application/json"},
        )

    assert (r.status_code, r.json()["code"]) == (400, "VALIDATION_ERROR"), r.text


# -- fenced by the token that opened the attempt -------------------------------------------


def test_only_the_token_that_opened_the_attempt_appends_its_lines(secured: Secured) -> None:
    tiler, other = secured.issue("tiler", "worker"), secured.issue("other-tiler", "worker")
    admin = secured.bearers["admin"]
    stage = secured.api.add_stage(secured.api.create_job()["id"], type="logged")
    secured.api.add_tasks(stage["id"])
    task = secured.call(tiler, "PATCH", "/v1/stages/logged/tasks/dequeue").json()
    url = f"/v1/tasks/{task['id']}/logs"

    assert secured.call(tiler, "POST", url, {"lines": ["mine"], "attempt": 1}).status_code == 201
    for bearer in (other, admin):
        with secured.api.wrote_events():  # refused, and recorded
            r = secured.call(bearer, "POST", url, {"lines": ["not mine"], "attempt": 1})
        assert (r.status_code, r.json()["code"]) == (403, "FORBIDDEN"), r.text
        assert "'tiler'" in r.json()["message"]
        assert secured.api.events_of(task["id"])[-1] == "TaskAttemptRefused"
    done = secured.call(
        tiler, "PUT", f"/v1/tasks/{task['id']}/status", {"status": "COMPLETED", "attempt": 1}
    )
    assert done.status_code == 200, done.text
    # the attempt ended: still its token's alone (its late lines are kept)
    late = secured.call(other, "POST", url, {"lines": ["not mine either"]})
    assert (late.status_code, late.json()["code"]) == (403, "FORBIDDEN")
    assert secured.call(tiler, "POST", url, {"lines": ["late"], "attempt": 1}).status_code == 201
    stale = secured.call(tiler, "POST", url, {"lines": ["no such attempt"], "attempt": 2})
    assert (stale.status_code, stale.json()["code"]) == (409, "STALE_ATTEMPT")

    lines = secured.call(admin, "GET", url).json()["items"]
    assert [(ln["line"], ln["attempt"], ln["actor"]) for ln in lines] == [
        ("mine", 1, "tiler"),
        ("late", 1, "tiler"),
    ]
    refused = secured.http.get("/v1/events", params={"type": "TaskAttemptRefused"}).json()
    assert [(e["actor"], e["payload"]["request"]) for e in refused["items"]] == [
        ("other-tiler", "log"),
        ("the-admin", "log"),
        ("other-tiler", "log"),
        ("tiler", "log"),
    ]


def test_lines_naming_an_attempt_that_is_not_the_latest_are_refused_as_stale(api: Api) -> None:
    task = running_task(api)
    release = {"attempt": 1, "reason": "shutting down"}
    assert api.http.post(f"/v1/tasks/{task['id']}/release", json=release).status_code == 200
    again = api.dequeue(task["type"])
    assert append(api, again, ["second"]).status_code == 201

    with api.wrote_events():  # refused, and recorded
        r = append(api, task, ["first, late"])

    assert (r.status_code, r.json()["code"]) == (409, "STALE_ATTEMPT"), r.text
    assert api.events_of(task["id"])[-1] == "TaskAttemptRefused"
    assert [(ln["attempt"], ln["line"]) for ln in read(api, task)["items"]] == [(2, "second")]

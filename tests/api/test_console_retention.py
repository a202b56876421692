"""The console's retention page by role: every reader sees the policy; only an operator gets
the buttons that change a job name's period (the API refuses the others anyway)."""

from __future__ import annotations

import re
from uuid import uuid4

import pytest

from jobnik.api.console import retention

from .conftest import Secured
from .test_schedules import actions


def test_the_retention_page_offers_period_changes_to_operators_only(secured: Secured) -> None:
    admin = secured.bearers["admin"]
    r = secured.call(
        admin, "PUT", "/v1/retention/nightly-map", {"periodSeconds": 86400, "reason": "x"}
    )
    assert r.status_code == 200, r.text
    seen = {}
    for role in ("reader", "producer", "operator"):
        page = secured.call(secured.bearers[role], "GET", "/ui/retention")
        assert page.status_code == 200, page.text
        assert "nightly-map" in page.text
        assert "1 day" in page.text
        seen[role] = actions(page.text)
    assert seen == {
        "reader": [],
        "producer": [],
        "operator": ["Change", "Default", "Set a period…"],
    }


def test_a_reader_cannot_change_a_period_and_a_bad_period_gets_the_apis_message(
    secured: Secured,
) -> None:
    url = "/v1/retention/nightly-map"
    refused = secured.call(secured.bearers["reader"], "PUT", url, {"periodSeconds": 60})
    bad = secured.call(secured.bearers["operator"], "PUT", url, {"periodSeconds": -5})
    page = secured.call(secured.bearers["reader"], "GET", "/ui/retention")

    assert refused.status_code == 403, refused.text
    assert bad.status_code // 100 == 4, bad.text
    assert bad.json()["message"], bad.text
    assert "No job name has a period of its own." in page.text


def test_the_names_periods_are_shown_a_bounded_page_at_a_time(
    secured: Secured, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(retention, "NAMES_PAGE", 2)
    operator = secured.bearers["operator"]
    for name in ("a-job", "b-job", "c-job"):
        body = {"periodSeconds": 3600, "reason": "x"}
        assert secured.call(operator, "PUT", f"/v1/retention/{name}", body).status_code == 200

    first = secured.call(operator, "GET", "/ui/retention").text
    second = secured.call(operator, "GET", "/ui/retention?page=2").text
    past = secured.call(operator, "GET", "/ui/retention?page=3").text

    assert re.findall(r'data-name="([^"]+)"', first) == ["a-job", "b-job"]
    assert re.findall(r'data-name="([^"]+)"', second) == ["c-job"]
    assert re.findall(r'data-name="([^"]+)"', past) == []
    assert "3 job names" in first
    assert "Page 1 of 2" in first
    assert "Page 2 of 2" in second
    assert secured.call(operator, "GET", "/ui/retention?page=0").status_code // 100 == 4


def test_a_lookup_of_an_unknown_or_malformed_job_id_says_so(secured: Secured) -> None:
    reader = secured.bearers["reader"]
    other = uuid4()

    assert "is not a job id" in secured.call(reader, "GET", "/ui/retention?job=nonsense").text
    assert (
        f"Job {other} is not archived."
        in secured.call(reader, "GET", f"/ui/retention?job={other}").text
    )
    assert secured.call(reader, "GET", f"/ui/jobs/{other}").status_code == 404
    too_long = secured.call(reader, "GET", "/ui/retention?job=" + "x" * 65)
    assert too_long.status_code // 100 == 4

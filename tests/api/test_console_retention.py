"""The console's retention page by role: every reader sees the policy; only an operator gets
the buttons that change a job name's period (the API refuses the others anyway)."""

from __future__ import annotations

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

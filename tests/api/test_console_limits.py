"""The console's queues page shows each stage type's limits and queue order to every reader;
only an operator gets the buttons that change them (the API refuses the others anyway)."""

from __future__ import annotations

import re

import pytest

from jobnik.api.console import routes

from .conftest import Secured
from .test_schedules import actions


def rows(html: str) -> dict[str, str]:
    """Each limits row's stage type and the text of its order cell."""
    return dict(
        re.findall(r'<tr data-stage-type="([^"]+)">.*?<td class="order">([^<]*)</td>', html, re.S)
    )


def test_the_queues_page_shows_limits_and_offers_changes_to_operators_only(
    secured: Secured,
) -> None:
    admin = secured.bearers["admin"]
    for url, body in (
        ("/v1/limits/render/order", {"order": "fair", "reason": "tenants"}),
        ("/v1/limits/encode", {"maxInProgress": 4}),
        ("/v1/limits/encode/keys", {"maxInProgress": 2}),
        ("/v1/limits/encode/keys/rate", {"starts": 3, "intervalSeconds": 60}),
    ):
        assert secured.call(admin, "PUT", url, body).status_code == 200
    seen = {}
    for role in ("reader", "producer", "operator"):
        page = secured.call(secured.bearers[role], "GET", "/ui/queues")
        assert page.status_code == 200, page.text
        assert rows(page.text) == {"encode": "first in, first out", "render": "fair"}
        assert "0 / 4" in page.text
        assert '<td class="per-key">2, 3 per 60 s (0 held back)</td>' in page.text
        seen[role] = actions(page.text)
    assert seen == {
        "reader": [],
        "producer": [],
        "operator": [
            "Take turns",
            "Remove limit",
            "Remove per-key limit",
            "Remove per-key rate",
            "First in, first out",
            "Take turns…",
        ],
    }


def test_the_limits_are_shown_a_bounded_page_at_a_time(
    secured: Secured, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(routes, "LIMITS", 2)
    operator = secured.bearers["operator"]
    for t in ("t1", "t2", "t3"):
        assert (
            secured.call(operator, "PUT", f"/v1/limits/{t}/order", {"order": "fair"}).status_code
            == 200
        )
    first = secured.call(operator, "GET", "/ui/queues").text
    second = secured.call(operator, "GET", "/ui/queues?limits=2").text
    assert (list(rows(first)), list(rows(second))) == (["t1", "t2"], ["t3"])
    assert 'href="?limits=2"' in first
    assert secured.call(operator, "GET", "/ui/queues?limits=0").status_code == 400

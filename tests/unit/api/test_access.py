from __future__ import annotations

from datetime import UTC, datetime

import pytest

from jobnik.api.access import Access, TokenTable, check_exposure
from jobnik.domain.errors import Exposed, Unauthenticated
from jobnik.domain.tokens import hash_secret
from jobnik.projections.queries.tokens import TokenRow

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def row(name: str = "ops", **changes: object) -> TokenRow:
    fields: dict[str, object] = {
        "name": name,
        "role": "admin",
        "stage_types": (),
        "expires_at": None,
        "secret_hash": hash_secret("s3cret"),
        "issued_at": NOW,
        "issued_by": "cli:root",
        "revoked_at": None,
        "revoked_by": None,
    }
    return TokenRow(**{**fields, **changes})  # type: ignore[arg-type]


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "[::1]", "127.0.0.2"])
def test_loopback_may_run_open(host: str) -> None:
    check_exposure(None, host, any_token=False)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.5", "jobnik.internal"])
def test_elsewhere_running_open_needs_auth_off_said_or_a_token(host: str) -> None:
    with pytest.raises(Exposed, match="JOBNIK_AUTH=off"):
        check_exposure(None, host, any_token=False)
    check_exposure("off", host, any_token=False)
    check_exposure(None, host, any_token=True)
    check_exposure("tokens", host, any_token=False)


def test_the_token_copy_is_read_again_once_it_is_older_than_its_refresh() -> None:
    loads: list[int] = []
    clock = [0.0]

    def load() -> list[TokenRow]:
        loads.append(1)
        return [row()]

    table = TokenTable(load, refresh=0.5, monotonic=lambda: clock[0])
    assert set(table.rows) == {"ops"}
    clock[0] = 0.49
    assert set(table.rows) == {"ops"}
    clock[0] = 0.5
    assert set(table.rows) == {"ops"}

    assert len(loads) == 2


def test_unset_is_open_with_no_token_and_closed_once_one_exists_even_revoked() -> None:
    rows: list[TokenRow] = []
    access = Access(None, TokenTable(lambda: rows, refresh=0), clock=lambda: NOW)

    assert access.authenticate(None) is None
    rows.append(row(revoked_at=NOW))
    with pytest.raises(Unauthenticated):
        access.authenticate(None)
    with pytest.raises(Unauthenticated, match="revoked"):
        access.authenticate("Bearer ops.s3cret")


def test_a_valid_bearer_names_its_token_and_role() -> None:
    access = Access("tokens", TokenTable(lambda: [row(role="worker", stage_types=("t",))]))

    principal = access.authenticate("bearer ops.s3cret")

    assert principal is not None
    assert (principal.name, principal.role, principal.stage_types) == ("ops", "worker", {"t"})

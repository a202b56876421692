from __future__ import annotations

import json
from datetime import timedelta

import pytest
from eventsourcing.application import Application
from eventsourcing.persistence import StoredEvent

from jobnik.domain.errors import Forbidden, InvalidRequest
from jobnik.domain.principals import Actor, Principal, Role, token_principal
from jobnik.domain.tokens import Token, hash_secret, secret_matches, split_bearer, token_id

from ..builders import NOW, at, new_task, replay

ADMIN = Principal("cli:ops", Role.ADMIN)


def issue(name: str = "tiler", role: Role = Role.WORKER, **options: object) -> tuple[Token, str]:
    return Token.issue(
        name=name,
        role=role,
        stage_types=options.pop("stage_types", ()),  # type: ignore[arg-type]
        expires_at=options.pop("expires_at", None),  # type: ignore[arg-type]
        now=NOW,
        actor=ADMIN,
    )


def test_a_token_keeps_only_the_hash_of_a_long_random_secret() -> None:
    token, bearer = issue(stage_types=["tiles", "tiles", "upload"])
    [issued] = token.collect_events()

    name, secret = split_bearer(bearer) or ("", "")
    assert (name, token.id) == ("tiler", token_id("tiler"))
    assert len(secret) >= 43  # 32 random bytes, URL-safe base64
    assert secret not in json.dumps(vars(issued), default=str)
    assert issued.secret_hash == hash_secret(secret)
    assert secret_matches(secret, issued.secret_hash)
    assert not secret_matches(secret + "x", issued.secret_hash)
    assert (issued.actor, issued.actor_role, issued.stage_types) == (
        "cli:ops",
        "admin",
        ["tiles", "upload"],
    )


def test_two_tokens_never_share_a_secret() -> None:
    assert issue("a")[1].partition(".")[2] != issue("b")[1].partition(".")[2]


@pytest.mark.parametrize(
    ("name", "role", "options"),
    [
        ("api", Role.ADMIN, {}),
        ("has.dot", Role.ADMIN, {}),
        ("", Role.ADMIN, {}),
        ("x" * 65, Role.ADMIN, {}),
        ("reader", Role.READER, {"stage_types": ["tiles"]}),
        ("old", Role.ADMIN, {"expires_at": NOW - timedelta(seconds=1)}),
    ],
)
def test_bad_tokens_are_refused_with_no_event(
    name: str, role: Role, options: dict[str, object]
) -> None:
    with pytest.raises(InvalidRequest):
        issue(name, role, **options)


def test_revoking_twice_records_one_revocation_and_replays_to_the_same_state() -> None:
    token, _ = issue()
    assert token.revoke(at(1), ADMIN) is True
    assert token.revoke(at(2), ADMIN) is False
    events = token.collect_events()

    assert [type(e).__name__ for e in events] == ["TokenIssued", "TokenRevoked"]
    assert replay(events).state() == token.state()


def test_a_worker_principal_is_held_to_its_stage_types() -> None:
    tiler = token_principal("tiler", "worker", ["tiles"])

    tiler.check_stage_type("tiles")
    with pytest.raises(Forbidden):
        tiler.check_stage_type("upload")
    token_principal("any", "worker").check_stage_type("upload")
    Actor.WORKER.check_stage_type("upload")


def test_an_attempt_belongs_to_the_token_that_opened_it() -> None:
    task = new_task()
    task.dequeue(at(1), token_principal("a", "worker"))

    assert task.holder == "a"
    assert not task.held_by_another(token_principal("a", "worker"))
    assert task.held_by_another(token_principal("b", "worker"))
    assert task.held_by_another(token_principal("root", "admin"))
    assert not task.held_by_another(Actor.WORKER)  # access control off: no identities


def test_an_attempt_opened_with_access_control_off_belongs_to_no_token() -> None:
    task = new_task()
    task.dequeue(at(1), Actor.WORKER)

    assert task.holder is None
    assert not task.held_by_another(token_principal("b", "worker"))


def test_an_event_stored_before_roles_existed_loads_with_no_role() -> None:
    task = new_task()
    task.dequeue(at(1), Actor.WORKER)
    mapper = Application().mapper
    stored = [mapper.to_stored_event(e) for e in task.collect_events()]
    old = []
    for s in stored:
        state = json.loads(s.state)
        state.pop("actor_role")
        old.append(
            StoredEvent(s.originator_id, s.originator_version, s.topic, json.dumps(state).encode())
        )

    events = [mapper.to_domain_event(s) for s in old]

    assert [e.actor_role for e in events] == [None, None]
    assert replay(events).holder is None

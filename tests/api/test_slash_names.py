"""Names that may hold "/" (a stage type, a job name) are addressed in a path with the slash sent as
%2F: each request reaches the name it encodes, never a shorter name's sub-resource."""

from __future__ import annotations

from .conftest import Api, Secured


def queued(api: Api, stage_type: str, n: int) -> None:
    stage = api.add_stage(api.create_job()["id"], type=stage_type)
    api.add_tasks(stage["id"], n)


def test_a_stage_type_holding_a_slash_has_limits_of_its_own(api: Api) -> None:
    queued(api, "tiles/v2", 2)
    queued(api, "tiles", 1)

    r = api.http.put("/v1/limits/tiles%2Fv2", json={"maxInProgress": 1})
    assert (r.status_code, r.json()["stageType"]) == (200, "tiles/v2"), r.text
    r = api.http.put("/v1/limits/tiles%2Fv2/rate", json={"starts": 5, "intervalSeconds": 60})
    assert r.status_code == 200, r.text
    for sub, body in (("keys", {"maxInProgress": 2}), ("order", {"order": "fair"})):
        assert api.http.put(f"/v1/limits/tiles%2Fv2/{sub}", json=body).status_code == 200

    got = api.http.get("/v1/limits/tiles%2Fv2").json()
    assert (got["stageType"], got["maxInProgress"], got["rate"]["starts"]) == ("tiles/v2", 1, 5)
    assert [i["stageType"] for i in api.http.get("/v1/limits").json()["items"]] == ["tiles/v2"]
    api.dequeue("tiles%2Fv2")
    api.dequeue_nothing("tiles%2Fv2")  # held by its limit
    api.dequeue("tiles")  # another type: not held

    r = api.http.delete("/v1/limits/tiles%2Fv2")
    assert (r.status_code, r.json()["code"]) == (200, "LIMIT_REMOVED_SUCCESSFULLY"), r.text
    api.dequeue("tiles%2Fv2")


def test_a_type_named_like_another_types_sub_resource_is_its_own(api: Api) -> None:
    assert api.http.put("/v1/limits/x/rate", json={"starts": 2, "intervalSeconds": 60}).is_success

    with api.nothing_written():
        r = api.http.delete("/v1/limits/x%2Frate")  # the limit of the type "x/rate": none

    assert (r.status_code, r.json()["code"]) == (404, "LIMIT_NOT_FOUND"), r.text
    assert api.http.get("/v1/limits/x").json()["rate"]["starts"] == 2
    assert api.http.get("/v1/limits/x%2Frate").status_code == 404
    # a percent sign is a character of a name too
    r = api.http.put("/v1/limits/x%252Frate", json={"maxInProgress": 3})
    assert (r.status_code, r.json()["stageType"]) == (200, "x%2Frate"), r.text


def test_a_job_name_holding_a_slash_has_its_retention_and_its_definition(api: Api) -> None:
    job = api.create_job("maps/nightly")

    r = api.http.put("/v1/retention/maps%2Fnightly", json={"periodSeconds": 3600})

    assert r.status_code == 200, r.text
    assert [n["name"] for n in r.json()["names"]] == ["maps/nightly"]
    r = api.http.get("/v1/job-definitions/maps%2Fnightly", params={"min_position": api.position})
    assert r.status_code == 200, r.text
    assert r.json()["lastStatus"] == job["status"]


def test_the_consoles_buttons_name_a_slashed_type_and_job_name_as_one_segment(
    secured: Secured,
) -> None:
    admin = secured.bearers["admin"]
    for url, body in (
        ("/v1/limits/tiles%2Fv2", {"maxInProgress": 4}),
        ("/v1/retention/maps%2Fnightly", {"periodSeconds": 86400}),
    ):
        assert secured.call(admin, "PUT", url, body).status_code == 200

    queues = secured.call(secured.bearers["operator"], "GET", "/ui/queues").text
    retention = secured.call(secured.bearers["operator"], "GET", "/ui/retention").text

    assert 'data-url="/v1/limits/tiles%2Fv2"' in queues
    assert 'data-url="/v1/retention/maps%2Fnightly"' in retention
    assert "/v1/limits/tiles/v2" not in queues
    assert "/v1/retention/maps/nightly" not in retention


def test_a_trailing_slash_is_redirected_away_as_on_every_other_route(api: Api) -> None:
    for url, to in (("/v1/limits/", "/v1/limits"), ("/v1/retention/", "/v1/retention")):
        r = api.http.get(url, follow_redirects=False)
        assert (r.status_code, r.headers["location"]) == (307, f"http://testserver{to}"), url
    r = api.http.get("/v1/limits/render/", follow_redirects=False)
    assert (r.status_code, r.headers["location"]) == (307, "http://testserver/v1/limits/render")


def test_a_name_ending_in_a_slash_is_its_own(api: Api) -> None:
    r = api.http.put("/v1/limits/tiles%2F", json={"maxInProgress": 2})

    assert (r.status_code, r.json()["stageType"]) == (200, "tiles/"), r.text
    assert api.http.get("/v1/limits/tiles%2F").json()["maxInProgress"] == 2
    assert api.http.get("/v1/limits/tiles").status_code == 404


def test_a_trailing_slash_after_an_escaped_slash_is_no_redirect_to_another_name(api: Api) -> None:
    assert api.http.put("/v1/limits/x/rate", json={"starts": 2, "intervalSeconds": 60}).is_success

    with api.nothing_written():
        for method, url in (("DELETE", "/v1/limits/x%2Frate/"), ("GET", "/v1/limits/x%2F/")):
            r = api.http.request(method, url)  # (a redirect would be followed)
            assert (r.status_code, r.json()["code"]) == (404, "ROUTE_NOT_FOUND"), url

    assert api.http.get("/v1/limits/x").json()["rate"]["starts"] == 2


def test_a_path_is_decoded_once(api: Api) -> None:
    # "%2%46" is "%2F" decoded once: the three characters, not a slash decoded twice
    r = api.http.put("/v1/limits/x%2%46rate", json={"maxInProgress": 3})

    assert (r.status_code, r.json()["stageType"]) == (200, "x%2Frate"), r.text

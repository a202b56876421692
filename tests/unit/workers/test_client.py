from __future__ import annotations

import warnings

import httpx
import pytest

from jobnik.workers import ApiError, JobnikClient

from .fake_api import BASE_URL


def _client(answer: httpx.Response) -> JobnikClient:
    http = httpx.Client(transport=httpx.MockTransport(lambda _: answer), base_url=BASE_URL)
    return JobnikClient(BASE_URL, http=http, retries=0)


def test_building_a_client_raises_no_deprecation_warning() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")

        JobnikClient(BASE_URL).close()

    assert [str(w.message) for w in caught] == []


def test_an_error_answer_raises_api_error_with_its_status_code_and_message() -> None:
    client = _client(httpx.Response(409, json={"code": "STALE_ATTEMPT", "message": "old"}))

    with pytest.raises(ApiError) as raised:
        client.put("/v1/tasks/t/status", {"status": "COMPLETED"})

    assert (raised.value.status, raised.value.code, raised.value.message) == (
        409,
        "STALE_ATTEMPT",
        "old",
    )


def test_a_404_is_none_when_the_caller_allows_it() -> None:
    client = _client(httpx.Response(404, json={"code": "TASK_NOT_FOUND", "message": "none"}))

    body = client.patch("/v1/stages/tiles/tasks/dequeue", ok_404=True)

    assert body is None


def _client_failing_with(exc: Exception, calls: list[str]) -> JobnikClient:
    def handle(request: httpx.Request) -> httpx.Response:
        calls.append(request.method)
        raise exc

    transport = httpx.MockTransport(handle)
    return JobnikClient(
        BASE_URL, http=httpx.Client(transport=transport, base_url=BASE_URL), retries=2
    )


@pytest.mark.parametrize("method", ["POST", "PATCH", "PUT"])
def test_a_write_whose_answer_was_lost_is_not_sent_again(method: str) -> None:
    calls: list[str] = []
    client = _client_failing_with(httpx.ReadTimeout("lost"), calls)

    with pytest.raises(httpx.ReadTimeout):
        client.request(method, "/v1/stages/tiles/tasks/dequeue")

    assert calls == [method]


def test_a_write_that_never_reached_the_server_is_retried() -> None:
    calls: list[str] = []
    client = _client_failing_with(httpx.ConnectError("refused"), calls)

    with pytest.raises(httpx.ConnectError):
        client.request("PATCH", "/v1/stages/tiles/tasks/dequeue")

    assert calls == ["PATCH"] * 3


def test_a_read_is_retried_on_any_transport_fault() -> None:
    calls: list[str] = []
    client = _client_failing_with(httpx.ReadTimeout("slow"), calls)

    with pytest.raises(httpx.ReadTimeout):
        client.get("/v1/jobs")

    assert calls == ["GET"] * 3

"""Live event streams against a live server: how many may be open, and that however many are
open and catching up, a plain request is answered promptly."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import httpx
from typer.testing import CliRunner

from jobnik.api.settings import Settings
from jobnik.scripts.cli import app as cli

from .conftest import Server, SpawnServer

PROMPT_SECONDS = 1.0  # a plain read while the streams catch up (before: 3 to 17 s)
SCENARIO_SECONDS = 120  # opening the streams and the reads, at most
TASKS, BATCH = 4000, 400  # the log the streams catch up on: a TaskCreated of ~2 KB each


def token(env: dict[str, str], name: str) -> dict[str, str]:
    result = CliRunner().invoke(cli, ["tokens", "create", name, "--role", "reader"], env=env)
    assert result.exit_code == 0, result.output
    return {"Authorization": f"Bearer {result.stdout.strip()}"}


@asynccontextmanager
async def streams(
    server: Server, n: int, headers: dict[str, str] | None = None
) -> AsyncIterator[list[httpx.Response]]:
    """`n` streams of the global feed from its start, opened one after the other; each one read
    as it comes (in the background) until the block ends. Their first answers."""
    limits = httpx.Limits(max_connections=n + 10, max_keepalive_connections=0)
    async with (
        httpx.AsyncClient(base_url=server.url, timeout=30, limits=limits) as http,
        AsyncExitStack() as stack,
    ):
        readers: list[asyncio.Task[None]] = []
        answers = []
        for _ in range(n):
            r = await stack.enter_async_context(
                http.stream("GET", "/v1/events/stream?after=0", headers=headers)
            )
            answers.append(r)
            if r.status_code == 200:
                readers.append(asyncio.create_task(drain(r)))
        try:
            yield answers
        finally:
            for reader in readers:
                reader.cancel()
            await asyncio.gather(*readers, return_exceptions=True)


async def drain(r: httpx.Response) -> None:
    async for _ in r.aiter_raw():
        pass


async def refusal(r: httpx.Response) -> tuple[int, str, str | None]:
    """A refused stream's status, code and Retry-After."""
    body = json.loads(await r.aread())
    return r.status_code, body["code"], r.headers.get("Retry-After")


def test_a_plain_request_answers_promptly_while_the_caps_worth_of_streams_catch_up(
    database_url: str, spawn_server: SpawnServer
) -> None:
    server = spawn_server(database_url, env={"JOBNIK_SWEEP_INTERVAL": "0"})
    with httpx.Client(base_url=server.url, timeout=60) as http:
        job = http.post("/v1/jobs", json={"name": "log", "data": {}}).json()
        stage = http.post(f"/v1/jobs/{job['id']}/stage", json={"type": "big", "data": {}}).json()
        for start in range(0, TASKS, BATCH):
            tasks = [{"data": {"n": start + i, "pad": "x" * 2000}} for i in range(BATCH)]
            r = http.post(f"/v1/stages/{stage['id']}/tasks", json=tasks)
            assert r.status_code == 201, r.text
    cap = Settings.from_env({}).max_streams

    async def scenario() -> tuple[list[int], list[float], int]:
        async with (
            streams(server, cap) as opened,
            httpx.AsyncClient(base_url=server.url, timeout=60) as http,
        ):
            await asyncio.sleep(0.5)  # every stream is reading its first pages
            took = []
            for _ in range(5):
                t0 = time.perf_counter()
                try:
                    r = await http.get("/v1/jobs", params={"page_size": 10}, timeout=10)
                    assert r.status_code == 200, r.text
                except httpx.TimeoutException:
                    pass
                took.append(time.perf_counter() - t0)
                await asyncio.sleep(0.1)
            one_more = await http.get("/v1/events/stream?after=0")
            return [o.status_code for o in opened], took, one_more.status_code

    statuses, took, one_more = asyncio.run(asyncio.wait_for(scenario(), SCENARIO_SECONDS))

    assert statuses == [200] * len(statuses)
    assert max(took) < PROMPT_SECONDS, took
    assert one_more == 503


def test_streams_beyond_the_process_cap_or_a_tokens_cap_are_refused_503_until_one_closes(
    database_url: str, env: dict[str, str], spawn_server: SpawnServer
) -> None:
    alice, bob, carol = (token(env, name) for name in ("alice", "bob", "carol"))
    server = spawn_server(
        database_url,
        env={"JOBNIK_MAX_STREAMS": "4", "JOBNIK_MAX_STREAMS_PER_TOKEN": "2"},
    )

    async def scenario() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with streams(server, 3, alice) as by_alice:
            seen["alice"] = [r.status_code for r in by_alice[:2]]
            seen["alice's third"] = await refusal(by_alice[2])
            async with streams(server, 2, bob) as by_bob:
                seen["bob"] = [r.status_code for r in by_bob]
                async with streams(server, 1, carol) as by_carol:
                    seen["carol, process full"] = await refusal(by_carol[0])
            # bob's streams closed: their places are given back
            seen["carol, after"] = await until_admitted(server, carol)
        return seen

    seen = asyncio.run(scenario())

    busy = (503, "TOO_MANY_STREAMS", "1")
    assert seen == {
        "alice": [200, 200],
        "alice's third": busy,
        "bob": [200, 200],
        "carol, process full": busy,
        "carol, after": 200,
    }


async def until_admitted(server: Server, headers: dict[str, str], wait: float = 10) -> int:
    """The status of a stream opened as soon as one is admitted (or the last refusal's)."""
    deadline = time.monotonic() + wait
    while True:
        async with streams(server, 1, headers) as [r]:
            if r.status_code == 200 or time.monotonic() > deadline:
                return r.status_code
        await asyncio.sleep(0.05)

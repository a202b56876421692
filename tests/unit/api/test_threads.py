"""The commands' thread pool: results, errors and context cross it; it starts threads only as
calls need them, never past its limit; a caller that goes away leaves it serving."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time

import pytest

from jobnik.api.threads import CommandThreads

WHO: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="nobody")


def test_a_call_runs_in_another_thread_and_answers_its_result() -> None:
    pool = CommandThreads(2, "t")

    async def main() -> tuple[int, str]:
        return await pool.run(lambda: 41 + 1), await pool.run(
            lambda: threading.current_thread().name
        )

    result, thread = asyncio.run(main())
    assert result == 42
    assert thread.startswith("t-")
    assert thread != threading.current_thread().name
    assert pool.threads == 1


def test_a_calls_exception_is_raised_to_its_caller() -> None:
    pool = CommandThreads(1, "t")
    error = KeyError("gone")

    def fail() -> None:
        raise error

    async def main() -> BaseException:
        with pytest.raises(KeyError) as caught:
            await pool.run(fail)
        return caught.value

    assert asyncio.run(main()) is error
    assert asyncio.run(pool.run(lambda: "still serving")) == "still serving"


def test_the_callers_context_goes_with_the_call_and_its_changes_stay_there() -> None:
    pool = CommandThreads(1, "t")

    def read_and_change() -> str:
        seen = WHO.get()
        WHO.set("changed in the thread")
        return seen

    async def main() -> tuple[str, str]:
        WHO.set("request 7")
        seen = await pool.run(read_and_change)
        return seen, WHO.get()

    assert asyncio.run(main()) == ("request 7", "request 7")


def test_threads_start_as_concurrent_calls_need_them_up_to_the_limit() -> None:
    pool = CommandThreads(3, "t")
    running, most = [0], [0]
    lock = threading.Lock()

    def slow(i: int) -> int:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.02)
        with lock:
            running[0] -= 1
        return i

    async def main() -> list[int]:
        for i in range(5):  # one at a time: one thread does
            assert await pool.run(lambda i=i: i) == i
        assert pool.threads == 1
        return await asyncio.gather(*(pool.run(lambda i=i: slow(i)) for i in range(12)))

    assert asyncio.run(main()) == list(range(12))  # every call beyond the limit waited its turn
    assert pool.threads == 3
    assert most[0] == 3


def test_a_cancelled_caller_does_not_stop_its_call_and_the_pool_serves_on() -> None:
    pool = CommandThreads(1, "t")
    release, finished = threading.Event(), threading.Event()

    def blocked() -> str:
        release.wait(5)
        finished.set()
        return "dropped"

    async def main() -> str:
        call = asyncio.ensure_future(pool.run(blocked))
        await asyncio.sleep(0.01)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        release.set()
        return await pool.run(lambda: "next")

    assert asyncio.run(main()) == "next"
    assert finished.is_set()


def test_a_call_whose_loop_closed_meanwhile_leaves_its_thread_serving() -> None:
    pool = CommandThreads(1, "t")
    release = threading.Event()
    loop = asyncio.new_event_loop()
    call = loop.create_task(pool.run(lambda: release.wait(5)))
    loop.run_until_complete(asyncio.sleep(0.01))  # the call is in the thread
    call.cancel()
    loop.run_until_complete(asyncio.gather(call, return_exceptions=True))
    loop.close()
    release.set()  # its outcome now finds the loop closed
    assert asyncio.run(pool.run(lambda: "served")) == "served"
    assert pool.threads == 1


def test_a_thread_the_system_refuses_is_the_callers_error_and_the_pool_stays_usable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pool = CommandThreads(2, "t")

    def refused(self: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    with monkeypatch.context() as patched:
        patched.setattr(threading.Thread, "start", refused)
        with pytest.raises(RuntimeError, match="can't start new thread"):
            asyncio.run(pool.run(lambda: "never"))
    assert pool.threads == 0
    assert asyncio.run(pool.run(lambda: "served")) == "served"
    assert pool.threads == 1


def test_a_call_that_raises_stop_iteration_answers_its_caller() -> None:
    """(An asyncio future refuses StopIteration: its caller would wait forever.)"""
    pool = CommandThreads(1, "t")

    def stops() -> None:
        next(iter(()))

    async def main() -> None:
        await asyncio.wait_for(pool.run(stops), 5)

    with pytest.raises(RuntimeError, match="StopIteration") as caught:
        asyncio.run(main())
    assert isinstance(caught.value.__cause__, StopIteration)


def test_a_call_from_another_loop_while_a_thread_start_is_refused_is_served(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two event loops share the pool: A's call starts its only thread, and the system refuses
    it while B's call comes in. A gets the error; B's call must not wait for a thread that was
    counted but never started."""
    pool = CommandThreads(1, "t")
    original = threading.Thread.start
    b_calling, refusing = threading.Event(), threading.Event()

    def start(self: threading.Thread) -> None:
        if self.name.startswith("t-") and not refusing.is_set():
            refusing.set()
            assert b_calling.wait(5)
            time.sleep(0.05)  # (B's call meanwhile: waiting for the lock, or queued)
            raise RuntimeError("can't start new thread")
        original(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    outcomes: dict[str, object] = {}

    def a() -> None:
        try:
            outcomes["a"] = asyncio.run(pool.run(lambda: "a"))
        except RuntimeError as exc:
            outcomes["a"] = exc

    def b() -> None:
        async def main() -> str:
            b_calling.set()
            return await asyncio.wait_for(pool.run(lambda: "b"), 5)

        try:
            outcomes["b"] = asyncio.run(main())
        except BaseException as exc:  # noqa: BLE001 - compared below
            outcomes["b"] = exc

    first = threading.Thread(target=a)
    first.start()
    assert refusing.wait(5)
    second = threading.Thread(target=b)
    second.start()
    first.join(10)
    second.join(10)
    assert isinstance(outcomes["a"], RuntimeError)
    assert outcomes["b"] == "b"
    assert pool.threads == 1


def test_a_pool_needs_a_thread() -> None:
    with pytest.raises(ValueError, match="at least one thread"):
        CommandThreads(0, "t")

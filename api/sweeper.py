"""The lease sweeper: a background thread; only the process holding the leader lock sweeps.

It also steps the schedules' clocks (each due nominal time run, skipped, buffered or recorded
as missed: domain/schedule_commands.py), purges expired Idempotency-Keys (expired keys
already count as absent at lookup; the purge only keeps the table small) and, every
JOBNIK_ARCHIVE_INTERVAL seconds, archives the ended jobs past their retention period, a bounded
batch a round (api/archives.py); through a backlog, again once the batch's pause has passed."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from jobnik.domain.application import Jobnik
from jobnik.domain.schedule_commands import ScheduleCommands
from jobnik.projections.store.leader import LeaderLock, Round, unobserved

log = logging.getLogger(__name__)

PURGE_EVERY = 60.0  # seconds between purges of expired Idempotency-Keys


class Sweeper:
    """Every `interval` seconds, if leader, takes back tasks whose lease expired (and purges)."""

    def __init__(
        self,
        jobnik: Jobnik,
        lock: LeaderLock,
        interval: float,
        purge: Callable[[], int] | None = None,
        round: Round = unobserved,
        schedules: ScheduleCommands | None = None,
        archive: Callable[[], tuple[int, float | None]] | None = None,
        archive_every: float = 60.0,
    ) -> None:
        self.jobnik, self.lock, self.interval, self.purge = jobnik, lock, interval, purge
        self.round = round  # each round runs in it, told how many tasks and keys it took
        self.schedules = schedules
        # A round: the jobs archived, and the seconds to its next round through a backlog
        # (None: nothing more is due, the next after `archive_every`).
        self.archive, self.archive_every = archive, archive_every
        self._archive_at = 0.0
        self._purged_at = -PURGE_EVERY
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="jobnik-sweeper", daemon=True)
        self.swept = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self.lock.release()

    def sweep_once(self) -> int:
        """Sweep until nothing is left (when leader); returns how many tasks were taken back."""
        with self.round("jobnik.sweeper") as did:
            return self._sweep(did)

    def _sweep(self, did: Callable[[int], None]) -> int:
        if not self.lock.acquire():
            return 0
        total = self._until_done(self.jobnik.sweep)
        if total:
            log.info("leases swept", extra={"action": "leases_swept", "tasks": total})
        self.swept += total
        if missed := self.jobnik.expire_deadlines():
            log.info("deadlines passed", extra={"action": "deadlines_passed", "missed": missed})
        if expired := self._until_done(self.jobnik.expire_queued):
            log.info("queued tasks expired", extra={"action": "tasks_expired", "tasks": expired})
        steps = self._fire_schedules(self.schedules) if self.schedules is not None else 0
        purged = 0
        if self.purge is not None and time.monotonic() - self._purged_at >= PURGE_EVERY:
            self._purged_at = time.monotonic()
            if purged := self.purge():
                log.info("idempotency keys purged", extra={"action": "keys_purged", "keys": purged})
        archived = 0
        if self.archive is not None and time.monotonic() >= self._archive_at:
            archived, pause = self.archive()
            self._archive_at = time.monotonic() + (self.archive_every if pause is None else pause)
        did(total + steps + purged + missed + expired + archived)
        return total

    def _until_done(self, command: Callable[[int], int], limit: int = 200) -> int:
        """Run `command` (taking at most `limit` a time) until a run takes fewer, or the sweeper
        stops; how many it took in all."""
        total = 0
        while not self._stop.is_set():
            n = command(limit)
            total += n
            if n < limit:
                break
        return total

    def _fire_schedules(self, schedules: ScheduleCommands) -> int:
        """Step the schedules that are due; how many steps it took."""
        done = schedules.sweep(self._stop.is_set)
        if done.steps:
            log.info(
                "schedules stepped",
                extra={"action": "schedules_stepped", "steps": done.steps, "runs": done.fired},
            )
        for schedule_id, error in done.refused:
            log.warning(
                "schedule %s: step refused: %s",
                schedule_id,
                error.message,
                extra={"action": "schedule_refused", "schedule_id": str(schedule_id)},
            )
        return int(done.steps)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.sweep_once()
            except Exception:  # a failed sweep is retried next round, never kills the thread
                log.exception("sweep failed", extra={"action": "sweep_failed"})

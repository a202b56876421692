"""The server's own take-backs: expired leases (the sweeper) and delegations left waiting."""

from __future__ import annotations

from datetime import timedelta

from jobnik.domain.commands import command
from jobnik.domain.principals import Actor
from jobnik.domain.statuses import TIMEOUT, JobStatus
from jobnik.domain.tasks import Task
from jobnik.domain.work import WorkCommands


class SweepCommands(WorkCommands):
    """Commands the server runs on its own: no worker asks for them."""

    @command
    def redispatch_stale(self, stale_after: timedelta, limit: int = 1000) -> list[Task]:
        """The safety net: delegated tasks whose child jobs have all ended but that were
        not re-dispatched within `stale_after` go back to the queue. Normally finds none."""
        now = self.clock()
        with self._write() as s:
            stale = s.stale_delegations(now - stale_after, limit)
            for task in stale:
                task.redispatch(
                    now, Actor.SYSTEM, "safety net: every child job had ended, not re-dispatched"
                )
            s.save(*stale)
        return stale

    @command
    def sweep(self, limit: int = 200) -> int:
        """Take back tasks whose lease expired: RETRIED while attempts remain, else FAILED.

        Counted as timeouts (cause "timeout"), not as handler failures. Tasks of aborted jobs
        are aborted instead. Returns how many tasks it took back. It looks before it writes: a
        sweep that finds nothing takes no writer lock, and one that will fail a job holds the
        job's queue rows first (`Session.hold_queue`).
        """
        now = self.clock()
        with self.store.session(write=False) as r:  # a look first, without the writer lock
            seen = r.expired_leases(now, limit)
        if not seen:
            return 0
        with self._write() as s:
            # (the jobs whose last attempt timed out: they may fail)
            s.hold_queue(*{t.job_id for t in seen if t.attempts + 1 >= t.max_attempts})
            expired = s.expired_leases(now, limit)
            for task in expired:
                stage, job = s.stage(task.stage_id), s.job(task.job_id)
                if job.status == JobStatus.ABORTED:
                    task.abort(now, Actor.SYSTEM, "lease expired after the job was aborted")
                    s.save(task)
                    continue
                task.fail(now, Actor.SYSTEM, "lease expired", cause=TIMEOUT)
                s.save(task)
                self._cascade(s, task, stage, job, now)
        return len(expired)

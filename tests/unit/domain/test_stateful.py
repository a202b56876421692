from __future__ import annotations

import contextlib
from typing import Any
from uuid import UUID

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from jobnik.domain.application import Jobnik, NewJob, NewStage, NewTask
from jobnik.domain.errors import (
    DelegationRefused,
    IllegalTaskTransition,
    JobnikError,
    StaleAttempt,
)
from jobnik.domain.statuses import (
    JOB_FINAL,
    STAGE_DEQUEUEABLE,
    STAGE_FINAL,
    TASK_FINAL,
    JobMode,
    JobStatus,
    StageStatus,
    TaskStatus,
)
from jobnik.domain.work import Report
from jobnik.projections.inline.tables import JOBS, STAGES, SUMMARIES, SUMMARY_COUNTERS, TASKS

from ..builders import Clock, replay
from ..memory import MemoryStore

TYPES = ("tiles", "upload")
C, F, D = TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.DELEGATED
FINAL_BY_TABLE = {JOBS: JOB_FINAL, STAGES: STAGE_FINAL, TASKS: TASK_FINAL}
RUNNING_STAGE = STAGE_FINAL | {StageStatus.IN_PROGRESS}


class Commands(RuleBasedStateMachine):
    """Random command sequences through the real application service (the lifecycle guarantees)."""

    @initialize()
    def start(self) -> None:
        self.store = MemoryStore()
        self.clock = Clock()
        self.jobnik = Jobnik(self.store, self.clock, lease_seconds=3 * 60)
        self.jobs: list[UUID] = []
        self.stages: list[UUID] = []
        self.final: dict[tuple[str, UUID], str] = {}  # terminal statuses seen so far

    def attempt(self, command: Any) -> None:
        with contextlib.suppress(JobnikError):  # refused: writes nothing (the invariants check)
            command()

    @rule(name=st.sampled_from(["nightly", "hourly"]), mode=st.sampled_from(list(JobMode)))
    def create_job(self, name: str, mode: JobMode) -> None:
        self.jobs.append(self.jobnik.create_job(NewJob(name=name, data={}, mode=mode)).id)

    @precondition(lambda self: self.jobs)
    @rule(data=st.data())
    def finish(self, data: st.DataObject) -> None:
        job = data.draw(st.sampled_from(self.jobs))
        self.attempt(lambda: self.jobnik.finish_job(job))

    @precondition(lambda self: self.jobs)
    @rule(
        data=st.data(),
        waiting=st.booleans(),
        completion=st.sampled_from([False, False, False, True]),
        count=st.integers(0, 3),
        attempts=st.integers(1, 3),
    )
    def add_stage_with_tasks(
        self, data: st.DataObject, waiting: bool, completion: bool, count: int, attempts: int
    ) -> None:
        job = data.draw(st.sampled_from(self.jobs))
        kind = data.draw(st.sampled_from(TYPES))

        def add() -> None:
            new = NewStage(type=kind, data={}, start_as_waiting=waiting, completion=completion)
            stage = self.jobnik.add_stage(job, new).id
            self.stages.append(stage)
            if count:
                self.jobnik.add_tasks(stage, [NewTask(data={}, max_attempts=attempts)] * count)

        self.attempt(add)

    @precondition(lambda self: self.stages)
    @rule(data=st.data(), count=st.integers(1, 3), attempts=st.integers(1, 3))
    def add_tasks(self, data: st.DataObject, count: int, attempts: int) -> None:
        stage = data.draw(st.sampled_from(self.stages))
        new = [NewTask(data={}, max_attempts=attempts)] * count
        self.attempt(lambda: self.jobnik.add_tasks(stage, new))

    @precondition(lambda self: self.store.tables.dequeueable())
    @rule(
        data=st.data(),
        outcome=st.sampled_from(["done", "done", "done", "fail", "fatal", "keep", "delegate"]),
    )
    def work(self, data: st.DataObject, outcome: str) -> None:
        queued = self.store.tables.dequeueable()
        kind = data.draw(st.sampled_from(sorted({self.queue_type(t) for t in queued})))

        def run() -> None:
            task = self.jobnik.dequeue(kind)
            if outcome == "done":
                self.jobnik.report_task(task.id, TaskStatus.COMPLETED, attempt=task.attempt)
            elif outcome in ("fail", "fatal"):
                self.jobnik.report_task(
                    task.id, TaskStatus.FAILED, attempt=task.attempt, fatal=outcome == "fatal"
                )
            elif outcome == "delegate":  # one child job of one task, then wait for it
                child = self.jobnik.create_job(
                    NewJob(name="child", data={}, parent_task_id=task.id)
                )
                self.jobs.append(child.id)
                stage = self.jobnik.add_stage(
                    child.id, NewStage(type=data.draw(st.sampled_from(TYPES)), data={})
                )
                self.stages.append(stage.id)
                self.jobnik.add_tasks(stage.id, [NewTask(data={}, max_attempts=1)])
                self.jobnik.report_task(task.id, TaskStatus.DELEGATED, attempt=task.attempt)

        self.attempt(run)

    @precondition(lambda self: self.store.tables.dequeueable())
    @rule(data=st.data(), count=st.integers(1, 4))
    def work_in_a_batch(self, data: st.DataObject, count: int) -> None:
        queued = self.store.tables.dequeueable()
        kind = data.draw(st.sampled_from(sorted({self.queue_type(t) for t in queued})))
        tasks = self.jobnik.dequeue_batch(kind, count)
        reports = [
            Report(
                t.id,
                t.attempt + (1 if outcome == "stale" else 0),
                {"fail": F, "fatal": F, "delegate": D}.get(outcome, C),
                fatal=outcome == "fatal",
            )
            for t in tasks
            for outcome in [
                data.draw(st.sampled_from(["done", "fail", "fatal", "stale", "delegate"]))
            ]
        ]
        if reports and data.draw(st.booleans()):
            reports.append(reports[0])  # the same report twice: the second finds it ended

        outcomes = self.jobnik.report_batch(data.draw(st.permutations(reports)))

        assert len(outcomes) == len(reports)
        assert {type(o.error) for o in outcomes} <= {
            type(None),
            StaleAttempt,
            DelegationRefused,
            IllegalTaskTransition,
        }

    @precondition(lambda self: self.stages)
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        stage = data.draw(st.sampled_from(self.stages))
        self.attempt(lambda: self.jobnik.release_stage(stage))

    @precondition(lambda self: self.jobs)
    @rule(
        data=st.data(),
        wanted=st.sampled_from(
            [JobStatus.PENDING, JobStatus.PAUSED, JobStatus.PENDING, JobStatus.ABORTED]
        ),
    )
    def job_status(self, data: st.DataObject, wanted: JobStatus) -> None:
        job = data.draw(st.sampled_from(self.jobs))
        self.attempt(lambda: self.jobnik.set_job_status(job, wanted))

    @precondition(lambda self: self.jobs)
    @rule(data=st.data(), kind=st.sampled_from(["task", "stage", "job", "job from a stage"]))
    def rerun(self, data: st.DataObject, kind: str) -> None:
        """An operator's rerun: the one command allowed to take something out of a final
        status, and only within the job it reruns."""
        ended = {"FAILED", "ABORTED"}  # mostly what a rerun takes, sometimes anything
        jobs = [j for j in self.jobs if self.status(JOBS, j) in ended] or self.jobs
        job = data.draw(st.sampled_from(jobs if data.draw(st.booleans()) else self.jobs))
        stages = [r["id"] for r in self.store.tables.where(STAGES, {"job_id": job})]
        tasks = [r["id"] for r in self.store.tables.where(TASKS, {"job_id": job})]
        tasks = [t for t in tasks if self.status(TASKS, t) in ended] or tasks
        if kind == "task" and tasks:
            task = data.draw(st.sampled_from(tasks))
            self.attempt(lambda: self.jobnik.rerun_task(task, reason="stateful"))
        elif kind == "stage" and stages:
            stage = data.draw(st.sampled_from(stages))
            self.attempt(lambda: self.jobnik.rerun_stage(stage))
        elif kind == "job from a stage" and stages:
            stage = data.draw(st.sampled_from(stages))
            self.attempt(lambda: self.jobnik.rerun_job(job, from_stage_id=stage))
        else:
            self.attempt(lambda: self.jobnik.rerun_job(job))
        for key in [k for k in self.final if k[1] == job or self.job_of(*k) == job]:
            del self.final[key]  # (what a refused rerun left alone is seen final again next)

    def status(self, table: str, id: UUID) -> str | None:
        row = self.store.tables.maybe(table, id=id)
        return None if row is None else str(row["status"])

    def job_of(self, table: str, id: UUID) -> UUID | None:
        row = self.store.tables.maybe(table, id=id)
        return None if row is None else row["id"] if table == JOBS else row["job_id"]

    def queue_type(self, task_id: UUID) -> str:
        [row] = self.store.tables.where("queue_v1", {"task_id": task_id})
        kind: str = row["stage_type"]
        return kind

    @rule()
    def sweep(self) -> None:
        self.jobnik.sweep()

    # -- invariants, after every step -----------------------------------------------------

    @invariant()
    def summary_total_is_the_sum_of_its_counters(self) -> None:
        for s in self.store.tables.rows[SUMMARIES]:
            assert s["total"] == sum(s[c] for c in SUMMARY_COUNTERS if c != "total")
            assert all(s[c] >= 0 for c in SUMMARY_COUNTERS)

    @invariant()
    def terminal_states_change_only_by_a_rerun(self) -> None:
        for table, finals in FINAL_BY_TABLE.items():
            for row in self.store.tables.rows[table]:
                key = (table, row["id"])
                if key in self.final:
                    assert row["status"] == self.final[key], (table, row["id"])
                elif row["status"] in finals:
                    self.final[key] = row["status"]

    @invariant()
    def timestamps_are_ordered(self) -> None:
        for table in (JOBS, STAGES, TASKS):
            for row in self.store.tables.rows[table]:
                created, updated = row["creation_time"], row["update_time"]
                assert created <= updated
                if row["start_time"] is not None:
                    assert created <= row["start_time"] <= updated
                if row["end_time"] is not None:
                    assert row["status"] in FINAL_BY_TABLE[table]
                    assert row["end_time"] >= (row["start_time"] or created)
                elif table != TASKS or row["status"] != TaskStatus.RETRIED:
                    assert row["status"] not in FINAL_BY_TABLE[table]

    @invariant()
    def what_has_not_ended_holds_no_failed_or_aborted_part(self) -> None:
        """A stage still open has no FAILED or ABORTED task, a job still open no FAILED or
        ABORTED stage: reruns reopen whole what they reopen."""
        ended = {"FAILED", "ABORTED"}
        for parent, child, key in ((STAGES, TASKS, "stage_id"), (JOBS, STAGES, "job_id")):
            open_ids = {
                r["id"]
                for r in self.store.tables.rows[parent]
                if r["status"] not in FINAL_BY_TABLE[parent]
            }
            for row in self.store.tables.rows[child]:
                assert not (row[key] in open_ids and row["status"] in ended), (child, row["id"])

    @invariant()
    def a_running_task_s_stage_runs_or_has_ended(self) -> None:
        """A running attempt's end moves its stage: the stage is IN_PROGRESS, or has ended."""
        stages = {s["id"]: s["status"] for s in self.store.tables.rows[STAGES]}
        for task in self.store.tables.rows[TASKS]:
            if task["status"] == TaskStatus.IN_PROGRESS:
                assert stages[task["stage_id"]] in RUNNING_STAGE, task["id"]

    @invariant()
    def a_jobs_completed_stages_are_counted(self) -> None:
        for job in self.store.tables.rows[JOBS]:
            stages = self.store.tables.where(STAGES, {"job_id": job["id"]})
            done = sum(1 for s in stages if s["status"] == "COMPLETED")
            assert job["completed_stages"] == done, job["id"]

    @invariant()
    def at_most_one_stage_of_a_job_is_active(self) -> None:
        active: dict[UUID, int] = {}
        for s in self.store.tables.rows[STAGES]:
            if s["status"] in STAGE_DEQUEUEABLE:
                active[s["job_id"]] = active.get(s["job_id"], 0) + 1
        assert all(n <= 1 for n in active.values()), active

    @invariant()
    def a_delegated_task_waits_only_while_a_child_job_runs(self) -> None:
        jobs = self.store.tables.rows[JOBS]
        for task in self.store.tables.rows[TASKS]:
            if task["status"] == TaskStatus.DELEGATED:
                children = [j for j in jobs if j["parent_task_id"] == task["id"]]
                assert any(j["status"] not in JOB_FINAL for j in children), task["id"]

    @invariant()
    def every_event_replays_to_the_same_state(self) -> None:
        for table in (JOBS, STAGES, TASKS):
            for row in self.store.tables.rows[table]:
                assert self.store.restored(table, row["id"]) == replay(
                    self.store.events_of(row["id"])
                )


Commands.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_random_command_sequences_keep_the_guarantees = Commands.TestCase

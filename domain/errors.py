"""One exception hierarchy; each error carries Jobnik's `code` (HTTP statuses: api/errors.py)."""

from __future__ import annotations


class JobnikError(Exception):
    """UNKNOWN_ERROR"""

    code = "UNKNOWN_ERROR"

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or self.code).strip())

    @property
    def message(self) -> str:
        return str(self.args[0])


class NotFound(JobnikError):
    """NOT_FOUND"""

    code = "NOT_FOUND"


class JobNotFound(NotFound):
    """JOB_NOT_FOUND"""

    code = "JOB_NOT_FOUND"


class StageNotFound(NotFound):
    """STAGE_NOT_FOUND"""

    code = "STAGE_NOT_FOUND"


class TaskNotFound(NotFound):
    """TASK_NOT_FOUND"""

    code = "TASK_NOT_FOUND"


class IllegalTransition(JobnikError):
    """An illegal status transition."""

    code = "ILLEGAL_STATUS_TRANSITION"

    @classmethod
    def between(cls, current: str, target: str) -> IllegalTransition:
        return cls(f"Illegal status transition from {current} to {target}")


class IllegalJobTransition(IllegalTransition):
    code = "ILLEGAL_JOB_STATUS_TRANSITION"


class IllegalStageTransition(IllegalTransition):
    code = "ILLEGAL_STAGE_STATUS_TRANSITION"


class IllegalTaskTransition(IllegalTransition):
    code = "ILLEGAL_TASK_STATUS_TRANSITION"


class RerunRefused(IllegalTransition):
    """this cannot be rerun now"""

    code = "RERUN_REFUSED"


class JobNotRerunnable(RerunRefused):
    """only a FAILED or ABORTED job is rerun (and only its tasks and stages are)"""

    code = "JOB_NOT_RERUNNABLE"


class StageNotRerunnable(RerunRefused):
    """the stage has no FAILED or ABORTED task to rerun"""

    code = "STAGE_NOT_RERUNNABLE"


class TaskNotRerunnable(RerunRefused):
    """only a FAILED or ABORTED task is rerun"""

    code = "TASK_NOT_RERUNNABLE"


class OtherTasksFailed(RerunRefused):
    """other tasks of the stage FAILED or were ABORTED too: rerun the stage"""

    code = "STAGE_HAS_OTHER_FAILED_TASKS"


class EarlierStageNotCompleted(RerunRefused):
    """an earlier stage of the job has not completed: rerun the job"""

    code = "EARLIER_STAGE_NOT_COMPLETED"


class LaterStageEnded(RerunRefused):
    """a later stage of the job ended with it (aborted): rerun the job"""

    code = "LATER_STAGE_ENDED"


class RerunSkipsStages(RerunRefused):
    """a rerun starts at the job's first unfinished stage or before it, never after"""

    code = "STAGE_AFTER_FIRST_UNFINISHED"


class InvalidRequest(JobnikError):
    """VALIDATION_ERROR"""

    code = "VALIDATION_ERROR"


class HostNotAllowed(InvalidRequest):
    """the Host header names a host this server does not answer to (JOBNIK_ALLOWED_HOSTS)"""

    code = "HOST_NOT_ALLOWED"


class PayloadTooLarge(InvalidRequest):
    """request body is larger than 1 MB"""

    code = "PAYLOAD_TOO_LARGE"


class HeadersTooLarge(InvalidRequest):
    """the request's headers are larger, or more, than the server takes
    (JOBNIK_MAX_HEADER_BYTES, JOBNIK_MAX_HEADERS)"""

    code = "HEADERS_TOO_LARGE"


class RequestTimeout(InvalidRequest):
    """the request did not arrive in time (JOBNIK_HEADER_TIMEOUT, JOBNIK_BODY_TIMEOUT)"""

    code = "REQUEST_TIMEOUT"


class UnsafeInput(InvalidRequest):
    """A request holds a value the stores or the responses cannot keep as it is."""

    code = "INVALID_INPUT"


class JsonTooDeep(UnsafeInput):
    """request body nests too deep"""

    code = "JSON_TOO_DEEP"


class StringTooLong(UnsafeInput):
    """a string in the request is too long"""

    code = "STRING_TOO_LONG"


class InvalidCharacter(UnsafeInput):
    """the request holds a NUL character or a lone surrogate"""

    code = "INVALID_CHARACTER"


class ReservedObject(UnsafeInput):
    """an object whose only keys are `_type_` and `_data_` (the event log's own encoding of a
    value, which it would read back as another value, or not at all)"""

    code = "RESERVED_OBJECT"


class NumberOutOfRange(UnsafeInput):
    """numbers must be finite and integers must fit in 64 bits"""

    code = "NUMBER_OUT_OF_RANGE"


class InvalidFailurePattern(InvalidRequest):
    """a failure pattern is not an RE2 regular expression"""

    code = "INVALID_FAILURE_PATTERN"


class TooManyTasks(InvalidRequest):
    """too many tasks in one request"""

    code = "TOO_MANY_TASKS"


class TooManyLogLines(InvalidRequest):
    """too many log lines in one request"""

    code = "TOO_MANY_LOG_LINES"


class BatchTooLarge(InvalidRequest):
    """more tasks in one batch than the server takes"""

    code = "BATCH_TOO_LARGE"


class JobNotInFiniteState(InvalidRequest):
    """JOB_NOT_IN_FINITE_STATE"""

    code = "JOB_NOT_IN_FINITE_STATE"


class JobInFiniteState(InvalidRequest):
    """JOB_ALREADY_FINISHED_STAGES_ERROR"""

    code = "JOB_IN_FINITE_STATE"


class StageInFiniteState(InvalidRequest):
    """STAGE_ALREADY_FINISHED_TASKS_ERROR"""

    code = "STAGE_IN_FINITE_STATE"


class AddTasksNotAllowed(InvalidRequest):
    """ADD_TASK_NOT_ALLOWED"""

    code = "NOT_ALLOWED_TO_ADD_TASKS_TO_IN_PROGRESS_STAGE"


class JobFinishing(InvalidRequest):
    """the job is finishing: it accepts no new stages or tasks"""

    code = "JOB_FINISHING"


class CompletionStageHeld(InvalidRequest):
    """a completion stage starts by itself when every normal stage has completed"""

    code = "COMPLETION_STAGE_HELD"


class DelegationRefused(InvalidRequest):
    """a task can be delegated only while its attempt runs and after it created child jobs"""

    code = "DELEGATION_REFUSED"


class TooManyChildJobs(JobnikError):
    """the parent task has as many child jobs as a task may create (JOBNIK_MAX_CHILD_JOBS)"""

    code = "TOO_MANY_CHILD_JOBS"


class ParentTaskNotRunning(InvalidRequest):
    """a child job's parent task must be IN_PROGRESS (its handler creates the children)"""

    code = "PARENT_TASK_NOT_IN_PROGRESS"


class StageNotInJob(InvalidRequest):
    """fromStageId names no stage of this job"""

    code = "STAGE_NOT_IN_JOB"


class UpdateConflict(JobnikError):
    """The entity changed since it was read."""

    code = "UPDATE_CONFLICT"


class TaskStatusUpdateFailed(UpdateConflict):
    """TASK_STATUS_UPDATE_FAILED"""

    code = "TASK_STATUS_UPDATE_FAILED"


class StaleAttempt(UpdateConflict):
    """A report or heartbeat from an attempt that is no longer current."""

    code = "STALE_ATTEMPT"


class ConcurrencyConflict(UpdateConflict):
    """Another command changed what this one read; it runs again (after a few tries: 409)."""

    code = "CONCURRENCY_CONFLICT"


class Busy(JobnikError):
    """The server is at a limit for now; the same request may succeed later."""

    code = "SERVICE_BUSY"
    retry_after = 1


class TooManyWaiters(Busy):
    """too many reads are waiting for a projection position; retry shortly"""

    code = "TOO_MANY_WAITERS"


class TooManyStreams(Busy):
    """too many live event streams are open; retry shortly"""

    code = "TOO_MANY_STREAMS"


class StoreInUse(JobnikError):
    """another jobnik server already serves this SQLite file"""

    code = "STORE_IN_USE"


class DatabaseError(JobnikError):
    """DATABASE_RELATED_ERROR"""

    code = "DATABASE_RELATED_ERROR"


class DatabaseMissing(DatabaseError):
    """the database does not exist"""

    code = "DATABASE_MISSING"


class DatabaseUnreachable(DatabaseError):
    """the database server cannot be reached, or refuses these credentials"""

    code = "DATABASE_UNREACHABLE"


class IdempotencyKeyReused(JobnikError):
    """This Idempotency-Key was used for a different request (another body or endpoint)."""

    code = "IDEMPOTENCY_KEY_REUSED"


class Unauthenticated(JobnikError):
    """a bearer token is required: missing, unknown, expired or revoked"""

    code = "UNAUTHENTICATED"


class Forbidden(JobnikError):
    """this token's role does not allow the operation"""

    code = "FORBIDDEN"


class AttemptRequired(InvalidRequest):
    """a worker token's report must name its attempt (the dequeue's `attempt`)"""

    code = "ATTEMPT_REQUIRED"


class TokenNotFound(NotFound):
    """TOKEN_NOT_FOUND"""

    code = "TOKEN_NOT_FOUND"


class TokenExists(JobnikError):
    """a token of this name exists or existed: names are never reused"""

    code = "TOKEN_EXISTS"


class LastAdminToken(JobnikError):
    """the last active admin token: revoked, no token could manage the others (`jobnik tokens
    create NAME --role admin` makes another first)"""

    code = "LAST_ADMIN_TOKEN"


class Exposed(JobnikError):
    """refusing to serve without access control on a non-loopback address"""

    code = "EXPOSED_WITHOUT_AUTH"


class ScheduleNotFound(NotFound):
    """no such schedule (or it was deleted)"""

    code = "SCHEDULE_NOT_FOUND"


class ScheduleExists(JobnikError):
    """a schedule of this name exists: delete it first, or pick another name"""

    code = "SCHEDULE_EXISTS"


class TimingRequired(InvalidRequest):
    """a schedule has either a cron expression or an interval in seconds, not both"""

    code = "SCHEDULE_TIMING_REQUIRED"


class InvalidCron(InvalidRequest):
    """not a cron expression that fires: five fields or an alias such as @daily"""

    code = "INVALID_CRON_EXPRESSION"


class InvalidTimezone(InvalidRequest):
    """not an IANA time zone name"""

    code = "INVALID_TIME_ZONE"


class InvalidInterval(InvalidRequest):
    """a schedule's interval is a whole number of seconds, 1 or more"""

    code = "INVALID_INTERVAL"


class UnknownPolicy(InvalidRequest):
    """an overlap or catch-up policy that does not exist"""

    code = "UNKNOWN_POLICY"


class InvalidJobTemplate(InvalidRequest):
    """a schedule's job has stages or a hook stage type: one of the two; its stages hold at most
    1000 tasks in all"""

    code = "INVALID_JOB_TEMPLATE"


class InvalidBackfill(InvalidRequest):
    """a backfill's range starts before it ends, not before 1970, and ends no later than now"""

    code = "INVALID_BACKFILL_RANGE"


class BackfillTooLarge(InvalidRequest):
    """a backfill's range holds more nominal times than one backfill fires"""

    code = "BACKFILL_TOO_LARGE"


class TooManyLimits(JobnikError):
    """as many stage types as allowed have a limit in force: remove one first"""

    code = "TOO_MANY_LIMITS"


class LimitNotFound(NotFound):
    """no such limit is set for this stage type"""

    code = "LIMIT_NOT_FOUND"


class InvalidLimit(InvalidRequest):
    """a limit is a whole number from 1 up (a rate's interval too), for a stage type of 1 to 50
    characters"""

    code = "INVALID_LIMIT"


class InvalidRetentionPeriod(InvalidRequest):
    """a retention period is a whole number of seconds, 1 or more"""

    code = "INVALID_RETENTION_PERIOD"


class TooManyRetentionPeriods(JobnikError):
    """as many job names as allowed have a retention period of their own: remove one first"""

    code = "TOO_MANY_RETENTION_PERIODS"


class ArchiveUnreachable(JobnikError):
    """the job was archived and its archive cannot be read here"""

    code = "ARCHIVED"


class InvalidNotBefore(InvalidRequest):
    """a not-before time is an ISO 8601 time with a time zone offset, e.g. 2030-01-02T03:04:05Z"""

    code = "INVALID_NOT_BEFORE"


class InvalidFairnessKey(InvalidRequest):
    """fairnessKey is 1 to 100 characters"""

    code = "INVALID_FAIRNESS_KEY"


class InvalidFairnessWeight(InvalidRequest):
    """fairnessWeight is a whole number from 1 to 100"""

    code = "INVALID_FAIRNESS_WEIGHT"


class InvalidConcurrencyKey(InvalidRequest):
    """concurrencyKey is 1 to 100 characters"""

    code = "INVALID_CONCURRENCY_KEY"


class InvalidScheduleToStart(InvalidRequest):
    """scheduleToStartSeconds is a whole number of seconds from 1 to 10,000,000"""

    code = "INVALID_SCHEDULE_TO_START"


class InvalidRetryPolicy(InvalidRequest):
    """a retry policy has initialSeconds above 0, a coefficient of 1 or more, maxSeconds of
    initialSeconds or more, and a jitter between 0 and 1"""

    code = "INVALID_RETRY_POLICY"


class TaskNotQueued(IllegalTransition):
    """only a task waiting in the queue (PENDING or RETRIED) has a not-before time to change"""

    code = "TASK_NOT_QUEUED"


class JobNotEnded(JobnikError):
    """a job is erased once it has ended (COMPLETED, FAILED or ABORTED)"""

    code = "JOB_NOT_ENDED"


class InvalidDeadline(InvalidRequest):
    """a deadline is an ISO 8601 time with a time zone offset, later than now"""

    code = "INVALID_DEADLINE"

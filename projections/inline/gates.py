"""Per-key limits: which queued tasks pass their key's gate.

A stage type with a per-key limit (`max_in_progress_per_key`, domain/limits.py) lets at most that
many tasks of each concurrency key be IN_PROGRESS at once, and one with a per-key rate
(`key_rate_starts`) at most that many start per interval, a token bucket per key; a job's key is
its `concurrencyKey`, or the job itself (its `gate`, jobs_v1). The claim stays one probe of the
queue's index: a queued task of such a type that its key has no room for is **held**
(`queue_v1.held`), and held rows are not in the claim's indexes (`queue_v1_next`,
`queue_v1_due`), so no claim walks past them.

Which rows are held is a function of the read models alone, worked out again (store/executor.py:
`OpExecutor.regate`) after every event that can change it (a task of the key queued, started or
ended; its stage or job opened, closed or reprioritised; the limit set, changed or removed): of a
gate's queued rows that can be dequeued, the first `room` are admitted (not held), where room is
the limit less the key's tasks IN_PROGRESS; the order is the claim's (priority, turn, queue
position) for the rows ready now, then the delayed ones by due time. Every other row of the gate
is held. A claim takes an admitted row, which leaves the queue as the key's tasks in progress grow
by one (and its bucket's tokens shrink by one): the admitted rows stay the first `room` without a
change, so the claim itself writes nothing here. Tokens also come back with time, not with an
event: a claim that finds fewer tasks than it asks for first lets through the held rows of the
keys whose buckets gained a whole token since (`due_gates`, the buckets' `wake_at`). Being a
function of the rows (and the buckets, which a rebuild leaves as they are), the result does not
depend on how events were grouped into commands: a rebuild works it out once at its end
(`regate_all`) and finds the same rows.

A row of a type without a per-key limit has no gate (NULL) and is never held: a command that ends
or queues one of its tasks finds no gate for it (its stage by key, its type's limits row) and
stops there.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from typing import Any, Final

from jobnik.domain.limits import MAX_PER_KEY
from jobnik.projections.inline.limits import BUCKETS, FUNCTIONS, KEY_RATE, PER_KEY, tokens
from jobnik.projections.inline.tables import LIMITS


def _running(t: str, g: str) -> str:
    return (
        "(SELECT count(*) FROM tasks_v1 t JOIN jobs_v1 j ON j.id = t.job_id "
        f"WHERE t.stage_type = {t} AND t.status = 'IN_PROGRESS' AND j.gate = {g})"
    )


def _room(backend: str, t: str, g: str) -> str:
    """How many rows of gate (`t`, `g`) may be admitted now: no more than the type's per-key
    limit less the key's tasks IN_PROGRESS (counted on the type's tasks in progress, which the
    claim keeps few) and the whole tokens in the key's bucket (full when it has none yet), never
    below 0; 0 when the type has no limit per key."""
    f = FUNCTIONS[backend]
    bucket = (
        f"(SELECT {tokens(backend, 'b', KEY_RATE)} FROM {BUCKETS} b "
        f"WHERE b.stage_type = {t} AND b.gate = {g})"
    )
    concurrency = (
        f"CASE WHEN l.max_in_progress_per_key IS NULL THEN {MAX_PER_KEY} "
        f"ELSE l.max_in_progress_per_key - {_running(t, g)} END"
    )
    rate = (
        f"CASE WHEN l.key_rate_starts IS NULL THEN {MAX_PER_KEY} "
        f"ELSE {f['floor'].format(f'COALESCE({bucket}, l.key_rate_starts)')} END"
    )
    return (
        f"COALESCE((SELECT {f['greatest']}(0, {f['least']}({concurrency}, {rate})) "
        f"FROM {LIMITS} l WHERE l.stage_type = {t} AND {PER_KEY}), 0)"
    )


@cache
def admitted(t: str, g: str, room: str) -> str:
    """SQL: the task ids of gate (`t`, `g`) to admit now, given its `room` (SQL values; room:
    `_room`), with whether each is held now: two probes (ready rows of queue_v1_gate, delayed
    ones of queue_v1_gate_due) merged, the first `room`."""
    gate = f"stage_type = {t} AND gate = {g} AND stage_open AND job_open"
    ready = (
        f"SELECT task_id, held, 0 AS later, priority_rank, turn, not_before AS due, seq "
        f"FROM queue_v1 WHERE {gate} AND not_before IS NULL "
        f"ORDER BY priority_rank, turn, seq LIMIT {room}"
    )
    delayed = (
        f"SELECT task_id, held, 1 AS later, 0 AS priority_rank, 0 AS turn, not_before AS due, seq "
        f"FROM queue_v1 WHERE {gate} AND not_before IS NOT NULL "
        f"ORDER BY not_before, seq LIMIT {room}"
    )
    return (
        f"SELECT u.task_id, u.held FROM (SELECT * FROM ({ready}) r "
        f"UNION ALL SELECT * FROM ({delayed}) d) u "
        f"ORDER BY u.later, u.priority_rank, u.turn, u.due, u.seq LIMIT {room}"
    )


# The rows to look at are those to admit (`a`) and those admitted now (queue_v1_admitted): never
# the gate's whole queue. Those whose answer changed flip: the rows to admit that the gate's
# probes read held, each then found by its key (`= ANY(ARRAY(...))` has the planner find the ids
# first, where an IN would let it scan the queue), and the rows admitted now that are not to
# admit, locked where the probe of queue_v1_admitted finds them.
_FLIP: Final = (
    "UPDATE queue_v1 SET held = NOT held WHERE EXISTS (SELECT FROM p) AND task_id = ANY(ARRAY("
    "SELECT c.task_id FROM queue_v1 c WHERE c.task_id = ANY(ARRAY(SELECT task_id FROM a "
    "WHERE held)) AND c.held FOR UPDATE OF c SKIP LOCKED) || ARRAY("
    "SELECT n.task_id FROM queue_v1 n JOIN p ON n.stage_type = p.t AND n.gate = p.g "
    "WHERE n.gate IS NOT NULL AND NOT n.held AND n.task_id <> ALL(ARRAY(SELECT task_id FROM a)) "
    "FOR UPDATE OF n SKIP LOCKED))"
)
# SQLite, which has no LATERAL, works the gates out one by one: per gate, its room
# (`gate_room`), then one read of its rows to admit (`admit` 1) and of those admitted now
# (`admit` 0, queue_v1_admitted) (`OpExecutor`).
GATE_ROWS: Final = (
    f"SELECT task_id, 1 AS admit FROM ({admitted('%(t)s', '%(g)s', '%(room)s')}) f "
    "UNION ALL SELECT task_id, 0 FROM queue_v1 WHERE stage_type = %(t)s AND gate = %(g)s "
    "AND gate IS NOT NULL AND NOT held"
)


# The most keys a claim lets through when it finds fewer tasks than it asks for (`due_gates`).
WAKE_BATCH: Final = 50
# The gates (`t`, `g`) of stage type `%(v)s` named by the array `%(g)s` (PostgreSQL's).
GATES_OF_TYPE: Final = "SELECT %(v)s::text AS t, g FROM unnest(%(g)s::text[]) AS g"


@cache
def gate_room(backend: str) -> str:
    """SQL: the room of gate (`%(t)s`, `%(g)s`), as `room`."""
    return f"SELECT {_room(backend, '%(t)s', '%(g)s')} AS room"


@cache
def regate_pairs(pairs: str) -> str:
    """SQL: flip `held` on the rows whose admission changed, of every gate `pairs` (SQL giving
    rows `t`, `g`) names, in one statement (PostgreSQL's: each gate's rows to admit a LATERAL
    probe). A row a claim holds is skipped (FOR UPDATE SKIP LOCKED): the claim takes it, and its
    session checks the key's count under the writer lock (`settle_claim`). Each gate's room is
    worked out once (`p`), for both probes and their merge."""
    rooms = f"SELECT k.t, k.g, {_room('postgres', 'k.t', 'k.g')} AS room FROM ({pairs}) k"
    each = admitted("p.t", "p.g", "p.room")
    each_gate = f"SELECT x.task_id, x.held FROM p CROSS JOIN LATERAL ({each}) x"
    return f"WITH p AS ({rooms}), a AS ({each_gate}) {_FLIP}"


# The gates (`t`, `g`) of stage types with a per-key limit that a command's `Gate` ops name:
# their stages' (`{stages}`: a condition on `s.id`) and their jobs' stages' (`{jobs}`: on
# `s.job_id`), each found by key; or every gate of their stage types (`{types}`: on
# `q.stage_type`), after a limit's change, which reads the type's queue.
_KEYED_GATE: Final = f"JOIN {LIMITS} l ON l.stage_type = k.t WHERE {PER_KEY}"
PAIRS: Final = (
    "SELECT DISTINCT k.t, k.g FROM (SELECT s.type AS t, j.gate AS g FROM stages_v1 s "
    "JOIN jobs_v1 j ON j.id = s.job_id WHERE {stages} "
    "UNION ALL SELECT s.type, j.gate FROM stages_v1 s JOIN jobs_v1 j ON j.id = s.job_id "
    f"WHERE {{jobs}}) k {_KEYED_GATE}"
)
# The gates of stages (`{stages}`) whose task left IN_PROGRESS, the queue unchanged: only a per-key
# limit's room changed, so only the gates of types with one.
ENDED_PAIRS: Final = (
    "SELECT DISTINCT s.type AS t, j.gate AS g FROM stages_v1 s JOIN jobs_v1 j ON j.id = s.job_id "
    f"JOIN {LIMITS} l ON l.stage_type = s.type "
    "WHERE {stages} AND l.max_in_progress_per_key IS NOT NULL"
)
TYPE_PAIRS: Final = (
    "SELECT DISTINCT k.t, k.g FROM (SELECT q.stage_type AS t, q.gate AS g FROM queue_v1 q "
    f"WHERE {{types}} AND q.gate IS NOT NULL) k {_KEYED_GATE}"
)

KEYED_TYPES: Final = f"SELECT l.stage_type FROM {LIMITS} l WHERE {PER_KEY}"

# A stage type's rows as its per-key limit wants them (`Gate` by type, run before its gates are
# worked out again): without one, no gate and nothing held; with one, every row that has no
# gate yet gets its job's, held until its gate admits it.
KEYED: Final = f"EXISTS (SELECT 1 FROM {LIMITS} l WHERE l.stage_type = %(t)s AND {PER_KEY})"
UNGATE: Final = (
    "UPDATE queue_v1 SET gate = NULL, held = FALSE "
    f"WHERE stage_type = %(t)s AND gate IS NOT NULL AND NOT {KEYED}"
)
ENGATE: Final = (
    "UPDATE queue_v1 SET gate = (SELECT j.gate FROM jobs_v1 j WHERE j.id = queue_v1.job_id), "
    f"held = TRUE WHERE stage_type = %(t)s AND gate IS NULL AND {KEYED}"
)


def gate_keys(
    keys: Iterable[Mapping[str, Any]],
) -> tuple[list[Any], list[Any], list[str], list[Any]]:
    """The stages, jobs and stage types a command's `Gate` ops name, each once, in order, and the
    stages named only for a task that left IN_PROGRESS (`ended_stage_id`)."""
    stages: dict[Any, None] = {}
    jobs: dict[Any, None] = {}
    types: dict[str, None] = {}
    ended: dict[Any, None] = {}
    for key in keys:
        if "stage_id" in key:
            stages[key["stage_id"]] = None
        elif "ended_stage_id" in key:
            ended[key["ended_stage_id"]] = None
        elif "job_id" in key:
            jobs[key["job_id"]] = None
        else:
            types[key["stage_type"]] = None
    return list(stages), list(jobs), list(types), [s for s in ended if s not in stages]


def model_admitted(
    rows: Sequence[Mapping[str, Any]], limit: int, running: int
) -> list[Mapping[str, Any]]:
    """The rows of one gate (queue rows of one type and key) that `regate` admits, given the
    limit and the key's tasks in progress: the in-memory model of the SQL above."""
    open_rows = [r for r in rows if r["stage_open"] and r["job_open"]]
    ready = sorted(
        (r for r in open_rows if r["not_before"] is None),
        key=lambda r: (r["priority_rank"], r["turn"], r["seq"]),
    )
    delayed = sorted(
        (r for r in open_rows if r["not_before"] is not None),
        key=lambda r: (r["not_before"], r["seq"]),
    )
    return [*ready, *delayed][: max(0, limit - running)]

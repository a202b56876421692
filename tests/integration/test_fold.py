"""The rebuild's fold (projections/rebuild/fold.py) against the op-by-op path, on hand-made pages: a
Delete by another column than the primary key is folded, and every row comes out as the
op-by-op statements leave it."""

from __future__ import annotations

from typing import Any
from uuid import UUID, uuid4

import pytest

from jobnik.projections.inline.ops import Add, Delete, Insert, Op, Update
from jobnik.projections.inline.tables import PRIMARY_KEYS, QUEUE, SUMMARIES
from jobnik.projections.rebuild.fold import Fold
from jobnik.projections.rebuild.rowstate import PK1
from jobnik.projections.store.base import SqlStore
from jobnik.projections.store.bulk import Column
from jobnik.projections.store.executor import OpExecutor
from jobnik.projections.store.names import identity

JOB, OTHER = uuid4(), uuid4()


class _Undo(Exception):
    pass


def rows_after(
    store: SqlStore, pages: list[list[Op]], *, folded: bool, table: str = SUMMARIES
) -> list[dict[str, Any]]:
    """`pages` applied, folded a page at a time (then an empty page, as a rebuild's pass ends)
    or op by op; the rows of `table` then (rolled back)."""
    executor = OpExecutor(store.dialect, None)
    fold = Fold(executor, store.bulk(identity))
    rows: list[dict[str, Any]] = []
    try:
        with store.cursor(write=True) as cur:
            for page in pages:
                if folded:
                    fold.apply(cur, [[op] for op in page])
                else:
                    for op in page:
                        cur.execute(*executor.statement(op))
            if folded:
                fold.apply(cur, [])
            rows = cur.all(f"SELECT * FROM {table} ORDER BY {PRIMARY_KEYS[table]}")
            raise _Undo
    except _Undo:
        pass
    return rows


def stage(n: int) -> UUID:
    return UUID(int=n)


def insert(n: int, job: UUID = JOB) -> Insert:
    return Insert(SUMMARIES, {"stage_id": stage(n), "job_id": job})


def cases() -> dict[str, list[list[Op]]]:
    stored = [insert(i, JOB if i % 2 else OTHER) for i in range(1, 9)]
    gone = Delete(SUMMARIES, {"job_id": JOB})
    return {
        # stored rows of the job, rows patched in the page (counters only: the statement
        # decides), a row inserted before the Delete (gone) and one after it (kept)
        "stored, patched, new": [
            stored,
            [
                Add(SUMMARIES, {"stage_id": stage(1)}, {"pending": 2}),
                Add(SUMMARIES, {"stage_id": stage(2)}, {"pending": 1}),
                insert(20),
                insert(21, OTHER),
                gone,
                insert(22),
                Add(SUMMARIES, {"stage_id": stage(3)}, {"completed": 1}),
                Add(SUMMARIES, {"stage_id": stage(22)}, {"completed": 1}),
            ],
        ],
        # a patch moves a stored row into the set (gone) and one out of it (kept: the
        # stored row matched, so the Delete cannot run before the patch)
        "patched into and out of the set": [
            stored,
            [
                Update(SUMMARIES, {"stage_id": stage(2)}, {"job_id": JOB}),
                Update(SUMMARIES, {"stage_id": stage(3)}, {"job_id": OTHER}),
                gone,
                Add(SUMMARIES, {"stage_id": stage(3)}, {"failed": 1}),
            ],
        ],
        # a row inserted in the page and moved out of the set before the Delete
        "new, moved out": [
            stored,
            [insert(30), Update(SUMMARIES, {"stage_id": stage(30)}, {"job_id": OTHER}), gone],
        ],
        # two Deletes by column in one page, and rows deleted and inserted again
        "two deletes": [
            stored,
            [
                gone,
                insert(1, OTHER),
                Delete(SUMMARIES, {"job_id": OTHER}),
                insert(2, JOB),
                Delete(SUMMARIES, {"stage_id": stage(5)}),
                insert(5, OTHER),
            ],
        ],
    }


@pytest.mark.parametrize("case", list(cases()))
def test_a_delete_by_another_column_folds_to_the_rows_of_the_op_by_op_path(
    store: SqlStore, case: str
) -> None:
    pages = cases()[case]
    expected = rows_after(store, pages, folded=False)

    assert rows_after(store, pages, folded=True) == expected
    assert expected  # (something is left to compare)


def queued(n: int, stage_id: UUID, seq: int) -> Insert:
    return Insert(
        QUEUE,
        {
            "task_id": UUID(int=1000 + n),
            "job_id": JOB,
            "stage_id": stage_id,
            "stage_type": "t",
            "priority_rank": 3,
            "seq": seq,
            "stage_open": True,
            "job_open": True,
        },
    )


def test_queue_rows_carried_to_the_next_page_end_as_the_op_by_op_path_leaves_them(
    store: SqlStore,
) -> None:
    """A page's new queue rows wait for the next page (fold.CARRIED): there they are deleted
    by key, by stage, or kept; a row carried once is written with the page after; the empty
    page at the end writes the last page's."""
    a, b = stage(1), stage(2)
    pages: list[list[Op]] = [
        [queued(i, a if i % 2 else b, i + 1) for i in range(8)],  # (positions start at 1)
        [
            Delete(QUEUE, {"task_id": UUID(int=1000)}),
            Delete(QUEUE, {"stage_id": a}),
            queued(20, a, 20),
            queued(21, b, 21),
        ],
        [Delete(QUEUE, {"task_id": UUID(int=1002)}), queued(30, b, 30)],
        [Delete(QUEUE, {"task_id": UUID(int=1021)}), queued(40, a, 40)],
    ]
    expected = rows_after(store, pages, folded=False, table=QUEUE)

    assert rows_after(store, pages, folded=True, table=QUEUE) == expected
    assert {r["task_id"].int - 1000 for r in expected} == {4, 6, 20, 30, 40}


def test_every_one_column_primary_key_the_fold_keys_by_integer_is_a_uuid(
    pg_store: SqlStore,
) -> None:
    """fold._memo keys rows by a UUID's integer and fold._stored turns an integer back into a
    UUID: no one-column primary key may be an integer (a name, kept as it is, may be text)."""
    fold = Fold(OpExecutor(pg_store.dialect, None), pg_store.bulk(identity))
    with pg_store.cursor(write=False) as cur:
        types = {table: fold.bulk.types(cur, table)[column].type for table, column in PK1.items()}

    assert set(types.values()) <= {"uuid", "text"}
    assert {t for t, type_ in types.items() if type_ == "uuid"} >= {SUMMARIES, QUEUE}


def test_an_add_the_fold_cannot_finish_leaves_the_row_to_its_statement(store: SqlStore) -> None:
    """An Add to a new row naming a column whose default memory does not know is a barrier:
    its statement then adds every delta once, none of them also folded into the row."""
    executor = OpExecutor(store.dialect, None)
    fold = Fold(executor, store.bulk(identity))
    page: list[Op] = [
        insert(1),
        Add(SUMMARIES, {"stage_id": stage(1)}, {"pending": 1, "failed": 2}),
    ]
    rows: list[dict[str, Any]] = []
    try:
        with store.cursor(write=True) as cur:
            failed = fold.bulk.types(cur, SUMMARIES)["failed"]
            fold.bulk.columns[SUMMARIES]["failed"] = Column(failed.type, None, True, failed.oid)
            fold.apply(cur, [[op] for op in page])
            rows = cur.all(f"SELECT pending, failed FROM {SUMMARIES}")
            raise _Undo
    except _Undo:
        pass

    assert rows == [{"pending": 1, "failed": 2}]

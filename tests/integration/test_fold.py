"""The rebuild's fold (projections/fold.py) against the op-by-op path, on hand-made pages: a
Delete by another column than the primary key is folded, and every row comes out as the
op-by-op statements leave it."""

from __future__ import annotations

from typing import Any
from uuid import UUID, uuid4

import pytest

from jobnik.projections.entities import Add, Delete, Insert, Op, Update
from jobnik.projections.executor import OpExecutor
from jobnik.projections.fold import Fold
from jobnik.projections.schema import SUMMARIES
from jobnik.projections.shadow import identity
from jobnik.projections.store import SqlStore

JOB, OTHER = uuid4(), uuid4()


class _Undo(Exception):
    pass


def summaries(store: SqlStore, pages: list[list[Op]], *, folded: bool) -> list[dict[str, Any]]:
    """`pages` applied to summaries_v1, folded a page at a time or op by op; the rows then
    (rolled back)."""
    executor = OpExecutor(store.dialect, None)
    fold = Fold(executor, identity)
    rows: list[dict[str, Any]] = []
    try:
        with store.cursor(write=True) as cur:
            for page in pages:
                if folded:
                    fold.apply(cur, [[op] for op in page])
                else:
                    for op in page:
                        cur.execute(*executor.statement(op))
            rows = cur.all(f"SELECT * FROM {SUMMARIES} ORDER BY stage_id")
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
    expected = summaries(store, pages, folded=False)

    assert summaries(store, pages, folded=True) == expected
    assert expected  # (something is left to compare)

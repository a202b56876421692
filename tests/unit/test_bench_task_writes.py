from __future__ import annotations

from jobnik.scripts.bench.task_writes import RECORD, of_database

HEAD = "rmgr: {rmgr:11} len (rec/tot): {rec:6}/{tot:6}, tx: {tx:10}, lsn: 0/0A000028, prev 0/0A0"
LINES = [
    HEAD.format(rmgr="Heap", rec=79, tot=79, tx=901)
    + ", desc: HOT_UPDATE off 3, blkref #0: rel 1663/16384/16390 blk 0",
    HEAD.format(rmgr="Btree", rec=64, tot=8256, tx=902)
    + ", desc: INSERT_LEAF off 2, blkref #0: rel 1663/99999/16400 blk 1 FPW",
    HEAD.format(rmgr="Transaction", rec=34, tot=34, tx=901) + ", desc: COMMIT 2026-11-29",
    HEAD.format(rmgr="Standby", rec=50, tot=50, tx=0) + ", desc: RUNNING_XACTS",
]


def test_a_databases_wal_is_the_records_of_the_transactions_that_wrote_to_its_files() -> None:
    records = []
    for line in LINES:
        m = RECORD.search(line)
        assert m is not None
        records.append((int(m[3]), int(m[1]), int(m[2]), line))

    assert [(size, total) for size, total, _ in of_database(records, 16384)] == [(79, 79), (34, 34)]
    assert [(size, total) for size, total, _ in of_database(records, 99999)] == [(64, 8256)]

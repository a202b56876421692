"""A "create-map" job as a runnable two-stage pipeline: process tiles, then upload them.

Run the API (`jobnik serve`), then in other terminals:

    jobnik worker run examples.create_map:process_tile --stage-type process-tiles --concurrency 4
    jobnik worker run examples.create_map:upload --stage-type upload-tiles
    python -m examples.create_map            # creates the job and waits for it

(from the project root, so that `examples` imports). JOBNIK_API_URL overrides the API address;
with access control on, each finds its token in JOBNIK_TOKEN: a producer token for the job
creator, a worker token for each stage type (`jobnik tokens create tiler --role worker
--stage-type process-tiles`).
"""

from __future__ import annotations

import hashlib
import sys
import time
from typing import Any

from jobnik.workers import FatalTaskError, Producer, Task, TaskContext


def process_tile(task: Task, context: TaskContext) -> None:
    """Stage 1: 'render' a tile (a hash stands in for real work), checking for cancellation."""
    tile = task.data["tileId"]
    if tile.endswith("corrupt"):
        raise FatalTaskError(f"tile {tile} is corrupt")  # no retry for bad input
    for step in range(5):
        if context.cancelled:  # the job was aborted or the worker is shutting down
            context.log(f"tile {tile}: cancelled at step {step} ({context.cancel_reason})")
            return
        time.sleep(0.02)
    digest = hashlib.sha256(f"{tile}:{context.stage.data['resolution']}".encode()).hexdigest()
    context.log(f"tile {tile} rendered at {context.stage.data['resolution']}: {digest[:12]}")


def upload(task: Task, context: TaskContext) -> dict[str, Any]:
    """Stage 2: 'upload' the rendered tiles of the job's map; the task's result says where
    and when (a worker token may report results, not edit user metadata)."""
    context.log(f"uploading map {context.job.data['mapId']} to {task.data['bucket']}")
    return {"uploadedTo": task.data["bucket"], "uploadedAt": time.time()}


def main(tiles: int = 20) -> dict[str, Any]:
    producer = Producer()  # JOBNIK_API_URL and JOBNIK_TOKEN, or the local server
    job = producer.create_job("create-map", {"mapId": "map-123"}, priority="HIGH")
    tiling = producer.create_stage(job.id, "process-tiles", {"resolution": "high"})
    uploading = producer.create_stage(job.id, "upload-tiles", {})
    producer.create_tasks(tiling.id, [{"tileId": f"tile-{i:03}"} for i in range(tiles)])
    producer.create_tasks(uploading.id, [{"bucket": "s3://maps/map-123"}])
    print(f"job {job.id} created; waiting for workers…", file=sys.stderr)
    while (current := producer.job(job.id)).status not in ("COMPLETED", "FAILED", "ABORTED"):
        time.sleep(0.5)
    print(f"job {job.id}: {current.status} ({current.percentage} %)")
    return {"id": job.id, "status": current.status}


if __name__ == "__main__":
    main()

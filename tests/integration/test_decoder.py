"""The store's transcoder makes of every stored event what the library's own JSON transcoder
makes of it, except that a value the library cannot decode is kept as it is instead of failing
the whole event."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from datetime import datetime
from typing import Any
from uuid import uuid4

import pytest
from eventsourcing.application import Application
from eventsourcing.persistence import (
    JSONTranscoder,
    Mapper,
    MapperDeserialisationError,
    StoredEvent,
)

from jobnik.domain.application import Jobnik, NewJob, NewStage, NewTask
from jobnik.projections.store.base import SqlStore

from .test_rebuild import random_workload

# User data the library's transcoder reads as objects, or leaves as dicts, all the same.
SHAPED: dict[str, Any] = {
    "uuid": {"_type_": "uuid_hex", "_data_": uuid4().hex},
    "uuid_with_dashes": {"_type_": "uuid_hex", "_data_": str(uuid4())},
    "time": {"_type_": "datetime_iso", "_data_": "2024-02-03T04:05:06.789+02:00"},
    "naive_time": {"_type_": "datetime_iso", "_data_": "2024-02-03"},
    "decimal": {"_type_": "decimal_str", "_data_": "1.50"},
    "three_keys": {"_type_": "uuid_hex", "_data_": uuid4().hex, "x": 1},
    "type_only": {"_type_": "uuid_hex"},
    "no_data": {"_type_": "uuid_hex", "other": "x"},
    "no_type": {"_data_": "x", "other": 1},
    "nested": [{"deeper": {"_type_": "datetime_iso", "_data_": "2020-01-01T00:00:00+00:00"}}],
}


def library(store: SqlStore) -> Callable[[StoredEvent], Any]:
    """The library's own mapper, with its own JSON transcoder and transcodings."""
    transcoder = JSONTranscoder()
    Application.register_transcodings(None, transcoder)  # type: ignore[arg-type]
    return Mapper(transcoder=transcoder).to_domain_event


def described(event: Any) -> tuple[type, dict[str, tuple[type, Any]]]:
    """An event's class and its attributes with their types (a UUID never equals its text)."""
    return type(event), {k: (type(v), v) for k, v in vars(event).items()}


def test_every_event_of_a_log_decodes_as_the_library_decodes_it(
    store: SqlStore, jobnik: Jobnik
) -> None:
    random_workload(jobnik, random.Random(7), 300)
    job = jobnik.create_job(NewJob(name="shaped", data=SHAPED))
    stage = jobnik.add_stage(job.id, NewStage(type="shaped", data=SHAPED))
    jobnik.add_tasks(stage.id, [NewTask(data=SHAPED)])
    notes = store.notifications(0, 100_000)

    decoded = [described(store.decode(n)) for n in notes]

    assert decoded == [described(library(store)(n)) for n in notes]
    assert len({t for t, _ in decoded}) >= 15  # many event classes, not a few
    [created] = [e for t, e in decoded if t.__name__ == "JobCreated" and e["name"][1] == "shaped"]
    assert created["data"][1]["uuid"] != SHAPED["uuid"]  # read as a UUID, as the library does


@pytest.mark.parametrize(
    "value",
    [
        {"_type_": "unknown", "_data_": 1},  # a transcoding nobody registered
        {"_type_": "uuid_hex", "_data_": 7},  # not the text of a UUID
        {"_type_": "uuid_hex", "_data_": "7"},
        {"_type_": "datetime_iso", "_data_": "yesterday"},
    ],
)
def test_a_value_the_library_cannot_decode_is_kept_as_the_object_it_is(
    store: SqlStore, value: dict[str, Any]
) -> None:
    state = json.dumps({"timestamp": SHAPED["time"], "data": {"a": value, "b": [value]}})
    stored = StoredEvent(uuid4(), 1, "jobnik.domain.jobs:Job.JobCreated", state.encode())

    assert error_of(library(store), stored) is not None  # the library fails
    event = store.decode(stored)
    assert event.data == {"a": value, "b": [value]}
    assert event.timestamp == datetime.fromisoformat(SHAPED["time"]["_data_"])


@pytest.mark.parametrize(
    "state",
    [
        b'{"timestamp":1} trailing',
        b"[1, 2]",
        b"\xff",
    ],
)
def test_a_state_that_is_not_one_json_object_raises_the_librarys_error(
    store: SqlStore, state: bytes
) -> None:
    stored = StoredEvent(uuid4(), 1, "jobnik.domain.jobs:Job.JobCreated", state)

    assert error_of(library(store), stored) in (MapperDeserialisationError, TypeError)
    assert error_of(store.decode, stored) is MapperDeserialisationError


def error_of(decode: Callable[[StoredEvent], Any], stored: StoredEvent) -> type[Exception] | None:
    try:
        decode(stored)
    except Exception as e:  # noqa: BLE001 - which error it is, is what the test compares
        return type(e)
    return None

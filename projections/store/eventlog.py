"""The eventsourcing library's application that holds jobnik's event log."""

from __future__ import annotations

from uuid import UUID

from eventsourcing.application import Application


class EventLog(Application[UUID]):
    """The library application: mapper (transcoding), recorder and repository of jobnik's events."""

    name = "jobnik"

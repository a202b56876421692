"""Persistence: the event log, the backends' stores and sessions, migrations, SQL dialects."""

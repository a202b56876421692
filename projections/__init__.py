"""Read models: pure projections of the event log, the store that applies them, and rebuilds.

- `inline/`: an event → the row operations it makes to the read models the API reads right after
  a command (jobs, stages, summaries, tasks, the queue, task logs, the history index). Pure.
- `store/`: persistence. The event log, one store and session per backend (the domain's
  `Session` port over the inline tables, written in the command's transaction), the SQL dialects,
  the schema and its migrations, the locks several processes share.
- `catchup/`: derived views that follow the log behind a tracking position (lastStatus, run
  statistics), their runner, and the registry of every projection's version and position.
- `queries/`: what the API reads: entity views, the catch-up views, the audit log, time travel.
- `rebuild/`: blue/green rebuilds and verification: reading the log, folding pages, bulk writes,
  parallel parts, shadow tables and the swap.
"""

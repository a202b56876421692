"""Read models: pure projections of the event log, the store that applies them, and rebuilds.

- `inline/`: an event → the row operations it makes to the read models the API reads right after
  a command (jobs, stages, summaries, tasks, the queue, task logs, the history index). Pure.
- `store/`: persistence, and every difference between the backends. The event log, one store and
  session class per backend (the domain's `Session` port over the inline tables, written in the
  command's transaction), named SQL (sql/), numbered migrations, bulk writers, leader locks.
- `catchup/`: derived views that follow the log behind a tracking position (lastStatus, run
  statistics), their runner, and the registry of every projection's version and position.
- `queries/`: what the API reads: entity views, the catch-up views, the audit log, time travel.
- `rebuild/`: blue/green rebuilds and verification: reading the log, folding pages, parallel
  parts, shadow tables and the swap.
- `startup.py`: what a process does before it serves: migrate, register, rebuild what a
  migration made stale.
"""

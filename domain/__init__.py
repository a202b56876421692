"""jobnik's domain: Job, Stage and Task aggregates, their events, rules and errors (no I/O)."""

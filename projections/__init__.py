"""Read models: pure projections of the event log, and the store that applies them inline."""

"""The inline read models as pure functions: an event → the row operations it makes, applied in the
transaction of the command that appended it (the store runs them as SQL)."""

"""Catch-up projections: derived views that follow the event log behind a tracking position."""

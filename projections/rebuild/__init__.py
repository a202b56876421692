"""Blue/green rebuilds and verification of projections, from the event log alone."""

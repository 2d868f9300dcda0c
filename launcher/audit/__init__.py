"""The audit log: written one chained line per call, read back and verified."""

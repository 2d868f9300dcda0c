"""Keeping what host tools load or run out of the writable roots during a session."""

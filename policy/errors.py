"""User-facing errors of the policy package."""

from __future__ import annotations


class InputFileError(Exception):
    """An input file is unreadable or invalid. Names the file, where, and what was wrong."""

    exit_code = 2

    def __init__(self, file: str, location: str, detail: str) -> None:
        self.file = file
        self.location = location
        self.detail = detail
        where = f"{file}: {location}" if location else file
        super().__init__(f"{where}: {detail}")


class PolicyFileError(InputFileError):
    """A policy file (annotations or compiled policy) is unreadable or invalid."""

"""User-facing errors of the launcher: each carries what the user needs to fix it."""

from __future__ import annotations

from policy.errors import InputFileError


class ConfigError(InputFileError):
    """``mcp-servers.json`` is unreadable or invalid."""


class UsageError(Exception):
    """A command-line option names something that does not exist or cannot be used."""

    exit_code = 2


class SandboxUnavailable(Exception):
    """The machine cannot sandbox and the user did not allow unsandboxed servers."""

    exit_code = 3


class StartupError(Exception):
    """A server could not be started; nothing is left running."""

    exit_code = 1


USER_ERRORS = (InputFileError, UsageError, SandboxUnavailable, StartupError)

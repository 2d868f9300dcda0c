"""User-facing errors of the launcher: each carries what the user needs to fix it.

The library names a setting in its own words: the field of the options it was given
(``http_port``, ``servers``). An error about one carries it as data (``option``, and the
value it had), and its text names any other setting as ``{field}``; only the command layer
knows what the user typed, and says each setting in those words (``--http``) through
:meth:`UserError.said`. ``str`` gives the library's words.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from policy.errors import InputFileError

# How a command calls a setting the library names by its field.
Names = Callable[[str], str]


def by_field(setting: str) -> str:
    """The library's own name of a setting: its field."""
    return setting


class UserError(Exception):
    """An error the user can act on. ``option`` (and its ``value``, when there is one to
    show): the setting to blame; ``mentions``: the settings the text names as
    ``{field}``.

    >>> error = UserError("is only used with {http_port}", "http_token_file", "t",
    ...                   mentions=("http_port",))
    >>> str(error)
    'http_token_file t: is only used with http_port'
    >>> error.said({"http_port": "--http", "http_token_file": "--http-token-file"}.__getitem__)
    '--http-token-file t: is only used with --http'
    """

    exit_code = 2
    # ``own_lines``: the text's line breaks are ironcurtain's own, and whatever it quotes
    # was made safe to show one line at a time (``launcher.shared.shown.visible``): it is
    # printed as lines. Else it is printed as one line, every line break shown as an escape.

    def __init__(
        self,
        text: str,
        option: str | None = None,
        value: object = None,
        *,
        mentions: Sequence[str] = (),
        own_lines: bool = False,
    ) -> None:
        super().__init__(text)
        self.text, self.option, self.value = text, option, value
        self.mentions = tuple(mentions)
        self.own_lines = own_lines

    def said(self, names: Names = by_field) -> str:
        """The message, each setting named as ``names`` says."""
        text = self.text
        for setting in self.mentions:
            text = text.replace("{" + setting + "}", names(setting))
        if self.option is None:
            return text
        shown = names(self.option) if self.value is None else f"{names(self.option)} {self.value}"
        return f"{shown}: {text}"

    def __str__(self) -> str:
        return self.said()


class ConfigError(InputFileError):
    """``mcp-servers.json`` is unreadable or invalid."""


class CallerNeeded(ConfigError, UserError):
    """A config value names ``${caller}`` (the caller's name made safe for a path), and the
    session has no caller.

    >>> CallerNeeded("c.json", "$.mcpServers.fs.cwd").said()[:68]
    "c.json: $.mcpServers.fs.cwd: names ${caller}, the caller's name, and"
    """

    def __init__(self, file: str, location: str) -> None:
        detail = (
            "names ${caller}, the caller's name, and this session has no caller: give "
            "{caller_file}, or {oidc_issuer} and {oidc_audience} with {http_port} "
            "(or write ${caller:-name} for a session without one)"
        )
        ConfigError.__init__(self, file, location, detail)
        self.text, self.option, self.value = f"{file}: {location}: {detail}", None, None
        self.mentions = ("caller_file", "oidc_issuer", "oidc_audience", "http_port")
        self.args = (file, location)


class UsageError(UserError):
    """What a command was given names something that does not exist or cannot be used."""

    exit_code = 2


class OptionError(UsageError):
    """The setting ``option`` cannot be ``value``: ``problem``.

    >>> str(OptionError("audit_args", "plain", "expected hashed or clear"))
    'audit_args plain: expected hashed or clear'
    """

    def __init__(
        self, option: str, value: object, problem: str, *, mentions: Sequence[str] = ()
    ) -> None:
        super().__init__(problem, option, value, mentions=mentions)
        self.args = (option, value, problem)  # what makes it again (a copy, a pickle)
        self.problem = problem


class SandboxUnavailable(UserError):
    """The machine cannot sandbox and the user did not allow unsandboxed servers."""

    exit_code = 3


class SandboxRefused(SandboxUnavailable):
    """Servers cannot be sandboxed as asked (``problem``; ``fix``), and the setting
    ``override`` would run them anyway, ``effect``.

    >>> error = SandboxRefused("bwrap is missing", "install it", "allow_unsandboxed", "run bare")
    >>> print(error)
    cannot sandbox servers: bwrap is missing.
    To fix: install it; or pass allow_unsandboxed to run bare.
    """

    def __init__(self, problem: str, fix: str, override: str, effect: str) -> None:
        text = f"cannot sandbox servers: {problem}.\nTo fix: {fix}; or pass {{{override}}}"
        super().__init__(f"{text} to {effect}.", mentions=(override,))
        self.args = (problem, fix, override, effect)
        self.problem, self.fix, self.override, self.effect = problem, fix, override, effect


class StartupError(UserError):
    """A server could not be started; nothing is left running."""

    exit_code = 1


USER_ERRORS = (InputFileError, UserError)

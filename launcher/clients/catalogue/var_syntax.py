"""An entry's variables, as its client fills them, said in the form of ironcurtain's config.

Each client has its own syntax, and ``ironcurtain run`` fills every ``${NAME}`` of a
definition from its environment: a value moved as it is would be filled where its client
passed it as text. So each value is translated:

| client | fills | passes as text |
|---|---|---|
| Claude Code | ``${NAME}``, ``${NAME:-default}`` (as ironcurtain does) | nothing of that form |
| Copilot CLI (its ``env`` only) | ``$NAME``, ``${NAME}``, ``${NAME:-default}`` | ``${anything else}`` |
| Kiro (its ``env`` only) | ``${NAME}`` | ``${anything else}`` |
| Gemini CLI | ``$NAME``, ``${NAME}`` | ``${anything else}`` |
| VS Code, Cursor | ``${env:NAME}``, ``${workspaceFolder}`` and their own (``${userHome}``, ``${input:…}``) | ``${ANY_OTHER}`` |
| Windsurf | ``${env:NAME}``, ``${file:…}`` | ``${ANY_OTHER}`` |
| opencode | ``{env:NAME}``, ``{file:…}`` | every ``${…}`` |
| Crush | ``$NAME``, ``${NAME}``, ``$(command)`` | nothing of that form |
| every other client | nothing | every ``${…}`` |

What the client fills from its environment becomes ``${NAME}``; its project directory
becomes ``${workspace}``. ironcurtain's config has no escape for a literal ``${…}``, and
wrap cannot say a client's own values (the user's input, the open file), so an entry
holding either is left alone, with the reason.
"""  # noqa: E501

from __future__ import annotations

import re

from launcher.clients.catalogue.table import Client

WORKSPACE = "${workspace}"
# As ironcurtain's config reads a reference (policy.variables.PLACEHOLDER).
_CONFIG_REFERENCE = re.compile(r"\$\{([^}]*)\}")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_BRACED = re.compile(r"\$\{([^}]*)\}")
# Gemini CLI (and Crush): $NAME or ${NAME} (a word), anything else left as it is.
_GEMINI = re.compile(r"\$(?:(\w+)|\{([^}]+)\})")
# opencode: {env:NAME} and {file:PATH}, filled wherever they are in its file.
_OPENCODE = re.compile(r"\{(env|file):([^}]*)\}")
_PATTERNS = {"gemini": _GEMINI, "shell": _GEMINI, "copilot": _GEMINI, "opencode": _OPENCODE}
# Copilot CLI's ${NAME:-default} (a default without $ or }).
_WITH_DEFAULT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*):-([^$}]*)")
# VS Code's own variables (Cursor's are a subset): filled by the editor, never from the
# environment; wrap cannot know their values when the server starts.
_EDITOR_VARIABLES = frozenset(
    {
        "userHome", "workspaceFolderBasename", "workspaceRoot", "file", "fileWorkspaceFolder",
        "relativeFile", "relativeFileDirname", "fileBasename", "fileBasenameNoExtension",
        "fileExtname", "fileDirname", "fileDirnameBasename", "cwd", "lineNumber",
        "selectedText", "execPath", "defaultBuildTask", "pathSeparator", "/",
        "extensionInstallFolder",
    }
)  # fmt: skip
_EDITOR_PREFIXES = ("input:", "config:", "command:", "workspaceFolder:", "extensionDir:")


class LeftAlone(Exception):
    """The entry is not wrapped; the message says why."""


def filled(client: Client, env: bool) -> str:
    """The variables ``client`` fills in a value of its entry's env (``env``) or elsewhere."""
    return client.variables if env or client.filled_in == "all" else "none"


def unread(client: Client, value: str) -> str | None:
    """Why ``client`` would not take ``value`` as written (it fills in what looks like a
    variable in it, or runs a command for it); None when it takes it as it is.

    >>> from launcher.clients.catalogue.known import BY_NAME
    >>> unread(BY_NAME["opencode"], "/home/u/work/..{env:U}")
    "'/home/u/work/..{env:U}': opencode fills in what looks like a variable in it"
    >>> unread(BY_NAME["opencode"], "/home/u/work") is None
    True
    """
    try:
        said, names = translate(client, value)
    except LeftAlone as exc:
        return str(exc)
    if names or said != value:
        return f"{value!r}: {client.label} fills in what looks like a variable in it"
    return None


def translate(client: Client, value: str, env: bool = False) -> tuple[str, list[str]]:
    """``value`` (one of its entry's env values: ``env``) as ironcurtain's config says what
    ``client`` makes of it, and the names of the environment variables it refers to.
    :class:`LeftAlone` when it cannot be said.

    >>> from launcher.clients.catalogue.known import BY_NAME
    >>> translate(BY_NAME["vscode"], "${env:TOKEN}")
    ('${TOKEN}', ['TOKEN'])
    >>> translate(BY_NAME["vscode"], "${workspaceFolder}/src")
    ('${workspace}/src', [])
    >>> translate(BY_NAME["gemini"], "$HOME/x")
    ('${HOME}/x', ['HOME'])
    >>> translate(BY_NAME["zed"], "price: $5")
    ('price: $5', [])
    >>> translate(BY_NAME["opencode"], "Bearer {env:TOKEN}")
    ('Bearer ${TOKEN}', ['TOKEN'])
    >>> translate(BY_NAME["copilot-cli"], "$TOKEN", env=True)
    ('${TOKEN}', ['TOKEN'])
    >>> translate(BY_NAME["copilot-cli"], "${LEVEL:-info}", env=True)
    ('${LEVEL:-info}', ['LEVEL'])
    >>> translate(BY_NAME["copilot-cli"], "$HOME/x")
    ('$HOME/x', [])
    >>> translate(BY_NAME["kiro"], "${TOKEN}", env=True)
    ('${TOKEN}', ['TOKEN'])
    """
    mode = filled(client, env)
    if mode == "shell" and ("$(" in value or "`" in value):
        raise LeftAlone(
            f"{value!r}: {client.label} runs the command in $(...) or `...` to fill it, which "
            "wrap cannot say in ironcurtain's config"
        )
    pattern = _PATTERNS.get(mode, _BRACED)
    out: list[str] = []
    spans: set[tuple[int, int]] = set()
    names: list[str] = []
    length = last = 0
    for match in pattern.finditer(value):
        literal = value[last : match.start()]
        out.append(literal)
        length += len(literal)
        meant = _meaning(client, mode, match)
        piece = match.group() if meant is None else meant[0]
        if meant is not None:
            spans.add((length, length + len(piece)))
            if meant[1] is not None:
                names.append(meant[1])
        out.append(piece)
        length += len(piece)
        last = match.end()
    out.append(value[last:])
    result = "".join(out)
    for ref in _CONFIG_REFERENCE.finditer(result):
        if ref.span() not in spans:
            raise LeftAlone(
                f"{value!r}: {client.label} passes {ref.group()!r} to the server as that very "
                "text, and ironcurtain's config cannot hold it as text (it would fill it from "
                "the environment)"
            )
    return result, names


def _meaning(client: Client, mode: str, match: re.Match[str]) -> tuple[str, str | None] | None:
    """What one variable of ``client``'s syntax (``mode``: the variables it fills there)
    becomes: ironcurtain's reference and the environment name it reads (None: none), or
    None when the client leaves it as text."""
    if mode == "copilot":
        name = match.group(1) or match.group(2)
        default = _WITH_DEFAULT.fullmatch(name)
        if default is not None and default.group(1) != "workspace":
            return match.group(), default.group(1)
        if _NAME.fullmatch(name) and name != "workspace":
            return "${" + name + "}", name
        return None
    if mode == "kiro":
        name = match.group(1)
        return ("${" + name + "}", name) if _NAME.fullmatch(name) and name != "workspace" else None
    if mode == "claude":  # ironcurtain's own syntax
        name = match.group(1).partition(":-")[0]
        if name == "workspace":
            raise LeftAlone(
                f"{match.group()!r}: Claude Code fills it from its environment, ironcurtain "
                "with the session's workspace"
            )
        return match.group(), name
    if mode == "opencode":
        kind, name = match.group(1), match.group(2)
        if kind == "env" and _NAME.fullmatch(name) and name != "workspace":
            return "${" + name + "}", name
        raise LeftAlone(
            f"{match.group()!r}: opencode fills it with a value of its own, which wrap "
            "cannot say in ironcurtain's config"
        )
    if mode in ("gemini", "shell"):
        name = match.group(1) or match.group(2)
        if _NAME.fullmatch(name) and name != "workspace":
            return "${" + name + "}", name
        return None
    if mode not in ("vscode", "windsurf"):
        return None  # a client that fills nothing
    body = match.group(1)
    kind, colon, name = body.partition(":")
    if colon and kind == "env" and _NAME.fullmatch(name) and name != "workspace":
        return "${" + name + "}", name
    if body == "workspaceFolder" and client.variables == "vscode":
        return WORKSPACE, None
    if client.variables == "windsurf":
        known = kind in ("env", "file") and bool(colon)
    else:
        known = body in _EDITOR_VARIABLES or body.startswith(("env:", *_EDITOR_PREFIXES))
    if known:
        raise LeftAlone(
            f"{match.group()!r}: {client.label} fills it with a value of its own, which wrap "
            "cannot say in ironcurtain's config"
        )
    return None

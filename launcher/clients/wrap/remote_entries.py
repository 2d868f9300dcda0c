"""A client's remote (URL) entry, wrapped: its ``url``, transport and static headers move
into ironcurtain's user config as a remote server, and the client's entry starts
``ironcurtain run --server NAME`` instead (the client then talks to ironcurtain over stdio,
ironcurtain to the remote server, through the gate).

Each client writes a remote entry its own way (:data:`FORMS`, from each client's
documentation): Claude Code, Copilot CLI and VS Code ``{"type": "http"|"sse", "url",
"headers"}``, Cursor the same with ``type`` optional, Windsurf (and for JetBrains) and
Antigravity ``serverUrl``, Gemini CLI and Qwen Code ``httpUrl`` (streamable HTTP) or ``url``
(SSE, or as its ``type`` says), opencode ``{"type": "remote", "url", "headers"}``, Codex CLI
``url`` and ``http_headers``. Any other client's remote entry is left alone, said so.

An entry is left alone, with the reason, when it carries a credential ironcurtain cannot
take over: a header or URL holding a variable its client fills when it connects (an
``${env:...}``, ``${input:...}``, ``$VAR``: ironcurtain sends headers as written), the
client's own OAuth settings (``oauth``, ``authProviderType``...) or an OAuth login the
client keeps for it (Claude Code's ``~/.claude/.credentials.json``); or any key wrap does
not know. A header holding a token as written moves with the definition: into
ironcurtain's user config, which is kept owner-only (0600).

A project's entry is the project's: its URL and headers are its own and carry nothing of
the user's (its definition is its own, named apart from a user's server of the same name
defined otherwise); an address written in its URL that is private, link-local or otherwise
special (not loopback) is left alone, as ironcurtain takes an address in a URL as the
user's own choice.
"""

from __future__ import annotations

import ipaddress
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from launcher.clients.catalogue.entry_shape import INERT_KEYS, wrapped
from launcher.clients.catalogue.known import (
    ClientFile,
    Entry,
    home,
    ironcurtain_exe,
    run_args,
    user_config,
    workspace_of,
)
from launcher.clients.catalogue.var_syntax import LeftAlone, translate
from launcher.clients.files.file_io import Refused, read_user
from launcher.clients.files.formats import plain
from sandbox_profiles.records import frozen

__all__ = [
    "LeftAlone",
    "borrowed",
    "changed_since",
    "hide_headers",
    "login_note",
    "may_share",
    "remote_definition",
    "remote_entry",
    "remote_problem",
    "shown_url",
]


@frozen
class RemoteForm:
    """One client's form of a remote entry."""

    urls: tuple[tuple[str, str], ...]  # the key of its URL, and its transport ("": by type)
    types: tuple[tuple[str, str], ...]  # a ``type`` value, and the transport it means
    type_required: bool = False
    stdio_type: str = "stdio"  # the ``type`` of the wrapped entry, when it has one
    headers: str = "headers"  # the key of its static headers
    untyped: str = "http"  # the transport of an entry whose key and type say none


_TYPES = (("http", "http"), ("sse", "sse"))
_TYPED = RemoteForm((("url", ""),), _TYPES, type_required=True)
FORMS: dict[str, RemoteForm] = {
    "claude-code": _TYPED,
    "copilot-cli": _TYPED,
    "vscode": _TYPED,
    "vscode-insiders": _TYPED,
    "vscode-server": _TYPED,
    "cursor": RemoteForm(
        (("url", ""),), (("http", "http"), ("sse", "sse"), ("streamable-http", "http"))
    ),
    "windsurf": RemoteForm((("serverUrl", "http"),), ()),
    "windsurf-jetbrains": RemoteForm((("serverUrl", "http"),), ()),
    "antigravity": RemoteForm((("serverUrl", "http"),), ()),
    # Gemini CLI: httpUrl is streamable HTTP; url is SSE unless its type says http (as
    # `gemini mcp add -t http` writes it).
    "gemini": RemoteForm((("httpUrl", "http"), ("url", "")), _TYPES, untyped="sse"),
    "qwen-code": RemoteForm((("httpUrl", "http"), ("url", "")), _TYPES, untyped="sse"),
    "opencode": RemoteForm(
        (("url", ""),), (("remote", "http"),), type_required=True, stdio_type="local"
    ),
    "codex": RemoteForm((("url", "http"),), (), headers="http_headers"),
}
# Keys through which a client does its own authentication: never taken over.
OAUTH_KEYS = frozenset(
    {
        "oauth", "auth", "authProviderType", "bearer_token_env_var", "env_http_headers",
        "targetAudience", "targetServiceAccount", "authorization_token", "clientId",
        "clientSecret", "callbackPort",
    }
)  # fmt: skip
URL_KEYS = ("url", "httpUrl", "serverUrl", "uri")
# The end of a project's remote definition's description: whose it is, for whoever would
# take it for theirs (a login kept for a server goes with its name).
PROJECT_MARK = ", a project's server"


def shown_url(url: str) -> str:
    """The URL without its query and fragment (where some services put their key).

    >>> shown_url("https://x.example/mcp?key=abc")
    'https://x.example/mcp?…'
    """
    parts = urlsplit(url)
    if not parts.query and not parts.fragment:
        return url
    return urlunsplit((parts.scheme, parts.netloc, parts.path, "", "")) + "?…"


def _form(f: ClientFile) -> RemoteForm:
    form = FORMS.get(f.client.name)
    if form is None:
        raise LeftAlone(
            f"wrap does not know {f.client.label}'s form of a remote entry (docs/clients.md "
            "lists those it moves); its calls pass no policy"
        )
    return form


def _keys(f: ClientFile, e: Entry, form: RemoteForm) -> None:
    allowed = {k for k, _ in form.urls} | {"type", form.headers} | INERT_KEYS | f.client.shape.inert
    for key in e.raw:
        if key in OAUTH_KEYS:
            raise LeftAlone(
                f"its {key!r} is {f.client.label}'s own authentication to it, which "
                "ironcurtain cannot take over (to put it behind ironcurtain: remove it, wrap, "
                f"then `ironcurtain auth login {e.name}`, or a header in ironcurtain's config)"
            )
        if key not in allowed:
            raise LeftAlone(f"it has the key {key!r}, which wrap does not move")


def _transport(f: ClientFile, e: Entry, form: RemoteForm) -> tuple[str, str]:
    """The entry's URL and transport (``http`` or ``sse``)."""
    present = [(k, t) for k, t in form.urls if k in e.raw]
    others = [k for k in URL_KEYS if k in e.raw and k not in dict(form.urls)]
    if len(present) != 1 or others:
        keys = [k for k, _ in form.urls]
        raise LeftAlone(f"it should have one of {', '.join(keys)} ({f.client.label}'s form)")
    key, by_key = present[0]
    url = e.raw[key]
    if not isinstance(url, str) or not url:
        raise LeftAlone(f"its {key} is {json.dumps(url)[:80]}, not a URL")
    kind = e.raw.get("type")
    types = dict(form.types)
    if kind is None and form.type_required:
        raise LeftAlone(f"it has no type, which {f.client.label} needs")
    if kind is not None and kind not in types:
        wants = " or ".join(json.dumps(t) for t in types) or "none"
        raise LeftAlone(f"its type is {json.dumps(kind)[:40]}, not {wants}")
    transport = by_key or (types[kind] if kind is not None else form.untyped)
    _as_written(f, f"its {key}", url)
    return url, transport


def _as_written(f: ClientFile, where: str, value: str) -> None:
    """:class:`LeftAlone` when the client fills a variable into ``value`` as it connects:
    ironcurtain would send what is written."""
    try:
        said, names = translate(f.client, value)
    except LeftAlone as exc:
        raise LeftAlone(f"{where}: {exc}") from None
    if names or said != value or "${" in value:
        what = f" ({', '.join(names)})" if names else ""
        raise LeftAlone(
            f"{where} refers to a variable{what} that {f.client.label} fills in as it "
            "connects; ironcurtain sends a remote server's URL and headers as written, and "
            "cannot take that credential over"
        )


def _headers(f: ClientFile, e: Entry, key: str) -> dict[str, str]:
    headers = e.raw.get(key)
    if headers is None:
        return {}
    if not isinstance(headers, dict) or not headers:
        raise LeftAlone("its headers are not an object of strings")
    for name, value in headers.items():
        if not isinstance(value, str):
            raise LeftAlone(f"its header {name!r} is not a string")
        _as_written(f, f"its header {name!r}", value)
    return {str(k): v for k, v in headers.items()}


def _client_login(f: ClientFile, e: Entry) -> None:
    """:class:`LeftAlone` when the client keeps an OAuth login of its own for the entry."""
    if f.client.name != "claude-code":
        return
    store = home() / ".claude" / ".credentials.json"
    try:
        logins = json.loads(store.read_text(encoding="utf-8")).get("mcpOAuth") or {}
    except (OSError, ValueError, AttributeError):
        return
    for key, login in logins.items() if isinstance(logins, dict) else ():
        if not isinstance(login, dict) or not (
            login.get("accessToken") or login.get("refreshToken")
        ):
            continue  # none, or one Claude Code has cleared (it keeps the entry, emptied)
        if str(key).partition("|")[0] == e.name or login.get("serverName") == e.name:
            raise LeftAlone(
                f"Claude Code keeps an OAuth login for it ({store}), which ironcurtain cannot "
                "take over; to protect it, clear that login in Claude Code (/mcp), wrap it, "
                f"then `ironcurtain auth login {e.name}`"
            )


def _project_address(f: ClientFile, url: str) -> None:
    """:class:`LeftAlone` when a project's entry names a special address in its URL (an
    address in a URL is taken as the user's own choice; this one is the project's)."""
    if f.scope != "project":
        return
    host = (urlsplit(url).hostname or "").strip("[]")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return  # a name: checked as ironcurtain resolves it
    if not address.is_loopback and not address.is_global:
        raise LeftAlone(
            f"this project's entry names the address {host} (not public) in its URL, which "
            "ironcurtain would take as your own choice"
        )


def remote_problem(f: ClientFile, e: Entry) -> str | None:
    """Why the remote entry ``e`` cannot be wrapped, as each client reading its file takes
    it (None: it can)."""
    try:
        remote_definition(f, e)
    except LeftAlone as exc:
        return str(exc)
    return None


def _definition(f: ClientFile, e: Entry) -> dict[str, Any]:
    form = _form(f)
    _keys(f, e, form)
    url, transport = _transport(f, e, form)
    headers = _headers(f, e, form.headers)
    _client_login(f, e)
    _project_address(f, url)
    definition: dict[str, Any] = {"url": url, "type": transport}
    if headers:
        definition["headers"] = headers
    return definition


def remote_definition(f: ClientFile, e: Entry) -> tuple[dict[str, Any], dict[str, str], list[str]]:
    """The remote server's definition for ironcurtain's config, the environment the
    client's entry keeps (none), and what to tell the user. :class:`LeftAlone` when the
    entry must not be wrapped."""
    definition = _definition(f, e)
    for other in f.as_read_by()[1:]:
        try:
            theirs = _definition(other, e)
        except LeftAlone as exc:
            raise LeftAlone(f"as {other.client.label} reads it: {exc}") from None
        if theirs != definition:
            raise LeftAlone(f"{f.client.label} and {other.client.label} read it differently")
    definition["description"] = f"wrapped from {f.client.label} ({f.path})" + (
        PROJECT_MARK if f.scope == "project" else ""
    )
    notes = [f"{e.name}: remote, reached by ironcurtain: {shown_url(definition['url'])}"]
    headers = sorted(definition.get("headers") or {})
    if headers:
        notes.append(
            f"{e.name}: its headers ({', '.join(headers)}) move to {user_config()} (kept "
            f"owner-only, 0600) and leave {f.path} (its backup keeps them); ironcurtain sends "
            "them to that server only, never to the client"
        )
    return definition, {}, notes


def login_note(f: ClientFile, e: Entry, server: str, definition: dict[str, Any]) -> list[str]:
    """What to say of logging in to the wrapped remote server ``server`` (nothing when its
    headers carry an ``Authorization`` of their own)."""
    if any(h.lower() == "authorization" for h in definition.get("headers") or {}):
        return []
    whose = (
        f" (this project's server, at {shown_url(definition['url'])}: log in only if you "
        "trust it with your account there)"
        if f.scope == "project"
        else ""
    )
    return [
        f"{e.name}: if the server asks for a login, run `ironcurtain auth login {server}`{whose}"
    ]


def remote_entry(f: ClientFile, e: Entry, server: str) -> dict[str, Any]:
    """The client's new entry: its inert keys kept, starting ironcurtain for ``server`` over
    stdio (its URL and headers gone with the definition)."""
    form = _form(f)
    raw = {k: v for k, v in plain(e.raw).items() if k not in (*URL_KEYS, form.headers)}
    if "type" in raw or form.type_required:
        raw["type"] = form.stdio_type
    run = run_args(server, workspace_of(f, e))
    return wrapped(f.client.shape, raw, ironcurtain_exe(), run, {})


def keep_owner_only(config: Path, definitions: Iterable[Mapping[str, Any]]) -> str | None:
    """Before ironcurtain's user config gets a remote server's headers or a URL with a
    query (one of ``definitions`` has some): make it owner-only when others may read it
    (what to say; None when nothing was done). A file wrap may not write (a link to another user's
    file) is left as it is: the write is refused, loudly, after this."""
    if not any(_secrets(d) for d in definitions):
        return None
    try:
        source = read_user(config.parent, config.name, None)
    except Refused:
        return None  # refused again, and said, when it is written
    if source is None or source.unwritable or not source.mode & 0o077:
        return None  # none yet (written new, owner-only), or not wrap's to change
    os.chmod(source.real, source.mode & 0o700)
    was = f"{source.mode:o}"
    return f"{config}: made owner-only (it holds a remote server's credentials; it was {was})"


def _secrets(definition: Mapping[str, Any]) -> list[tuple[str, str]]:
    """What of a remote server's definition may be a credential, each with what it is: each
    header's value, and each value in its URL's query (where some services put their key)."""
    found = [(f'"{k}" header', str(v)) for k, v in (definition.get("headers") or {}).items()]
    query = urlsplit(str(definition.get("url") or "")).query
    for pair in query.split("&") if query else ():
        name, _, value = pair.partition("=")
        found.append((f'"{name}" in its URL', value))
    return found


def hide_headers(text: str, definitions: Iterable[Mapping[str, Any]]) -> str:
    """``text`` (a diff to show) with each value a remote server's definition carries that
    may be a credential masked (a header's value, the credential after its scheme, as in
    ``Bearer X``, a value in its URL's query): shown, never."""
    for definition in definitions:
        for name, value in _secrets(definition):
            _, _, credential = value.partition(" ")
            for part in (value, credential):
                if len(part) >= 8:
                    text = text.replace(part, f"[secret masked: {name}]")
    return text


def _projects(definition: Mapping[str, Any]) -> bool:
    return str(definition.get("description") or "").endswith(PROJECT_MARK)


def may_share(theirs: Any, definition: Mapping[str, Any]) -> bool:
    """Whether a remote ``definition`` may take the name of ``theirs``, a definition of
    the same server already in ironcurtain's config: not when either is a project's (a
    login kept for that name would go to the other's entry), unless both are the same
    file's."""
    if "url" not in definition or not isinstance(theirs, Mapping):
        return True
    if _projects(theirs) or _projects(definition):
        return theirs.get("description") == definition.get("description")
    return True


def borrowed(f: ClientFile, server: str, servers: Mapping[str, Any]) -> str | None:
    """Why a project's entry that starts ``ironcurtain run --server server`` is not its own
    (None: it is, or it is no project's): ``servers`` (ironcurtain's user config) defines
    ``server`` as a remote server that was not wrapped from this project's file, so the
    entry would reach it with the user's headers or login."""
    definition = servers.get(server)
    if f.scope != "project" or not isinstance(definition, Mapping) or "url" not in definition:
        return None
    own = {f"wrapped from {o.client.label} ({f.path}){PROJECT_MARK}" for o in f.as_read_by()}
    if definition.get("description") in own:
        return None
    return (
        f"this project's entry starts your remote server {server} "
        f"({shown_url(str(definition['url']))}) with your headers or login; wrap never "
        "writes that for a project's entry"
    )


def changed_since(
    f: ClientFile, entry: Mapping[str, Any], servers: Mapping[str, Any]
) -> str | None:
    """What to say when ``unwrap`` puts back the remote entry a record of wrap's holds
    (``entry``: its name and value before and after) while its server in ironcurtain's
    config (``servers``) now has another URL or headers (a token rotated there stays
    there): the client gets back what it had."""
    form, before, after = FORMS.get(f.client.name), entry.get("before"), entry.get("after")
    if form is None or not isinstance(before, dict) or not isinstance(after, dict):
        return None
    args = after.get("args")
    if not isinstance(args, list) or "--server" not in args[:-1]:
        return None
    server = str(args[args.index("--server") + 1])
    now = servers.get(server)
    if not isinstance(now, Mapping) or "url" not in now:
        return None
    url = next((before[k] for k, _ in form.urls if k in before), None)
    if now.get("url") == url and (now.get("headers") or {}) == (before.get(form.headers) or {}):
        return None
    return (
        f"{entry.get('name')}: {f.path} gets back the URL and headers it had when wrapped, but "
        f"{server} in {user_config()} has changed since (a token rotated there?); copy them "
        "to the client by hand"
    )

"""A remote server of the config (a ``url`` instead of a ``command``): its entry checked, and
what a connection to it is made from. No sandbox holds it; everything else of ironcurtain
(policy, approvals, audit, masking) applies as to a local server."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import replace
from urllib.parse import quote, urlsplit

from launcher.plan.config_schema import AuthConfig, SandboxConfig, ServerConfig
from launcher.shared.user_errors import ConfigError
from sandbox_profiles.records import frozen

STREAMABLE_HTTP = "streamable-http"
SSE = "sse"
_TRANSPORTS = {
    "http": STREAMABLE_HTTP,
    "streamable-http": STREAMABLE_HTTP,
    "streamableHttp": STREAMABLE_HTTP,
    "sse": SSE,
}
# Headers the transport itself writes (framing, the protocol's own, the hop's): one given in
# the config would contradict what the connection says or smuggle another request.
RESERVED_HEADERS = frozenset(
    h.lower()
    for h in (
        "Host",
        "Content-Length",
        "Content-Type",
        "Transfer-Encoding",
        "Connection",
        "Upgrade",
        "TE",
        "Trailer",
        "Keep-Alive",
        "Proxy-Connection",
        "Accept",
        "Accept-Encoding",
        "Last-Event-ID",
        "Mcp-Session-Id",
        "MCP-Protocol-Version",
        "Mcp-Method",
        "Mcp-Name",
    )
)
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # an HTTP field name (RFC 9110 tchar)
_LOCAL_ONLY = (("args", "args"), ("env", "env"), ("cwd", "cwd"))
# A secret of the entry's ``secrets`` named in a header value or a URL query value.
SECRET_REF = re.compile(r"\$\{secret:([^}]*)\}")


@frozen
class RemoteAuth:
    """The OAuth client a login to a remote server is made as (its ``auth``): a
    pre-registered client (``client_id``, and where its secret is read), a client ID
    metadata document (a ``client_id`` that is an ``https://`` URL), or neither (the client
    registers itself); and the scopes asked for."""

    client_id: str | None = None
    secret_from: str | None = None  # `env:NAME` or `file:PATH`; the value is read at login
    scopes: tuple[str, ...] = ()
    shared: bool = False  # in gateway mode, one login for every caller (else each its own)

    @property
    def metadata_document(self) -> bool:
        """Whether the client ID is a client ID metadata document's URL."""
        return self.client_id is not None and self.client_id.startswith("https://")

    def secret(self, env: Mapping[str, str]) -> str | None:
        """The client secret, read now; ValueError saying why when it cannot be (never
        quoting it)."""
        from launcher.plan.secrets_plan import _value

        return None if self.secret_from is None else _value(self.secret_from, env)


@frozen
class RemoteTarget:
    """Where a remote server is and how it is spoken to."""

    url: str
    host: str  # the URL's host, lower-cased, without brackets
    port: int
    transport: str  # STREAMABLE_HTTP or SSE
    headers: Mapping[str, str]
    hosts: Mapping[str, str]  # names pinned to addresses
    auth: RemoteAuth = RemoteAuth()

    @property
    def where(self) -> str:
        """The endpoint as shown to people: scheme, host, port and path, never a query."""
        parts = urlsplit(self.url)
        return f"{parts.scheme}://{parts.netloc}{parts.path}"


def is_loopback_name(host: str, hosts: Mapping[str, str]) -> bool:
    """Whether ``host`` (an address, ``localhost``, or a name pinned in ``hosts``) is this
    machine's loopback.

    >>> is_loopback_name("127.0.0.1", {}), is_loopback_name("localhost", {})
    (True, True)
    >>> is_loopback_name("db.internal", {"db.internal": "10.0.0.5"})
    False
    >>> is_loopback_name("localhost", {"localhost": "10.0.0.5"})  # where it is dialled
    False
    """
    if host not in hosts and (host == "localhost" or host.endswith(".localhost")):
        return True
    try:
        return ipaddress.ip_address(hosts.get(host, host)).is_loopback
    except ValueError:
        return False


def target_of(server: ServerConfig, secrets: Mapping[str, str] | None = None) -> RemoteTarget:
    """What a connection to a remote server (checked by :func:`checked_remote`) is made of:
    each ``${secret:NAME}`` of its headers and URL query replaced by the value of ``secrets``
    (read from the entry's ``secrets``; percent-encoded in the URL)."""
    assert server.url is not None
    given = secrets or {}

    def value(found: re.Match[str], encode: bool = False) -> str:
        # One naming no secret read (refused when the config is checked) is left as written.
        text = given.get(found.group(1))
        return found.group(0) if text is None else quote(text, safe="") if encode else text

    url = SECRET_REF.sub(lambda m: value(m, encode=True), server.url)
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    port = parts.port or (443 if parts.scheme == "https" else 80)
    transport = _TRANSPORTS.get(server.type or "http", STREAMABLE_HTTP)
    pins = {k.lower(): v for k, v in server.hosts.items()}
    headers = {k: SECRET_REF.sub(value, v) for k, v in server.headers.items()}
    return RemoteTarget(url, host, port, transport, headers, pins, _auth_of(server))


def secret_header_faults(server: ServerConfig, secrets: Mapping[str, str]) -> tuple[str, str]:
    """The first header whose value, with the entry's secrets in place, is no HTTP field
    value, and why (never quoting it); ``("", "")`` when every one is."""
    for name, header in target_of(server, secrets).headers.items():
        wrong = _field_value_fault(header)
        if wrong is not None and SECRET_REF.search(server.headers[name]):
            return name, f"with its secrets in place the header value would hold {wrong}"
    return "", ""


def _auth_of(server: ServerConfig) -> RemoteAuth:
    auth = server.auth
    if auth is None:
        return RemoteAuth()
    given = auth.client_secret
    secret = given.from_ if given is not None and not isinstance(given, str) else None
    return RemoteAuth(auth.client_id, secret, tuple(auth.scopes), auth.login == "shared")


def checked_remote(server: ServerConfig, file: str, loc: tuple[str, str]) -> ServerConfig:
    """A server entry checked for what kind it is: a local one (``command``) or a remote one
    (``url``), never both nor neither, with no key of the other kind. A remote entry comes
    back with ``sandbox: false`` (no sandbox can hold it)."""

    def at(*parts: str) -> str:
        return "$." + ".".join((*loc, *parts))

    if server.command is not None and server.url is not None:
        raise ConfigError(
            file, at("url"), 'a server has a "command" (local) or a "url" (remote), not both'
        )
    if server.url is None:
        if server.command is None:
            raise ConfigError(
                file,
                at("command"),
                'Field required: a "command" (a local server) or a "url" (a remote one)',
            )
        for key in ("headers", "hosts", "auth"):
            if getattr(server, key):
                raise ConfigError(
                    file,
                    at(key),
                    f'"{key}" is for a remote server (one with a "url"); this one has a "command"',
                )
        return server
    for key, alias in _LOCAL_ONLY:
        if getattr(server, key):
            raise ConfigError(
                file,
                at(alias),
                f'"{alias}" is for a local server (one with a '
                '"command"): a remote one is not started by ironcurtain',
            )
    if server.sandbox is not False and server.sandbox != SandboxConfig():
        raise ConfigError(
            file,
            at("sandbox"),
            "a remote server runs elsewhere, where no sandbox "
            'of this machine holds it: remove "sandbox" (the policy, approvals, '
            "audit and masking still apply)",
        )
    if server.type is not None and server.type not in _TRANSPORTS:
        raise ConfigError(
            file,
            at("type"),
            f'"{server.type}" is not how a server with a "url" is reached: "http" or "sse"',
        )
    _check_url(server, file, at("url"))
    _check_headers(server.headers, file, at)
    _check_secret_refs(server, file, at)
    if server.auth is not None:
        _check_auth(server.auth, file, at)
    return replace(server, sandbox=False, restart=False)


def _check_auth(auth: AuthConfig, file: str, at: object) -> None:
    """A remote server's ``auth``: a client secret only with a pre-registered client; a
    client ID that is a URL only an ``https://`` one with a path (a metadata document)."""
    assert callable(at)
    client = auth.client_id
    if client is not None and "://" in client:
        parts = urlsplit(client)
        if parts.scheme != "https" or parts.path in ("", "/") or not parts.hostname:
            raise ConfigError(
                file,
                at("auth", "clientId"),
                f"{client!r}: a client ID that is a URL names a client ID metadata document: "
                "an https:// URL with a path",
            )
    if auth.client_secret is None:
        return
    if isinstance(auth.client_secret, str):
        raise ConfigError(
            file,
            at("auth", "clientSecret"),
            "a client secret is not written in the config: give where it is read, "
            '{"from": "env:NAME"} or {"from": "file:PATH"}',
        )
    if client is None or "://" in client:
        why = "no clientId" if client is None else "a client ID metadata document"
        raise ConfigError(
            file,
            at("auth", "clientSecret"),
            f"a client secret belongs to a pre-registered client (a clientId), not to {why}",
        )


def _check_url(server: ServerConfig, file: str, where: str) -> None:
    assert server.url is not None
    try:
        parts = urlsplit(server.url)
        port = parts.port
    except ValueError as exc:
        raise ConfigError(file, where, f"{server.url!r} is not a URL: {exc}") from None
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise ConfigError(
            file, where, f"{server.url!r}: expected an https:// URL (http:// only to this machine)"
        )
    if parts.username is not None or parts.password is not None:
        raise ConfigError(
            file,
            where,
            "a URL with a user name or password in it would be shown "
            'wherever the server is named: give the credential in "headers"',
        )
    host = parts.hostname.lower()
    pins = {k.lower(): v for k, v in server.hosts.items()}
    if parts.scheme == "http" and not is_loopback_name(host, pins):
        raise ConfigError(
            file,
            where,
            f"plain http:// to {host} would send every call and its "
            "answer readable on the way: use https:// (http:// only to this "
            "machine's loopback)",
        )
    if port == 0:
        raise ConfigError(file, where, f"{server.url!r}: port 0 is not a port")


def _field_value_fault(value: str) -> str | None:
    """What makes ``value`` no HTTP field value as it is sent (visible ASCII, spaces and tabs
    only inside), said without repeating it; None when it is one. The HTTP layer refuses
    such a value only when it sends it, in an error that quotes it whole.

    >>> _field_value_fault("Bearer abc"), _field_value_fault("Bearer abc\x0b")
    (None, 'a control character')
    """
    if any(c in value for c in "\r\n\0"):
        return "a line break or NUL"
    if any(ord(c) > 0x7E for c in value):
        return "a character outside visible ASCII"
    if any(ord(c) < 0x20 and c != "\t" for c in value):
        return "a control character"
    if value != value.strip(" \t"):
        return "a space or tab at its start or end"
    return None


def _check_headers(headers: Mapping[str, str], file: str, at: object) -> None:
    assert callable(at)
    for name, value in headers.items():
        where = at("headers", name)
        if not _TOKEN.fullmatch(name):
            raise ConfigError(file, where, f"{name!r} is not an HTTP header name")
        if name.lower() in RESERVED_HEADERS:
            raise ConfigError(
                file, where, f'"{name}" is written by the connection itself; it cannot be set here'
            )
        wrong = _field_value_fault(value)
        if wrong is not None:
            raise ConfigError(file, where, f"a header value cannot hold {wrong}")
        if "${" in SECRET_REF.sub("", value):
            raise ConfigError(
                file,
                where,
                "headers are sent as written: ${...} is not expanded in them, only "
                '${secret:NAME} (a secret of the entry\'s "secrets") is put in place',
            )


def _check_secret_refs(server: ServerConfig, file: str, at: object) -> None:
    """Each ``${secret:NAME}`` of a remote entry: in a header value or a URL query value
    only, naming one of the entry's ``secrets``; and those secrets, sent by ironcurtain to
    the entry's URL alone, name no ``hosts`` of their own nor a ``body``."""
    assert callable(at) and server.url is not None
    for name, value in server.headers.items():
        _refs_known(SECRET_REF.findall(value), server, file, at("headers", name))
    parts = urlsplit(server.url)
    outside = [parts.scheme, parts.netloc, parts.path, parts.fragment]
    outside += [pair.partition("=")[0] for pair in parts.query.split("&")]
    if any("${secret:" in part for part in outside):
        raise ConfigError(
            file,
            at("url"),
            "${secret:NAME} is put in place only in a value of the URL's query "
            "(?key=${secret:NAME}), not in its host, path or a query key",
        )
    _refs_known(SECRET_REF.findall(parts.query), server, file, at("url"))
    _refs_elsewhere(server, file, at)
    for variable, spec in server.secrets.items():
        for key, given in (("hosts", spec.hosts), ("body", spec.body)):
            if given:
                raise ConfigError(
                    file,
                    at("secrets", variable, key),
                    f'a remote server\'s secret is sent by ironcurtain to its "url" alone: '
                    f'"{key}" is for a sandboxed server\'s brokered secret',
                )


def _refs_elsewhere(server: ServerConfig, file: str, at: object) -> None:
    """No ``${secret:NAME}`` in a remote entry's other texts (its pinned names, its OAuth
    client): none is put in place there, and none would be sent as if it were the value."""
    assert callable(at)
    texts: list[tuple[tuple[str, ...], str]] = [(("hosts", name), name) for name in server.hosts]
    if server.auth is not None:
        texts.append((("auth", "clientId"), server.auth.client_id or ""))
        texts += [(("auth", "scopes"), scope) for scope in server.auth.scopes]
    texts.append((("description",), server.description or ""))
    for where, text in texts:
        if "${secret:" in text:
            raise ConfigError(
                file,
                at(*where),
                "${secret:NAME} is put in place only in a header value or a value of the "
                "URL's query",
            )


def _refs_known(names: list[str], server: ServerConfig, file: str, where: str) -> None:
    for name in names:
        if name not in server.secrets:
            known = ", ".join(sorted(server.secrets)) or "none"
            raise ConfigError(
                file,
                where,
                f'${{secret:{name}}} names no secret of the entry\'s "secrets" (it has: {known})',
            )

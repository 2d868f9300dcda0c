"""URL canonicalisation, domain extraction and domain matching."""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Sequence
from urllib.parse import unquote, urlsplit, urlunsplit

# scp-like git remote: [user@]host:path, where host has no '/' and the value has no '://'.
_SCP_LIKE = re.compile(r"^(?:(?P<user>[^@/:]+)@)?(?P<host>\[[^\]]+\]|[^@/:\[\]]+):(?P<path>.*)$")


IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
# git's "<transport>::<address>": run git-remote-<transport> (before any other URL form).
_REMOTE_HELPER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9+.-]*::")  # git lets it start with a digit
# A DNS name: dot-separated labels of letters, digits, '-' and '_', none starting with '-'.
_HOSTNAME = re.compile(r"(?!-)[a-z0-9_-]{1,63}(?:\.(?!-)[a-z0-9_-]{1,63})*")


def _normalise_host(host: str) -> str:
    host = host.strip().lower().rstrip(".")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host


def normalize_url(value: str) -> str:
    """A canonical serialisation: scheme and host lower-cased, trailing dot dropped.

    Unparseable values come back unchanged (the domain gate then refuses to trust them).

    >>> normalize_url("HTTPS://Example.COM./a?b=1")
    'https://example.com/a?b=1'
    """
    try:
        parts = urlsplit(value.strip())
        host = parts.hostname
        if not parts.scheme or host is None:
            return value
        port = parts.port
    except ValueError:
        return value
    netloc_host = _normalise_host(host)
    if ":" in netloc_host:
        netloc_host = f"[{netloc_host}]"
    userinfo = parts.netloc.rpartition("@")[0] if "@" in parts.netloc else ""
    netloc = (userinfo + "@" if userinfo else "") + netloc_host
    if port is not None:
        netloc += f":{port}"
    return urlunsplit((parts.scheme.lower(), netloc, parts.path, parts.query, parts.fragment))


def extract_domain(value: str) -> str:
    """The host a URL points at, normalised; the raw value when it has none.

    >>> extract_domain("https://user@GitHub.com:443/x")
    'github.com'
    """
    try:
        host = urlsplit(value.strip()).hostname
    except ValueError:
        return value
    return _normalise_host(host) if host else value


def is_scp_like(value: str) -> bool:
    return "://" not in value and _SCP_LIKE.match(value) is not None and not value.startswith("/")


def normalize_git_url(value: str) -> str:
    """scp-like remotes are kept as they are; URL forms get :func:`normalize_url`."""
    return value if is_scp_like(value) else normalize_url(value)


def extract_git_domain(value: str) -> str:
    """Host of a git remote in any of its forms.

    A remote-helper address (``ext::sh -c ...``, ``fd::3``) names a program, not a host,
    and a local path (``github.com``, ``../x``, ``file://github.com/tmp/x``: git ignores a
    ``file:`` URL's host) names no host either: their domain is empty, which no allowlist
    matches.

    >>> extract_git_domain("git@github.com:user/repo.git"), extract_git_domain("ext::sh -c x")
    ('github.com', '')
    >>> extract_git_domain("file://github.com/tmp/x"), extract_git_domain("github.com")
    ('', '')
    """
    if _REMOTE_HELPER.match(value):
        return ""
    match = _SCP_LIKE.match(value) if is_scp_like(value) else None
    if match:
        return _normalise_host(match.group("host"))
    scheme, sep, _rest = value.strip().partition("://")
    if not sep or scheme.lower() == "file":
        return ""  # a path on this machine, whatever it looks like
    return extract_domain(value)


def parse_ip(host: str) -> IPAddress | None:
    """The address a host string denotes when it is an IP literal in any form a resolver
    would accept: dotted, short (``127.1``), decimal (``2130706433``), octal (``0177.0.0.1``),
    hex (``0x7f000001``), bracketed IPv6, IPv4-mapped IPv6 (returned as the IPv4 address).

    >>> [str(parse_ip(h)) for h in ("127.1", "2130706433", "0x7f.0.0.1", "[::ffff:127.0.0.1]")]
    ['127.0.0.1', '127.0.0.1', '127.0.0.1', '127.0.0.1']
    >>> parse_ip("example.com") is None
    True
    """
    text = host.strip().rstrip(".").lower()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    text = text.split("%", 1)[0]  # zone index
    try:
        address: IPAddress = ipaddress.ip_address(text)
    except ValueError:
        if not text or not all(c in "0123456789abcdefx." for c in text):
            return None
        try:
            address = ipaddress.IPv4Address(socket.inet_aton(text))
        except OSError:
            return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def split_host_port(text: str) -> tuple[str, str]:
    """``host:port``, ``[v6]:port``, ``host`` or a bare IPv6 address -> (host, port text,
    empty when there is none); the host lower-cased, brackets and a trailing dot dropped.

    >>> split_host_port("Example.COM.:443"), split_host_port("[::1]:80"), split_host_port("::1")
    (('example.com', '443'), ('::1', '80'), ('::1', ''))
    """
    text = text.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    else:
        host, sep, port = text.rpartition(":")
        if not sep or ":" in host:  # no port, or an unbracketed IPv6 address
            host, port = text, ""
    return host.lower().rstrip("."), port


def is_ip_literal(host: str) -> bool:
    """Any form of IP address, as a resolver would read it (see :func:`parse_ip`)."""
    return parse_ip(host) is not None


def domain_matches(domain: str, pattern: str) -> bool:
    """Case-insensitive, trailing-dot-insensitive match of one domain against one pattern.

    ``*.x.com`` matches ``x.com`` and its subdomains; ``*`` matches any name, never an IP.

    >>> domain_matches("API.GitHub.com.", "*.github.com")
    True
    >>> domain_matches("evilgithub.com", "*.github.com")
    False
    """
    domain = _normalise_host(domain)
    pattern = _normalise_host(pattern)
    if not domain or not (is_ip_literal(domain) or _HOSTNAME.fullmatch(domain)):
        return False  # "-oProxyCommand=x", "ext::sh -c ...": not a name at all
    if pattern == "*":
        return not is_ip_literal(domain)
    if pattern.startswith("*."):
        base = pattern[2:]
        return domain == base or domain.endswith("." + base)
    return domain == pattern


def domain_matches_allowlist(domain: str, allowed: Sequence[str]) -> bool:
    return any(domain_matches(domain, pattern) for pattern in allowed)


def file_uri_path(uri: str) -> str | None:
    """The local path of a ``file:`` URI, percent-decoded; None when it names another host.

    >>> file_uri_path("file:///tmp/a%20b"), file_uri_path("file://evil/x")
    ('/tmp/a b', None)
    """
    parts = urlsplit(uri)
    if parts.netloc not in ("", "localhost"):
        return None
    return unquote(parts.path) or "/"

"""Where the HTTP endpoint is reached: the address it listens on, and the public URL clients
use when it runs behind a load balancer or an ingress.

A request is served only when its ``Host`` names one of these, exactly: the loopback names
of the port it listens on, and the public URL's host (with or without its port). A web page
whose DNS name an attacker rebinds to the endpoint's address sends its own name as ``Host``
and is refused; so is a name that only ends like the public one. What the endpoint says
about itself (its protected resource metadata, the ``WWW-Authenticate`` challenge) names the
public URL, or its loopback address, never a ``Host`` a request supplied.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

PATH = "/mcp"  # the one path the endpoint serves MCP on
LOOPBACK = "127.0.0.1"
_DEFAULT_PORTS = {"http": 80, "https": 443}
_LOOPBACK_NAMES = (LOOPBACK, "localhost", "[::1]")


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address) is this machine's loopback.

    >>> is_loopback("localhost"), is_loopback("::1"), is_loopback("10.0.0.5")
    (True, True, False)
    """
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bind_problem(address: str) -> str | None:
    """What makes ``address`` no address to listen on (None: it is one).

    >>> bind_problem("0.0.0.0") is None, bind_problem("::") is None
    (True, True)
    >>> bind_problem("gateway.example.com")
    'not an IP address (IPv4 or IPv6, e.g. 0.0.0.0 for every interface)'
    """
    try:
        ipaddress.ip_address(address)
    except ValueError:
        return "not an IP address (IPv4 or IPv6, e.g. 0.0.0.0 for every interface)"
    return None


def public_url_problem(url: str) -> str | None:
    """What makes ``url`` no public URL of the endpoint (None: it is one): ``https``, or
    plain ``http`` to a loopback address only (a bearer token would cross the network in
    clear), with a host, the path ``/mcp`` (or none), and no user, query or fragment.

    >>> public_url_problem("https://mcp.example.com/mcp") is None
    True
    >>> public_url_problem("http://mcp.example.com/mcp")
    'plain http is accepted only on a loopback address; use https'
    >>> public_url_problem("https://mcp.example.com/tools")
    "the path must be /mcp (the path the gateway serves), not '/tools'"
    """
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (a port that is no number raises here)
    except ValueError as exc:
        return f"is not a URL: {exc}"
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
        return "expected https://HOST[:PORT]/mcp (or http:// on a loopback address)"
    if parts.username is not None or parts.password is not None:
        return "holds a user name or password"
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        return "holds a query or a fragment"
    if parts.path not in ("", PATH):
        return f"the path must be {PATH} (the path the gateway serves), not {parts.path!r}"
    if parts.scheme == "http" and not is_loopback(parts.hostname):
        return "plain http is accepted only on a loopback address; use https"
    return None


@dataclass(frozen=True)
class Reached:
    """How the endpoint listening on ``port`` is reached: ``public`` (a URL
    :func:`public_url_problem` accepts) or None (on this machine only)."""

    port: int
    public: str | None = None

    @property
    def base(self) -> str:
        """Scheme, host and port clients reach the endpoint at (no path).

        >>> Reached(8765, "https://MCP.example.com/mcp").base
        'https://mcp.example.com'
        >>> Reached(8765).base
        'http://127.0.0.1:8765'
        """
        if self.public is None:
            return f"http://{LOOPBACK}:{self.port}"
        parts = urlsplit(self.public)
        return f"{parts.scheme}://{_netloc(parts.scheme, parts.hostname or '', parts.port)}"

    @property
    def url(self) -> str:
        """The endpoint's URL as clients name it (the resource its tokens are for)."""
        return self.base + PATH

    def hosts(self) -> frozenset[str]:
        """Every ``Host`` a request may name (lower case): the loopback names of the port,
        and the public URL's host, with and without its port.

        >>> sorted(Reached(8765, "https://mcp.example.com/mcp").hosts())[1:]
        ['[::1]:8765', 'localhost:8765', 'mcp.example.com', 'mcp.example.com:443']
        """
        hosts = {f"{name}:{self.port}" for name in _LOOPBACK_NAMES}
        if self.public is not None:
            parts = urlsplit(self.public)
            scheme, port = parts.scheme, parts.port or _DEFAULT_PORTS[parts.scheme]
            name = _netloc(scheme, parts.hostname or "", None)
            hosts |= {f"{name}:{port}", _netloc(scheme, parts.hostname or "", port)}
        return frozenset(hosts)

    def origins(self) -> frozenset[str]:
        """Every ``Origin`` a request may carry: the web origins of :meth:`hosts`.

        >>> sorted(Reached(8765, "https://mcp.example.com/mcp").origins())[-1]
        'https://mcp.example.com'
        """
        origins = {f"http://{name}:{self.port}" for name in _LOOPBACK_NAMES}
        return frozenset(origins | ({self.base} if self.public is not None else set()))

    def accepts(self, host: str | None) -> bool:
        """Whether a request naming ``host`` is for this endpoint (exactly one of
        :meth:`hosts`; a host name is matched case-insensitively, nothing else is loose).

        >>> reached = Reached(8765, "https://mcp.example.com/mcp")
        >>> reached.accepts("MCP.example.com"), reached.accepts("evil-mcp.example.com")
        (True, False)
        """
        return host is not None and host.lower() in self.hosts()


def _netloc(scheme: str, host: str, port: int | None) -> str:
    """``host`` (an IPv6 address in brackets) and ``port`` unless it is the scheme's own."""
    shown = f"[{host}]" if ":" in host else host.lower()
    return shown if port is None or port == _DEFAULT_PORTS[scheme] else f"{shown}:{port}"

"""Egress decisions: may a sandboxed server open a connection to host:port?

Plain data in, a reason out; the proxy in ``launcher/servers/egress.py`` does the sockets. The order
is fixed: ``deniedDomains``, then ``allowedDomains`` (with optional ``:port`` scoping), both
before any DNS lookup; then the addresses a name resolves to are refused when they are
loopback, link-local, private, CGNAT, multicast, reserved or cloud metadata, unless the
allowlist names that exact address with a port, or ``hosts`` pins the name to it (the
user's explicit choice, for that name only).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import field

from policy.urls import IPAddress, domain_matches, parse_ip, split_host_port
from sandbox_profiles.records import frozen

_METADATA = (
    ipaddress.ip_address("169.254.169.254"),  # AWS, GCP, Azure, OpenStack
    ipaddress.ip_address("fd00:ec2::254"),  # AWS over IPv6
    ipaddress.ip_address("100.100.100.200"),  # Alibaba Cloud
)
_CGNAT = ipaddress.ip_network("100.64.0.0/10")


def blocked_kind(address: IPAddress) -> str | None:
    """Why a connection to ``address`` is refused by default, or None for a public address.

    >>> blocked_kind(parse_ip("169.254.169.254")), blocked_kind(parse_ip("8.8.8.8"))
    ('a cloud metadata address', None)
    """
    if address in _METADATA:
        return "a cloud metadata address"
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local:
        return "a link-local address"
    if isinstance(address, ipaddress.IPv4Address) and address in _CGNAT:
        return "a carrier-grade NAT address"
    if address.is_private:
        return "a private address"
    if address.is_multicast or address.is_unspecified or address.is_reserved:
        return "a reserved address"
    if isinstance(address, ipaddress.IPv6Address) and address.is_site_local:
        return "a site-local address"  # fec0::/10: deprecated, still routed on some networks
    if isinstance(address, ipaddress.IPv6Address) and address.sixtofour is not None:
        return blocked_kind(address.sixtofour)
    return None


@frozen
class Entry:
    """One ``allowedDomains``/``deniedDomains`` item: a pattern, maybe scoped to a port."""

    pattern: str
    port: int | None = None

    @classmethod
    def parse(cls, text: str) -> Entry:
        """``github.com``, ``*.github.com:443``, ``10.0.0.5:8080``, ``[fd00::1]:80``.

        >>> Entry.parse("*.github.com:443"), Entry.parse("[::1]:8080").pattern
        (Entry(pattern='*.github.com', port=443), '::1')
        """
        host, port = split_host_port(text)
        if port and not port.isdigit():  # not a port: keep it whole, so it matches nothing
            return cls(text.strip().lower(), None)
        return cls(host, int(port) if port else None)

    def matches(self, host: str, port: int) -> bool:
        if self.port is not None and self.port != port:
            return False
        mine, theirs = parse_ip(self.pattern), parse_ip(host)
        if mine is not None or theirs is not None:
            return mine is not None and mine == theirs
        return domain_matches(host, self.pattern)


@frozen
class EgressRules:
    """The hosts a server's egress proxy lets it reach (and refuses), with fixed addresses."""

    allowed: tuple[Entry, ...]
    denied: tuple[Entry, ...] = ()
    hosts: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_config(
        cls,
        allowed: Sequence[str],
        denied: Sequence[str] = (),
        hosts: Mapping[str, str] | None = None,
    ) -> EgressRules:
        pinned = {k.lower().rstrip("."): v for k, v in (hosts or {}).items()}
        return cls(
            tuple(Entry.parse(e) for e in allowed), tuple(Entry.parse(e) for e in denied), pinned
        )


@frozen
class Verdict:
    """``reason`` None means allowed; then ``addresses`` are what to connect to (in order;
    none means: resolve ``host`` and pass each address through :func:`check_address`)."""

    reason: str | None
    addresses: tuple[str, ...] = ()


def check_host(rules: EgressRules, host: str, port: int) -> Verdict:
    """Everything decided before any DNS lookup.

    >>> rules = EgressRules.from_config(["*.github.com"], ["gist.github.com"])
    >>> check_host(rules, "api.github.com", 443).reason is None
    True
    >>> check_host(rules, "gist.github.com", 443).reason
    'gist.github.com is in deniedDomains'
    >>> check_host(rules, "github.com.evil.net", 443).reason
    'github.com.evil.net is not in allowedDomains'
    """
    name = host.strip().lower().rstrip(".")
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    if not name or not 0 < port < 65536:
        return Verdict("no valid host and port")
    if any(e.matches(name, port) for e in rules.denied):
        return Verdict(f"{name} is in deniedDomains")
    literal = parse_ip(name)
    if literal is not None:
        exact = [e for e in rules.allowed if e.port == port and parse_ip(e.pattern) == literal]
        if not exact:
            return Verdict(
                f"{name} is an IP address; only an address named with its port in "
                "allowedDomains may be reached"
            )
        return Verdict(None, (str(literal),))
    if not any(e.matches(name, port) for e in rules.allowed):
        return Verdict(f"{name} is not in allowedDomains")
    if name in rules.hosts:
        return Verdict(None, (rules.hosts[name],))
    return Verdict(None)


def check_address(rules: EgressRules, address: str, port: int) -> str | None:
    """Why a resolved address may not be used (None: it may)."""
    ip = parse_ip(address)
    if ip is None:
        return f"{address} is not an address"
    kind = blocked_kind(ip)
    if kind is None:
        return None
    if any(e.port == port and parse_ip(e.pattern) == ip for e in rules.allowed):
        return None
    return f"it resolves to {ip}, {kind}"

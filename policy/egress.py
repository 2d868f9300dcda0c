"""Egress decisions: may a sandboxed server open a connection to host:port?

Plain data in, a reason out; the proxy in ``launcher/servers/egress_proxy.py`` does the
sockets. The order is fixed: ``deniedDomains``, then ``allowedDomains`` (with optional
``:port`` scoping), both before any DNS lookup; then the addresses a name resolves to are
refused when they are loopback, link-local, private, CGNAT, multicast, reserved, cloud
metadata or in a special-purpose IPv6 range (the IPv4 address inside NAT64, 6to4, Teredo or
a mapped address is judged itself), unless the allowlist names that exact address with a
port, or ``hosts`` pins the name to it (the user's explicit choice, for that name only).
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

# Ranges of IPv6 that carry an IPv4 address: a connection there reaches that address (through a
# translator, a tunnel or the host's own stack), so the embedded address is what is judged.
_EMBEDDING = "embeds"
# The special-purpose IPv6 ranges (IANA's IPv6 Special-Purpose Address Registry, and the
# deprecated ones still routed somewhere), most specific first: each with why it is refused,
# or :data:`_EMBEDDING`. The flags of :mod:`ipaddress` are not enough alone: they differ from
# one Python release to the next (``64:ff9b::/96`` is "global" in some).
SPECIAL_IPV6: tuple[tuple[ipaddress.IPv6Network, str], ...] = tuple(
    (ipaddress.IPv6Network(net), kind)
    for net, kind in (
        ("::/128", "the unspecified address"),
        ("::1/128", "a loopback address"),
        ("::ffff:0:0/96", _EMBEDDING),  # IPv4-mapped
        ("::ffff:0:0:0/96", _EMBEDDING),  # IPv4-translated (SIIT)
        ("::/96", "a deprecated IPv4-compatible address"),
        ("64:ff9b::/96", _EMBEDDING),  # NAT64, the well-known prefix
        ("64:ff9b:1::/48", "a local-use NAT64 address"),  # a translator of this network's
        ("100::/64", "a discard-only address"),
        ("100:0:0:1::/64", "a dummy address"),
        ("2001::/32", _EMBEDDING),  # Teredo: server and client
        ("2001:2::/48", "a benchmarking address"),
        ("2001:10::/28", "an ORCHID identifier, not an address"),
        ("2001:20::/28", "an ORCHID identifier, not an address"),
        ("2001::/23", "an IETF protocol assignment"),
        ("2001:db8::/32", "a documentation address"),
        ("3fff::/20", "a documentation address"),
        ("2002::/16", _EMBEDDING),  # 6to4
        ("5f00::/16", "a segment-routing identifier"),
        ("fc00::/7", "a private address"),  # unique local
        ("fe80::/10", "a link-local address"),
        ("fec0::/10", "a site-local address"),  # deprecated, still routed on some networks
        ("ff00::/8", "a reserved address"),  # multicast
        ("::/8", "a reserved address"),
    )
)


def _embedded(address: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses a connection to ``address`` (in a range of :data:`_EMBEDDING`)
    would reach: the last 32 bits (mapped, translated, NAT64), 6to4's, Teredo's two."""
    if address.teredo is not None:
        return list(address.teredo)
    if address.sixtofour is not None:
        return [address.sixtofour]
    return [ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)]


def _special_ipv6(address: ipaddress.IPv6Address) -> str | None:
    """Why ``address`` is refused for lying in a special-purpose range (None: in none, or
    embedding only public IPv4 addresses)."""
    for network, kind in SPECIAL_IPV6:
        if address not in network:
            continue
        if kind != _EMBEDDING:
            return kind
        for inner in _embedded(address):
            why = blocked_kind(inner)
            if why is not None:
                return f"{why} ({inner}) inside {network}"
        return None
    return None


def blocked_kind(address: IPAddress) -> str | None:
    """Why a connection to ``address`` is refused by default, or None for a public address.

    >>> blocked_kind(parse_ip("169.254.169.254")), blocked_kind(parse_ip("8.8.8.8"))
    ('a cloud metadata address', None)
    >>> blocked_kind(parse_ip("64:ff9b::a9fe:a9fe"))
    'a cloud metadata address (169.254.169.254) inside 64:ff9b::/96'
    """
    if address in _METADATA:
        return "a cloud metadata address"
    if isinstance(address, ipaddress.IPv6Address):
        embeds = any(address in net for net, kind in SPECIAL_IPV6 if kind == _EMBEDDING)
        special = _special_ipv6(address)
        if special is not None or embeds:
            return special
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

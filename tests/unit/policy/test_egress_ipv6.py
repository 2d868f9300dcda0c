"""The special-purpose IPv6 ranges in the egress check: every range of the table is refused
(or, for a range that embeds an IPv4 address, judged by that address), whatever the running
Python's :mod:`ipaddress` flags say. (The proxy refusing them to a hostile server:
``tests/attacks/test_egress_special_ranges.py``.)"""

from __future__ import annotations

import ipaddress

import pytest

from policy.egress import SPECIAL_IPV6, EgressRules, blocked_kind, check_address

LOOPBACK4 = ipaddress.IPv4Address("127.0.0.1")
PUBLIC4 = ipaddress.IPv4Address("93.184.216.34")
EMBEDS = "embeds"

# (address, what the refusal says; None: allowed), written out by hand: the table in the code
# must agree with these, whatever it holds.
ROWS = [
    ("64:ff9b::7f00:1", "a loopback address (127.0.0.1) inside 64:ff9b::/96"),  # NAT64
    ("64:ff9b::10.0.0.5", "a private address (10.0.0.5)"),
    ("64:ff9b::a9fe:a9fe", "a cloud metadata address (169.254.169.254)"),
    ("64:ff9b::100.64.0.1", "a carrier-grade NAT address"),
    ("64:ff9b::5db8:d822", None),  # NAT64 of a public address: how IPv6-only hosts get out
    ("64:ff9b:1::5db8:d822", "a local-use NAT64 address"),
    ("::ffff:127.0.0.1", "a loopback address (127.0.0.1)"),  # IPv4-mapped
    ("::ffff:8.8.8.8", None),
    ("::ffff:0:10.1.2.3", "a private address (10.1.2.3)"),  # IPv4-translated
    ("::127.0.0.1", "a deprecated IPv4-compatible address"),
    ("::8.8.8.8", "a deprecated IPv4-compatible address"),
    ("2002:7f00:1::1", "a loopback address (127.0.0.1) inside 2002::/16"),  # 6to4
    ("2002:a9fe:a9fe::1", "a cloud metadata address"),
    ("2002:5db8:d822::1", None),
    ("2001:0:5db8:d822::f5ff:fffe", "a private address (10.0.0.1)"),  # Teredo, client
    ("2001:0:7f00:1::f7f7:f7f7", "a loopback address (127.0.0.1)"),  # Teredo, server
    ("2001:0:5db8:d822::f7f7:f7f7", None),  # Teredo between public addresses
    ("2001:1::1", "an IETF protocol assignment"),
    ("2001:2::1", "a benchmarking address"),
    ("2001:10::1", "an ORCHID identifier"),
    ("2001:20::1", "an ORCHID identifier"),
    ("2001:db8::1", "a documentation address"),
    ("3fff::1", "a documentation address"),
    ("100::1", "a discard-only address"),
    ("100:0:0:1::1", "a dummy address"),
    ("5f00::1", "a segment-routing identifier"),
    ("fc00::1", "a private address"),
    ("fd12:3456::1", "a private address"),
    ("fd00:ec2::254", "a cloud metadata address"),
    ("fe80::1", "a link-local address"),
    ("fec0::1", "a site-local address"),
    ("ff02::1", "a reserved address"),
    ("ff0e::1", "a reserved address"),
    ("::", "the unspecified address"),
    ("::1", "a loopback address"),
    ("::1:0:0:1", "a reserved address"),  # ::/8, outside every named range
    ("2606:4700:4700::1111", None),
    ("2a00:1450:4001:80b::200e", None),
]


@pytest.mark.parametrize(("address", "said"), ROWS)
def test_special_purpose_ipv6(address: str, said: str | None) -> None:
    kind = blocked_kind(ipaddress.IPv6Address(address))
    if said is None:
        assert kind is None
    else:
        assert kind is not None and said in kind, kind


def _embedding(network: ipaddress.IPv6Network, inner: ipaddress.IPv4Address) -> str:
    """An address of ``network`` that carries ``inner`` the way that range does."""
    base, v4 = int(network.network_address), int(inner)
    if network == ipaddress.IPv6Network("2002::/16"):
        return str(ipaddress.IPv6Address(base | v4 << 80))
    if network == ipaddress.IPv6Network("2001::/32"):  # Teredo: server public, client inner
        return str(ipaddress.IPv6Address(base | int(PUBLIC4) << 64 | (v4 ^ 0xFFFFFFFF)))
    return str(ipaddress.IPv6Address(base | v4))


@pytest.mark.parametrize(("network", "kind"), SPECIAL_IPV6, ids=[str(n) for n, _ in SPECIAL_IPV6])
def test_every_range_of_the_table_is_refused(network: ipaddress.IPv6Network, kind: str) -> None:
    rules = EgressRules.from_config(["*"], [], {})
    if kind == EMBEDS:
        inside = _embedding(network, LOOPBACK4)
        # (an IPv4-mapped address is read as the IPv4 address itself before it is judged)
        assert "a loopback address" in str(check_address(rules, inside, 443))
        assert check_address(rules, _embedding(network, PUBLIC4), 443) is None
        return
    for address in (network.network_address + 1, network.broadcast_address):
        reason = check_address(rules, str(address), 443)
        assert reason is not None, address
    # Every range is named in the hand-written rows too.
    assert any(ipaddress.IPv6Address(a) in network for a, _ in ROWS), network


def test_an_address_named_with_its_port_is_reached_all_the_same() -> None:
    # The user's explicit choice, as for a private IPv4 address.
    rules = EgressRules.from_config(["[64:ff9b::7f00:1]:8080"], [], {})
    assert check_address(rules, "64:ff9b::7f00:1", 8080) is None
    assert check_address(rules, "64:ff9b::7f00:1", 80) is not None

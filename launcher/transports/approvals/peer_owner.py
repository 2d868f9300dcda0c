"""Whose process is at the other end of a loopback TCP connection: the owner (uid) of the
client's socket, as the kernel lists it in ``/proc/net/tcp`` (and ``tcp6``, for a client
whose IPv6 socket reached an IPv4 address). The approvals page serves only its own user's
processes: a token that leaked to another local user (a cookie the browser sent to that
user's server on another port of 127.0.0.1, say) opens nothing."""

from __future__ import annotations

import ipaddress
import struct

TABLES = ("/proc/net/tcp", "/proc/net/tcp6")
ESTABLISHED = "01"


def _hex_address(host: str, port: int, wide: bool) -> str:
    """``host:port`` as the kernel's tables write it (each 32-bit word of the address in this
    machine's byte order, in hex; ``wide``: the IPv6 table, IPv4 addresses as mapped ones).

    >>> _hex_address("127.0.0.1", 8080, False) in ("0100007F:1F90", "7F000001:1F90")
    True
    """
    address = ipaddress.ip_address(host)
    if wide and address.version == 4:
        address = ipaddress.IPv6Address(f"::ffff:{address}")
    packed = address.packed
    words = struct.unpack(f"={len(packed) // 4}I", packed)
    return "".join(f"{word:08X}" for word in words) + f":{port:04X}"


def peer_uid(client: tuple[str, int], server: tuple[str, int]) -> int | None:
    """The uid owning the socket ``client`` that is connected to ``server`` (both
    ``(host, port)`` as this end sees them); None when no table lists it."""
    for table, wide in zip(TABLES, (False, True), strict=True):
        try:
            near = _hex_address(*client, wide)
            far = _hex_address(*server, wide)
        except ValueError:
            return None
        try:
            with open(table, encoding="ascii") as lines:
                next(lines, None)  # the heading
                for line in lines:
                    fields = line.split()
                    if len(fields) > 7 and fields[1:4] == [near, far, ESTABLISHED]:
                        return int(fields[7])
        except OSError:
            continue
    return None

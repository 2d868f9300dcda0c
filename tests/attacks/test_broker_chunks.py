"""A brokered request's chunked body as an attacker shapes it next, after the malformed
size lines: a sentinel in a chunk extension or a trailer (places the broker drops, so it
goes nowhere), the largest size sixteen hex digits hold, sizes that overflow a signed or
unsigned 64-bit reader, and the sentinel cut across many one-byte chunks (swapped where the
secret allows a body, refused where not). A real TLS host on loopback, as in the kept-alive
attacks; each control sends the same body through a plain tunnel."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.attacks.test_broker_keepalive import AUTH, HOST, SENTINEL, VALUE, exchange

HEAD = f"POST /upload HTTP/1.1\r\nHost: {HOST}\r\n{AUTH}\r\nTransfer-Encoding: chunked\r\n"
CLOSE = HEAD + "Connection: close\r\n\r\n"

# Places outside the body's data: dropped, so neither the sentinel nor the value goes.
DROPPED = {
    "a chunk extension": f"5;token={SENTINEL}\r\nhello\r\n0\r\n\r\n",
    "the last chunk's extension": f"5\r\nhello\r\n0;token={SENTINEL}\r\n\r\n",
    "a trailer named as a credential": (
        f"5\r\nhello\r\n0\r\nAuthorization: Bearer {SENTINEL}\r\n\r\n"
    ),
}


@pytest.mark.parametrize("name", list(DROPPED))
def test_a_sentinel_outside_the_bodys_data_goes_nowhere(tmp_path: Path, name: str) -> None:
    run = exchange(tmp_path, [(CLOSE + DROPPED[name]).encode()])
    (request,) = run.host.requests
    assert request.endswith(b"\r\n\r\nhello")
    assert SENTINEL.encode() not in request and request.count(VALUE.encode()) == 1  # its header
    assert not run.refusals


def test_control_a_plain_tunnel_carries_the_value_there(tmp_path: Path) -> None:
    # (The test host frames a chunked body up to the first "0" chunk with nothing after:
    # the extension case is the one it reads whole.)
    body = DROPPED["a chunk extension"]
    run = exchange(tmp_path, [(CLOSE + body).encode()], brokered=False)
    assert run.host.requests[0].count(VALUE.encode()) == 2


# Sizes a reader of 64-bit integers wraps or takes as negative: each over the limit, refused
# before a byte of the body is read or the host gets anything.
HUGE = ["ffffffffffffffff", "8000000000000000", "7fffffffffffffff", "0000000001000001"]


@pytest.mark.parametrize("size", HUGE)
def test_a_huge_chunk_size_is_refused_before_the_host_gets_anything(
    tmp_path: Path, size: str
) -> None:
    run = exchange(tmp_path, [(CLOSE + f"{size}\r\nhello\r\n0\r\n\r\n").encode()])
    assert not run.host.requests
    assert run.seen.startswith(b"HTTP/1.1 413 ")


def _one_byte_chunks(text: str) -> str:
    return "".join(f"1\r\n{c}\r\n" for c in text) + "0\r\n\r\n"


def test_a_sentinel_in_one_byte_chunks_is_swapped_where_the_body_may_hold_it(
    tmp_path: Path,
) -> None:
    run = exchange(tmp_path, [(CLOSE + _one_byte_chunks(f"t={SENTINEL}")).encode()])
    (request,) = run.host.requests
    assert request.endswith(f"\r\n\r\nt={VALUE}".encode())


def test_a_sentinel_in_one_byte_chunks_is_refused_where_it_may_not(tmp_path: Path) -> None:
    run = exchange(tmp_path, [(CLOSE + _one_byte_chunks(f"t={SENTINEL}")).encode()], body=False)
    assert not run.host.requests
    assert [r for r in run.refusals if "sentinel in the body: not allowed" in r.reason]

"""How a brokered request is rewritten on its way to the secret's host (the pure part of
``launcher.servers.broker``): where the value goes, where a sentinel is refused."""

from __future__ import annotations

import base64

import pytest

from launcher.plan.secrets_plan import Brokered, new_sentinel
from launcher.servers.broker import BrokerRefusal, _Devalue, rewrite_body, rewrite_head

GH = Brokered("GH_TOKEN", new_sentinel(), "gh-value-1", (("api.github.com", None),))
NPM = Brokered("NPM_TOKEN", new_sentinel(), "npm-välue-2", (("registry.npmjs.org", 443),), True)
BOTH = (GH, NPM)


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _head(*headers: str, target: str = "/x") -> bytes:
    return ("\r\n".join([f"GET {target} HTTP/1.1", *headers]) + "\r\n\r\n").encode("latin-1")


def test_bearer_basic_and_custom_headers_carry_the_value() -> None:
    basic = base64.b64encode(f"me:{GH.sentinel}".encode()).decode()
    out, length, chunked, close = rewrite_head(
        _head(
            "Host: api.github.com",
            f"Authorization: Bearer {GH.sentinel}",
            f"X-Token: {GH.sentinel}",
            f"Proxy-Authorization: Basic {basic}",
            "Content-Length: 3",
        ),
        BOTH,
        "api.github.com",
        443,
    )
    text = out.decode("latin-1")
    assert "Authorization: Bearer gh-value-1" in text and "X-Token: gh-value-1" in text
    assert "Proxy-Authorization" not in text  # a hop header, never sent on
    assert GH.sentinel not in text and (length, chunked, close) == (3, False, False)
    assert "Content-Length" not in text  # the relay puts the body's own
    assert text.endswith("Accept-Encoding: identity\r\n\r\n")
    basic_out = rewrite_head(_head(f"Authorization: Basic {basic}"), BOTH, "api.github.com", 443)
    encoded = basic_out[0].decode().split("Basic ")[1].split("\r\n")[0]
    assert base64.b64decode(encoded) == b"me:gh-value-1"


@pytest.mark.parametrize(
    ("head", "said"),
    [
        (_head(f"Authorization: Bearer {NPM.sentinel}"), "NPM_TOKEN's sentinel sent to"),
        (
            _head("Authorization: Basic " + _b64(f"u:{NPM.sentinel}")),
            "NPM_TOKEN's sentinel sent to",
        ),
        (_head(target=f"/?t={GH.sentinel}"), "in the url"),
        (_head("Host: evil.example"), "Host header"),
        (_head("X: ironcurtain-sentinel-0000"), "unknown sentinel"),
    ],
    # Named, not shown: the sentinels are new each run, and every worker must collect the same.
    ids=["bearer", "basic", "url", "host-header", "unknown-sentinel"],
)
def test_a_sentinel_elsewhere_is_refused(head: bytes, said: str) -> None:
    with pytest.raises(BrokerRefusal, match=said):
        rewrite_head(head, BOTH, "api.github.com", 443)


def test_the_body_carries_the_value_only_where_the_secret_says_so() -> None:
    body = f'{{"token": "{NPM.sentinel}"}}'.encode()
    out = rewrite_body(body, BOTH, "registry.npmjs.org", 443)
    assert out == '{"token": "npm-välue-2"}'.encode()
    with pytest.raises(BrokerRefusal, match="GH_TOKEN's sentinel in the body"):
        rewrite_body(GH.sentinel.encode(), BOTH, "api.github.com", 443)
    plain = b"nothing to see"
    assert rewrite_body(plain, BOTH, "api.github.com", 443) is plain


def test_a_port_named_with_the_host_is_the_only_one() -> None:
    with pytest.raises(BrokerRefusal, match=r"sent to registry\.npmjs\.org"):
        rewrite_head(_head(f"X: {NPM.sentinel}"), BOTH, "registry.npmjs.org", 8443)


def test_the_value_is_never_in_a_secrets_repr() -> None:
    assert "gh-value-1" not in repr(GH)


@pytest.mark.parametrize(
    ("head", "said"),
    [
        (_head(target="https://evil.example/x"), "target is a path"),
        (_head(target="evil.example:443"), "target is a path"),
        (_head(target="*"), "target is a path"),  # only OPTIONS asks for *
        (_head("Host: api.github.com", "Host: api.github.com"), "more than one Host"),
        (_head("X-A: a\nHost: evil.example"), "malformed header line"),  # a bare LF
        (_head("X-A: a", " folded: on"), "malformed header line"),  # obs-fold
        (_head("Host : evil.example"), "malformed header line"),  # a space before the colon
        (_head("X-A: a\x00b"), "malformed header line"),
        (_head("Content-Length: 0", "Content-Length: 5"), "repeated Content-Length"),
        (_head("Content-Length: 5", "Content-Length: 5"), "repeated Content-Length"),
        (_head("Content-Length: +5"), "bad or repeated Content-Length"),
        (_head("Content-Length: 5", "Transfer-Encoding: chunked"), "both Content-Length"),
        (_head("Transfer-Encoding: chunked", "Content-Length: 5"), "both Content-Length"),
        (_head("Transfer-Encoding: chunked", "Transfer-Encoding: chunked"), "other than one"),
        (_head("Transfer-Encoding: chunked, identity"), "other than one"),
        (_head("Transfer-Encoding: gzip, chunked"), "other than one"),
        (_head("Transfer-Encoding: xchunked"), "other than one"),
        (_head("X-A: a", " Transfer-Encoding: chunked"), "malformed header line"),
        (_head("Transfer-Encoding:\x0bchunked"), "malformed header line"),
    ],
)
def test_framing_a_host_could_read_otherwise_is_refused(head: bytes, said: str) -> None:
    with pytest.raises(BrokerRefusal, match=said):
        rewrite_head(head, BOTH, "api.github.com", 443)


def test_the_host_header_is_the_secrets_host_and_expect_is_not_sent_on() -> None:
    out = rewrite_head(_head("Expect: 100-continue", "X-A: a\tb"), BOTH, "api.github.com", 443).out
    assert b"Expect" not in out and b"X-A: a\tb" in out and b"\r\nHost: api.github.com\r\n" in out
    options = rewrite_head(
        _head(target="*").replace(b"GET", b"OPTIONS"), BOTH, "api.github.com", 8443
    ).out
    assert b"\r\nHost: api.github.com:8443\r\n" in options


def test_chunked_and_persistent_framing_is_read_as_the_host_reads_it() -> None:
    chunked = rewrite_head(_head("Transfer-Encoding: Chunked"), BOTH, "api.github.com", 443)
    assert chunked.chunked and chunked.length is None and b"Transfer-Encoding" not in chunked.out
    for said in ("Connection: close", "Connection: keep-alive, Close"):
        closing = rewrite_head(_head(said), BOTH, "api.github.com", 443)
        assert closing.close and closing.out.endswith(b"Connection: close\r\n\r\n")
    old = rewrite_head(_head().replace(b"HTTP/1.1", b"HTTP/1.0"), BOTH, "api.github.com", 443)
    assert old.close  # HTTP/1.0: one request
    with pytest.raises(BrokerRefusal, match=r"not an HTTP/1\.x request"):
        rewrite_head(_head().replace(b"HTTP/1.1", b"HTTP/1.2"), BOTH, "api.github.com", 443)


def test_a_value_cut_anywhere_across_pieces_goes_back_as_its_sentinel() -> None:
    text = b"<<" + GH.value.encode() + b">>" + NPM.value.encode()
    for cut in range(len(text) + 1):
        mask = _Devalue(BOTH)
        out = mask.feed(text[:cut]) + mask.feed(text[cut:]) + mask.feed(b"", end=True)
        assert out == b"<<" + GH.sentinel.encode() + b">>" + NPM.sentinel.encode()


def test_a_value_holding_another_goes_back_whole() -> None:
    short = Brokered("SHORT", new_sentinel(), "tok-1", (("a.example", None),))
    long = Brokered("LONG", new_sentinel(), "tok-1-and-more", (("b.example", None),))
    out = _Devalue((short, long)).feed(b"tok-1-and-more tok-1", end=True)
    assert out == f"{long.sentinel} {short.sentinel}".encode()


def test_a_sentinel_as_a_header_name_is_refused() -> None:
    with pytest.raises(BrokerRefusal, match="malformed header line"):
        rewrite_head(_head(f"{GH.sentinel}: x"), BOTH, "api.github.com", 443)


def test_a_value_said_back_encoded_goes_back_as_its_sentinel() -> None:
    odd = Brokered("ODD", new_sentinel(), 'a/b+c=d é"x', (("a.example", None),))
    said = [
        b"a%2Fb%2Bc%3Dd%20%C3%A9%22x",  # every reserved character encoded
        b"a/b%2bc%3dd%20%c3%a9%22x",  # "/" kept, lower-case hex
        b"a%2Fb%2Bc%3Dd+%C3%A9%22x",  # a space as "+"
        b'a\\/b+c=d \\u00e9\\"x',  # a JSON string, ASCII only, "/" escaped
        'a/b+c=d é\\"x'.encode(),  # a JSON string
    ]
    for text in said:
        assert _Devalue((odd,)).feed(b"<" + text + b">", end=True) == f"<{odd.sentinel}>".encode()


@pytest.mark.parametrize(
    ("host", "port", "header"),
    [
        ("api.github.com", 443, "API.GitHub.com"),
        ("api.github.com", 443, "api.github.com."),
        ("api.github.com", 443, "api.github.com.:443"),
        ("api.github.com", 8443, "api.github.com:8443"),
        ("::1", 8443, "[::1]:8443"),
    ],
)
def test_a_host_header_naming_the_host_in_another_spelling_is_taken(
    host: str, port: int, header: str
) -> None:
    out = rewrite_head(_head(f"Host: {header}", "X: a"), (GH,), host, port).out
    assert f"\r\nHost: {header}\r\n".encode() in out  # sent on as the server wrote it


@pytest.mark.parametrize(
    "header",
    ["api.github.com:444", "api.github.com..", "evil.test", "api.github.com.evil.test",
     "evil@api.github.com", "[api.github.com]:443x"],
)  # fmt: skip
def test_a_host_header_naming_anything_else_is_refused(header: str) -> None:
    with pytest.raises(BrokerRefusal, match="Host header"):
        rewrite_head(_head(f"Host: {header}"), BOTH, "api.github.com", 443)

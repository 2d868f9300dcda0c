"""The wire's error codes are a promise to clients: each name keeps its number."""

from __future__ import annotations

from launcher.shared import error_codes


def test_each_code_keeps_its_wire_number() -> None:
    assert {name: getattr(error_codes, name) for name in dir(error_codes) if name.isupper()} == {
        "PARSE_ERROR": -32700,
        "INVALID_REQUEST": -32600,
        "METHOD_NOT_FOUND": -32601,
        "INVALID_PARAMS": -32602,
        "INTERNAL_ERROR": -32603,
        "DENIED": -32001,
        "SESSION_NOT_FOUND": -32001,
        "RESOURCE_NOT_FOUND": -32002,
        "HEADER_MISMATCH": -32020,
        "MISSING_CLIENT_CAPABILITY": -32021,
        "UNSUPPORTED_VERSION": -32022,
        "REQUEST_CANCELLED": -32800,
    }

"""The JSON-RPC error codes ironcurtain answers with on the wire, each named once.

The numbers are a promise to clients: a client tells a refusal from a missing method by
them, and an HTTP status is chosen from them. JSON-RPC 2.0 reserves -32768..-32000; the
first five are its own, the rest MCP's or ironcurtain's.
"""

from __future__ import annotations

from typing import Final

# JSON-RPC 2.0's own.
PARSE_ERROR: Final = -32700  # not JSON, or a line past the size limit
INVALID_REQUEST: Final = -32600  # JSON, but not one request as JSON-RPC has it
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603  # the request failed in ironcurtain or had no answer

# MCP's and ironcurtain's.
# A request the policy did not let through (a refused tool call is a result, not an error).
DENIED: Final = -32001
# A streamable HTTP session that ended or expired (the MCP SDKs' own code for it; the same
# number as DENIED, told apart by the 404 it comes with).
SESSION_NOT_FOUND: Final = -32001
RESOURCE_NOT_FOUND: Final = -32002  # the handshake era's; the stateless era says INVALID_PARAMS
HEADER_MISMATCH: Final = -32020  # an HTTP header and the body it carries disagree
MISSING_CLIENT_CAPABILITY: Final = -32021
UNSUPPORTED_VERSION: Final = -32022  # a protocol version not served (data: those that are)
REQUEST_CANCELLED: Final = -32800  # ends the event stream of a request its client cancelled

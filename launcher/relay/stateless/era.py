"""The stateless era of MCP (revision 2026-07-28), as the client side of the relay speaks it.

A client of that era sends no ``initialize``: every request carries the protocol version and
the client's capabilities in its ``_meta``, and ``server/discover`` says what the endpoint
serves. Every result says it is complete (``resultType``), the cacheable ones how long they
hold (``ttlMs``) and for whom (``cacheScope``: ``private``, since what a client is shown is
decided for it). ``ping``, ``logging/setLevel`` and ``resources/subscribe`` are gone, and a
resource that does not exist is ``-32602``. A connection speaks one era: the first request
decides (``initialize``, or a request in this era's form).

A server's own questions, and ironcurtain's approvals, reach such a client as the answer to
the request they are asked during (:mod:`launcher.relay.questions.rounds`); a question
during a request that cannot be answered that way is refused as for a client that cannot be asked.
"""

from __future__ import annotations

from typing import Any

from launcher.shared.error_codes import (
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    RESOURCE_NOT_FOUND,
    UNSUPPORTED_VERSION,
)
from launcher.shared.jsonrpc import (
    META,
    META_CAPABILITIES,
    META_SERVER_INFO,
    META_VERSION,
    STATELESS_VERSIONS,
    Message,
    own_info,
)

VERSIONS = STATELESS_VERSIONS
VERSION = META_VERSION
CAPABILITIES = META_CAPABILITIES
SERVER_INFO = META_SERVER_INFO
# What this era took out of the protocol, answered as methods that do not exist.
REMOVED = frozenset({"ping", "logging/setLevel", "resources/subscribe", "resources/unsubscribe"})
CACHEABLE = frozenset(
    {
        "server/discover",
        "tools/list",
        "prompts/list",
        "resources/list",
        "resources/templates/list",
        "resources/read",
    }
)
# What a result says of itself that only ironcurtain may say to its client.
_OURS = ("resultType", "ttlMs", "cacheScope", "requestState", "inputRequests")
# What asks for, or answers, input through a result and its retry.
_ASKING = ("inputRequests", "inputResponses", "requestState")
# A server's log messages belong to no request: none reach a client of the era yet.
_WITHHELD = frozenset({"logging"})


def speaks(params: Message) -> bool:
    """Whether a request is in the stateless era's form (its ``_meta`` names a version)."""
    meta = params.get("_meta")
    return isinstance(meta, dict) and VERSION in meta


def refusal(method: str, params: Message) -> tuple[int, str, Any] | None:
    """Why the relay cannot take this request from a client of the era (code, message,
    data), or None."""
    meta = params.get("_meta")
    version = meta.get(VERSION) if isinstance(meta, dict) else None
    if method == "initialize":
        requested = params.get("protocolVersion")
        data = {"supported": list(VERSIONS), "requested": requested}
        return UNSUPPORTED_VERSION, "this connection speaks the stateless protocol", data
    if not isinstance(meta, dict) or not isinstance(version, str):
        return INVALID_PARAMS, f"invalid params: _meta must name {VERSION}", None
    if version not in VERSIONS:
        data = {"supported": list(VERSIONS), "requested": version}
        return UNSUPPORTED_VERSION, f"unsupported protocol version: {version}", data
    if not isinstance(meta.get(CAPABILITIES), dict):
        return INVALID_PARAMS, f"invalid params: _meta must give {CAPABILITIES} (an object)", None
    if method in REMOVED:
        return METHOD_NOT_FOUND, f"method not found: {method} (not in protocol {version})", None
    return None


def discover(capabilities: Message, instructions: str) -> Message:
    """The answer to ``server/discover``: what this endpoint serves."""
    offered = {name: value for name, value in capabilities.items() if name not in _WITHHELD}
    return {
        "supportedVersions": list(VERSIONS),
        "capabilities": offered,
        "instructions": instructions,
    }


def asks_for_input(result: Message) -> bool:
    """Whether a server's result asks the client for input (the stateless era's way of
    asking), which the relay does not carry."""
    return result.get("resultType") == "input_required" or any(k in result for k in _ASKING)


def server_result(result: Message) -> Message:
    """A server's result without what only ironcurtain may say of an answer to its client:
    whether it is complete, and how long and for whom it may be cached."""
    if not any(k in result for k in _OURS):
        return result
    return {k: v for k, v in result.items() if k not in _OURS}


def answered(message: Message, method: str | None) -> Message:
    """An answer to a client of the era, in the era's form: ``resultType``, cache hints
    and ironcurtain's ``serverInfo`` on a result; a missing resource's code."""
    if "result" in message and isinstance(message["result"], dict):
        # Set, never kept from a server (whose own were taken off: :func:`server_result`).
        body = dict(message["result"])
        body["resultType"] = "complete"
        if method in CACHEABLE:
            body["ttlMs"] = 0
            body["cacheScope"] = "private"
        meta = body.get("_meta")
        body["_meta"] = {**(meta if isinstance(meta, dict) else {}), SERVER_INFO: own_info()}
        return {**message, "result": body}
    err = message.get("error")
    if isinstance(err, dict) and err.get("code") == RESOURCE_NOT_FOUND:
        return {**message, "error": {**err, "code": INVALID_PARAMS}}
    return message


def for_server(params: Message) -> Message:
    """A request's params as a handshake-era server is sent them: without the era's
    ``_meta`` keys (the server has its own session with ironcurtain), and without answers
    to questions it never asked through ironcurtain (``inputResponses``, ``requestState``)."""
    if any(k in params for k in _ASKING):
        params = {k: v for k, v in params.items() if k not in _ASKING}
    meta = params.get("_meta")
    if not isinstance(meta, dict) or not any(k.startswith(META) for k in meta):
        return params
    kept = {k: v for k, v in meta.items() if not k.startswith(META)}
    if kept:
        return {**params, "_meta": kept}
    return {k: v for k, v in params.items() if k != "_meta"}

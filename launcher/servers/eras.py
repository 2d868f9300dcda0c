"""Which protocol era a server is spoken to in, and what that era asks of each request.

A server is spoken to in the handshake era when it takes ``initialize`` (every server
written before the stateless era does, and a server of both eras then asks its client as
its tools were written to: by requests of its own). One that refuses it is asked
``server/discover`` in the stateless era's form (2026-07-28), and so is every server whose
config says ``"era": "stateless"`` (before its handshake); when that answer lists the
version, the server is spoken to in that era: no handshake, every request carrying the
version, ironcurtain's name and the capabilities it may use in its ``_meta``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from launcher.relay.questions.server_requests import elicitation_modes
from launcher.shared.jsonrpc import (
    HANDSHAKE,
    LATEST_PROTOCOL,
    META_CAPABILITIES,
    META_CLIENT_INFO,
    META_SERVER_INFO,
    META_VERSION,
    STATELESS,
    STATELESS_VERSIONS,
    ClientSide,
    Message,
    own_info,
)

# Seconds a server has to answer ``server/discover`` before it is taken not to serve the
# stateless era (one that ignores what it does not know).
DISCOVER_TIMEOUT = 5.0
# Seconds a server that refused ``initialize`` has to answer ``server/discover``.
REFUSED_PATIENCE = 30.0
# Sends a request and waits for its whole response (a connection's ``request``).
Request = Callable[[str, Message | None, float | None], Awaitable[Message]]


async def opened_with(
    request: Request, client: ClientSide, patience: float = DISCOVER_TIMEOUT
) -> tuple[str, Message | None, Message]:
    """Open the conversation in the era the server's config says to offer first: the
    ``initialize`` handshake, which every server of the handshake era takes, then, when the
    server refuses it, ``server/discover``; or those two the other way round. The era, the
    ``_meta`` each request of the stateless era carries (None in the handshake era), and
    what the server said of itself (its ``initialize`` result, or its like). ``patience``:
    the seconds ``server/discover`` is waited for when asked first."""
    if client.era == STATELESS:
        found = await _discovered(request, client, patience)
        if found is not None:
            return found
    response = await request(
        "initialize",
        {"protocolVersion": LATEST_PROTOCOL, "capabilities": client.capabilities,
         "clientInfo": own_info()},
        None,
    )  # fmt: skip
    if "error" in response:
        err = response["error"]
        refused = str(err.get("message") if isinstance(err, dict) else "")
        # It refused the handshake: it speaks, so it is given as long as a start takes
        # (asked again when asked first: it may have been too slow to answer then).
        found = await _discovered(request, client, REFUSED_PATIENCE)
        if found is not None:
            return found
        raise RuntimeError(f"initialize failed: {refused}")
    said = response.get("result")
    return HANDSHAKE, None, said if isinstance(said, dict) else {}


async def _discovered(
    request: Request, client: ClientSide, patience: float = DISCOVER_TIMEOUT
) -> tuple[str, Message, Message] | None:
    sent = envelope(client.capabilities)
    try:
        found = await request("server/discover", {"_meta": sent}, patience)
    except TimeoutError:
        return None
    said = opened(found, sent)
    return None if said is None else (STATELESS, sent, said)


def envelope(capabilities: Message) -> Message:
    """The ``_meta`` each request to a server of the stateless era carries."""
    return {
        META_VERSION: STATELESS_VERSIONS[-1],
        META_CAPABILITIES: capabilities,
        META_CLIENT_INFO: own_info(),
    }


def opened(found: Message, sent: Message) -> Message | None:
    """From a server's answer to ``server/discover`` (asked with the envelope ``sent``, set
    here to the version it serves), what its ``initialize`` would have said; None when it
    does not serve the stateless era."""
    result = found.get("result")
    versions = result.get("supportedVersions") if isinstance(result, dict) else None
    if not isinstance(result, dict) or not isinstance(versions, list):
        return None
    served = [v for v in STATELESS_VERSIONS if v in versions]
    if not served:
        return None
    sent[META_VERSION] = served[-1]
    meta = result.get("_meta")
    info = meta.get(META_SERVER_INFO) if isinstance(meta, dict) else None
    caps = result.get("capabilities")
    said: Message = {
        "protocolVersion": served[-1],
        "capabilities": _watched(caps if isinstance(caps, dict) else {}),
        "serverInfo": info if isinstance(info, dict) else {},
    }
    if isinstance(result.get("instructions"), str):
        said["instructions"] = result["instructions"]
    return said


def list_changes(capabilities: Message) -> Message:
    """What a listen of ironcurtain's own asks a server of the stateless era to tell: the
    changes of the lists it says change."""
    return {
        f"{kind}ListChanged": True
        for kind in ("tools", "prompts", "resources")
        if isinstance(capabilities.get(kind), dict) and capabilities[kind].get("listChanged")
    }


def enveloped(params: Message | None, sent: Message) -> Message:
    """A request's params with the era's ``_meta``: the capabilities are those ironcurtain
    lets the server use that the request's client also declared, when the relay says
    what it declared."""
    params = dict(params or {})
    meta = params.get("_meta")
    meta = meta if isinstance(meta, dict) else {}
    if isinstance(meta.get(META_CAPABILITIES), dict):
        sent = {**sent, META_CAPABILITIES: within(sent[META_CAPABILITIES], meta[META_CAPABILITIES])}
    params["_meta"] = {**meta, **sent}
    return params


def within(ours: Message, declared: Message) -> Message:
    """The capabilities a server is told of for one request: what ironcurtain lets it ask
    (``ours``) that the request's client also declared; roots always (ironcurtain answers
    them itself).

    >>> within({"roots": {}, "sampling": {}, "elicitation": {"form": {}, "url": {}}},
    ...        {"elicitation": {}})
    {'roots': {}, 'elicitation': {'form': {}}}
    """
    kept: Message = {k: v for k, v in ours.items() if k == "roots"}
    if "sampling" in ours and isinstance(declared.get("sampling"), dict):
        kept["sampling"] = ours["sampling"]
    modes = elicitation_modes(ours) & elicitation_modes(declared)
    if modes:
        kept["elicitation"] = {mode: {} for mode in sorted(modes)}
    return kept


def _watched(capabilities: Message) -> Message:
    """A stateless-era server's capabilities as its client ironcurtain uses them: its
    resources watched per URI only through a listen, which ironcurtain does not open on
    a client's behalf (so no ``subscribe``)."""
    resources = capabilities.get("resources")
    if isinstance(resources, dict) and "subscribe" in resources:
        kept = {k: v for k, v in resources.items() if k != "subscribe"}
        return {**capabilities, "resources": kept}
    return capabilities

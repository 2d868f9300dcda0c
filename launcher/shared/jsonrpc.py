"""The messages both sides of the relay speak: JSON-RPC 2.0 as MCP uses it, as plain dicts.

Nothing here knows a process or a socket: a server that is gone is a ``ServerGone``
whoever noticed it.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from dataclasses import field
from typing import Any

from sandbox_profiles.records import frozen

# MCP handshake-era protocol revisions, oldest first (newer clients fall back to these).
PROTOCOL_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
LATEST_PROTOCOL = PROTOCOL_VERSIONS[-1]
# The stateless era (2026-07-28 on): no handshake; every request names its version, and
# the capabilities of its client, in its ``_meta``.
STATELESS_VERSIONS = ("2026-07-28",)
META = "io.modelcontextprotocol/"
META_VERSION = META + "protocolVersion"
META_CAPABILITIES = META + "clientCapabilities"
META_CLIENT_INFO = META + "clientInfo"
META_SERVER_INFO = META + "serverInfo"
# The id of a request ironcurtain makes for a client's (a listen's subscriptions): that
# request's id, this mark, and a token of the relay's own (no client can guess one).
FOR_REQUEST = "#ironcurtain-"
# The two eras a peer speaks, as the audit log names them.
HANDSHAKE, STATELESS = "handshake", "stateless"
LINE_LIMIT = 64 * 1024 * 1024

# The methods the relay checks before a server answers them.
TOOL, PROMPT, READ = "tools/call", "prompts/get", "resources/read"
SUBSCRIBE, UNSUBSCRIBE = "resources/subscribe", "resources/unsubscribe"
COMPLETE = "completion/complete"
# The methods whose requests name a resource by its URI, decided as a read of it.
BY_URI = (READ, SUBSCRIBE, UNSUBSCRIBE)

Message = dict[str, Any]
# Called once with a request's whole response (``result`` or ``error``), or with why there
# is none (``ServerGone``, ``TimeoutError``).
OnDone = Callable[[Message | BaseException], None]


def own_info() -> dict[str, str]:
    """How ironcurtain introduces itself to an MCP peer (``serverInfo`` to its client,
    ``clientInfo`` to its servers): its name and version (the package's, from which its
    metadata is made: reading the metadata back would cost a start some 20 ms)."""
    from launcher import __version__

    return {"name": "ironcurtain", "version": __version__}


@frozen
class ClientSide:
    """What a server is told of its client, which ironcurtain plays for it: the capabilities
    declared at ``initialize`` and the roots it answers ``roots/list`` with."""

    capabilities: Message = field(default_factory=dict)
    roots: tuple[Message, ...] = ()
    era: str = "handshake"  # the protocol era offered first


_SIGNAL_MEANING = {
    signal.SIGXCPU: "its CPU time limit was reached",
    signal.SIGXFSZ: "it wrote past its file size limit",
    signal.SIGSYS: "it made a system call the sandbox forbids",
}


def describe_exit(status: int | None) -> str:
    """``exited with status 3``, ``was killed by SIGXCPU (its CPU time limit was reached)``.

    bwrap (like a shell) reports a child killed by signal N as status 128 + N.

    >>> describe_exit(152)
    'was killed by SIGXCPU (its CPU time limit was reached)'
    """
    if status is not None and 128 < status < 128 + 65:
        status = 128 - status
    if status is None or status >= 0:
        return f"exited with status {status}"
    try:
        sig = signal.Signals(-status)
    except ValueError:
        return f"was killed by signal {-status}"
    meaning = _SIGNAL_MEANING.get(sig)
    return f"was killed by {sig.name}" + (f" ({meaning})" if meaning else "")


class ServerGone(Exception):
    """The server process exited; carries its exit status, and why the launcher stopped it
    when it did (a resource limit)."""

    def __init__(self, name: str, status: int | None, reason: str | None = None) -> None:
        self.name = name
        self.status = status
        self.reason = reason
        how = f"was stopped: {reason}" if reason else describe_exit(status)
        super().__init__(f"server '{name}' {how}")


_compact = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def _not_json(name: str) -> object:
    raise ValueError(f"{name} is not a JSON value")


def _finite(text: str) -> float:
    value = float(text)
    if value - value != 0.0:  # inf - inf is NaN
        raise ValueError(f"{text} is beyond the range of a JSON number here")
    return value


_strict = json.JSONDecoder(parse_constant=_not_json, parse_float=_finite).decode


def loads(data: bytes | str) -> Any:
    """One JSON text, as RFC 8259 has it: Python's parser also takes ``NaN`` and
    ``Infinity``, which no client's parser does, so a peer that sends them is refused
    (raises ValueError) rather than relayed. So is a number too large for a double
    (``1e400``), which Python reads as infinity and would write back as ``Infinity``
    (RFC 8259 lets a parser limit the range of numbers).

    >>> loads(b'{"progress": 1.5}')
    {'progress': 1.5}
    >>> loads(b'{"progress": NaN}')
    Traceback (most recent call last):
    ValueError: NaN is not a JSON value
    >>> loads(b'{"progress": -1e400}')
    Traceback (most recent call last):
    ValueError: -1e400 is beyond the range of a JSON number here
    """
    if isinstance(data, bytes | bytearray):
        data = data.decode(json.detect_encoding(data), "surrogatepass")
    return _strict(data)


def encode(message: Message) -> bytes:
    return _compact(message).encode() + b"\n"


def error(request_id: Any, code: int, message: str, data: object = None) -> Message:
    err: Message = {"code": code, "message": message}
    if data is not None:
        err["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": err}


def result(request_id: Any, value: Message) -> Message:
    return {"jsonrpc": "2.0", "id": request_id, "result": value}


def notification(method: str, params: Message | None = None) -> Message:
    message: Message = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        message["params"] = params
    return message


def unencodable(value: object) -> bool:
    """Whether ``value`` holds a string with no UTF-8 form (a lone surrogate), which no
    audit entry and no message to a server can carry. Quick for an ASCII string.

    >>> unencodable("call-1"), unencodable("r\\u00e9"), unencodable({"a": ["\\ud800"]})
    (False, False, True)
    """
    if type(value) is str:
        if value.isascii():
            return False
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False
    if value is None or type(value) is int:
        return False
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except (ValueError, RecursionError):  # nested past what can be written is refused too
        return True
    return False


def tool_result(text: str, is_error: bool = True) -> Message:
    return {"content": [{"type": "text", "text": text}], "isError": is_error}


def completion_arguments(params: Message) -> dict[str, object] | None:
    """A completion's arguments to check: the one being completed first, then those its
    ``context`` gives; None when they are not all strings or the ref is not one MCP has.

    >>> completion_arguments({"ref": {"type": "ref/prompt", "name": "p"},
    ...     "argument": {"name": "b", "value": "x"}, "context": {"arguments": {"a": "y"}}})
    {'b': 'x', 'a': 'y'}
    >>> completion_arguments({"ref": {"type": "ref/prompt"}, "argument": {"name": "b", "value": 1}})
    """
    ref, argument = params.get("ref"), params.get("argument")
    if not isinstance(ref, dict) or ref.get("type") not in ("ref/prompt", "ref/resource"):
        return None
    if not isinstance(argument, dict):
        return None
    name, value = argument.get("name"), argument.get("value")
    context = params.get("context")
    given = context.get("arguments", {}) if isinstance(context, dict) else {}
    if not isinstance(name, str) or not isinstance(value, str) or not isinstance(given, dict):
        return None
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in given.items()):
        return None
    return {name: value, **{k: v for k, v in given.items() if k != name}}

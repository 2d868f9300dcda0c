"""A server's question as the client gets it, and as a human approving it is shown: one
function makes both, so nothing reaches the client that was not shown.

- **Sampling** (``sampling/createMessage``): the whole request, every field the server sent
  (each message and content part of any type, tool definitions and results, the system
  prompt, ``_meta``, ``maxTokens``...), with ``includeContext`` as ``none``. An approval
  shows this very dict and "approve for this session" is keyed on its hash, so a later
  request that differs in anything forwarded is asked again.
- **Elicitation, form mode**: only the fields a form has (``mode``, ``message``,
  ``requestedSchema``). Every string a client could show is written with escapes
  (:func:`launcher.shared.shown.visible`; a form's labels on one line), and the form is
  marked as the server's: each line of the message and every title starts with
  ``[server 'name']``, so a form cannot pass for ironcurtain's own approval question
  (whose message starts with
  ``ironcurtain:``). Strings the client hands back to the server as they are (property
  names, ``enum`` and ``const`` values, ``required``) cannot be escaped without changing the
  answer: a form where one of them would act on a screen is refused.
- **Elicitation, URL mode**: relayed only for ``https://host[:port][/path]`` (ASCII, no
  user information, no spaces, controls or backslashes) whose host is within the server's
  ``allowedDomains`` and not its ``deniedDomains`` (an IP address only when named there with
  its port), the same rules as its egress. A server with no network cannot hand the human a
  link that carries workspace data elsewhere; the message names the host.

A request that cannot be made safe raises :class:`Refused`; the server is told why.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from launcher.shared.jsonrpc import Message
from launcher.shared.shown import visible
from policy.egress import EgressRules, check_host

ELICIT = "elicitation/create"
SAMPLE = "sampling/createMessage"
# The fields of each elicitation mode; anything else a server adds is not relayed.
_FORM_FIELDS = ("mode", "message", "requestedSchema")
_URL_FIELDS = ("mode", "message", "url", "elicitationId")
# Where a form holds strings the client answers with, unchanged.
_ANSWERED = frozenset({"enum", "const", "required"})
_DEPTH = 16  # a form's schema is flat; this allows its nesting with room to spare
_URL = re.compile(
    r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<host>[A-Za-z0-9.-]+)"
    r"(?::(?P<port>[0-9]{1,5}))?(?P<rest>[/?#][\x21-\x5b\x5d-\x7e]*)?"
)


class Refused(ValueError):
    """A server's question that cannot be relayed as it is: why, naming the field."""


def mark(server: str) -> str:
    """What every line of a server's question starts with."""
    return f"[server '{server}']"


def forwarded(
    server: str,
    method: str,
    params: Message,
    allowed_domains: Sequence[str] = (),
    denied_domains: Sequence[str] = (),
) -> Message:
    """The request the client gets for ``params`` (what a human approving it is shown);
    ``allowed_domains`` and ``denied_domains``: the server's egress lists, which a URL-mode
    elicitation's link must keep to. Raises :class:`Refused`."""
    if method == SAMPLE:
        if params.get("includeContext") not in (None, "none"):
            return {**params, "includeContext": "none"}
        return dict(params)
    mode = params.get("mode", "form")
    message = params.get("message") or ""
    if not isinstance(message, str):
        raise Refused("message: not a string")
    if mode == "url":
        out = {k: params[k] for k in _URL_FIELDS if k in params}
        if "elicitationId" in out:  # the client answers with it, as it is
            _strings(out["elicitationId"], "elicitationId", 0, answered=True)
        url, host = _checked_url(params.get("url"), allowed_domains, denied_domains)
        said = _lines(server, message) + f"\n{mark(server)} (the link opens {host})"
        return {**out, "url": url, "message": said}
    out = {k: params[k] for k in _FORM_FIELDS if k in params}
    out["message"] = _lines(server, message)
    if "requestedSchema" in params:
        out["requestedSchema"] = _form(server, params["requestedSchema"])
    return out


def _lines(server: str, text: str) -> str:
    """``text`` shown as escapes, each line marked as the server's (so no line of it can
    pass for ironcurtain's own words)."""
    return "\n".join(f"{mark(server)} {line}".rstrip() for line in visible(text).split("\n"))


def _label(text: str) -> str:
    """A string of a form, shown on one line as escapes."""
    return visible(text, one_line=True)


def _form(server: str, schema: object) -> Message:
    """A form's ``requestedSchema`` with its labels escaped and its titles marked."""
    if not isinstance(schema, dict):
        raise Refused("requestedSchema: not an object")
    out = _strings(schema, "requestedSchema", 0)
    assert isinstance(out, dict)
    if isinstance(out.get("title"), str):
        out["title"] = f"{mark(server)} {out['title']}"
    properties = out.get("properties")
    if properties is None:
        return out
    if not isinstance(properties, dict):
        raise Refused("requestedSchema.properties: not an object")
    for name, field in properties.items():
        if not isinstance(field, dict):
            raise Refused(f"requestedSchema.properties.{name}: not an object")
        # A field with no title is shown by its name: it gets one, so it is marked too.
        title = field.get("title")
        field["title"] = f"{mark(server)} {title if isinstance(title, str) else name}"
    return out


def _strings(value: object, where: str, depth: int, answered: bool = False) -> object:
    """``value`` with every string escaped; those the client answers with (``answered``)
    and every key are kept, and refused when escaping would change them."""
    if depth > _DEPTH:
        raise Refused(f"{where}: nested deeper than {_DEPTH} levels")
    if isinstance(value, str):
        if not answered:
            return _label(value)
        shown = visible(value, one_line=True)
        if shown != value:
            raise Refused(
                f"{where}: '{shown}' holds characters that act on a screen, and the client "
                "answers with it as it is"
            )
        return value
    if isinstance(value, list):
        return [_strings(v, f"{where}[{i}]", depth + 1, answered) for i, v in enumerate(value)]
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            _strings(key, f"{where} (a key)", depth, answered=True)
            out[key] = _strings(item, f"{where}.{key}", depth + 1, answered or key in _ANSWERED)
        return out
    return value


def _checked_url(url: object, allowed: Sequence[str], denied: Sequence[str]) -> tuple[str, str]:
    """The link as the client gets it, and its host as the human is told it; refused when
    it is not ``https`` to a host the server's egress allows."""
    if not isinstance(url, str):
        raise Refused("url: not a string")
    shown = visible(url, one_line=True)[:200]
    match = _URL.fullmatch(url)
    if match is None:
        raise Refused(
            f"url '{shown}': not of the form https://host[:port][/path] (ASCII, no user "
            "name, spaces, controls or backslashes)"
        )
    if match["scheme"].lower() != "https":
        raise Refused(f"url '{shown}': only an https link is relayed, not {match['scheme']}:")
    host = match["host"].lower().rstrip(".")
    port = int(match["port"]) if match["port"] else 443
    verdict = check_host(EgressRules.from_config(allowed, denied), host, port)
    if verdict.reason is not None:
        raise Refused(
            f"url '{shown}': {verdict.reason}; a server's link may only lead where its "
            "egress may (sandbox.network.allowedDomains)"
        )
    netloc = host if match["port"] is None else f"{host}:{port}"
    return f"https://{netloc}{match['rest'] or ''}", netloc

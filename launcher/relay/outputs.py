"""What a server sends the client, filtered on its way: a tool's answer through its output
policy (:mod:`policy.output`), and everything a server sends (answers, resource contents,
prompts, log and progress messages, its questions) through the credential detectors
(:mod:`policy.secrets`), unless its config turns them off (``"maskSecrets": false``).

A tool's output policy applies to ``structuredContent``, to text content that is a JSON
object or array, and to embedded resources whose MIME type is JSON. What it cannot filter
field by field (prose, an image, a resource of another type) is removed from the answer of a
tool that has an output policy, and a text item says so: once a tool has one, only what the
policy lets through reaches the agent, by any path. Its answer is rebuilt from what the
policy passed, so nothing rides beside it: no ``_meta``, no key the MCP schema does not
name, no ``annotations`` or ``_meta`` of a content item, no embedded resource's own URI,
``blob`` or ``_meta``; an error answer reaches the client as a generic error (the server's
code, message and data withheld); a progress notification of such a call is made anew from
its numbers.
What a server sends on its own, not as part of a call (log messages, resource updates), is
not a tool's answer: the credential detectors see it, no output policy does.

The credential detectors also run over the ``tools``, ``prompts`` and ``resources``
listings (descriptions, titles, schemas, object keys), once per listing, not per call.
A tool's or prompt's ``name`` is left as it is: it is how calls are routed.

The credential detectors catch what passes by accident (a file that holds a key). A hostile
server can always encode a secret past them; that it never sees one is the sandbox's job."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from launcher.shared.error_codes import INTERNAL_ERROR
from launcher.shared.jsonrpc import TOOL, Message, loads
from policy.output import Filtered, OutputPolicy, ToolOutputPolicy
from policy.secrets import mask_known, mask_strings

UNFILTERABLE = (
    "[removed by the output policy: content that is not a JSON object or array cannot be "
    "filtered field by field]"
)
WITHHELD_ERROR = "the tool failed; its error text is withheld by the output policy"
# What an embedded resource that passed the output policy is called (its own URI is the
# server's to fill: it could carry what the policy removed).
FILTERED_URI = "ironcurtain:filtered"
RESULT_KEYS = frozenset({"content", "structuredContent", "isError"})


class Outputs:
    def __init__(
        self,
        policy: OutputPolicy,
        mask_secrets: Mapping[str, bool],
        known: Sequence[tuple[str, str]] = (),
    ) -> None:
        self.policy = policy
        self.mask_secrets = mask_secrets  # per server; absent: on
        # The config's secrets (name, value): masked from every server, whatever it says.
        self.known = tuple(known)

    def answer(
        self, server: str, method: str, name: str, answer: Message
    ) -> tuple[Message, Message | None]:
        """The answer to one request as the client is to see it, and what was done to it
        for the audit entry (counts and detector names, never values; None: nothing)."""
        counts = Filtered()
        if method == TOOL:
            tool_policy = self.policy.for_tool(server, name)
            if tool_policy is not None:
                answer = _filter_tool_result(tool_policy, answer, counts)
        found: list[str] = []
        if self.mask_secrets.get(server, True):
            answer = mask_strings(answer, found)
        answer = mask_known(answer, self.known, found)
        record: Message = {}
        if counts.masked:
            record["fieldsMasked"] = counts.masked
        if counts.removed:
            record["fieldsRemoved"] = counts.removed
        if found:
            record["secretsMasked"] = dict(sorted(Counter(found).items()))
        return answer, record or None

    def error(self, server: str, method: str, name: str, err: Message) -> Message:
        """A server's error answer to one request as the client is to see it: for a tool
        with an output policy a generic one (its text, data and code are the server's to
        fill, and nothing the policy has not seen reaches the client); credentials masked."""
        if method == TOOL and self.policy.for_tool(server, name) is not None:
            return {"code": INTERNAL_ERROR, "message": WITHHELD_ERROR}
        return self.message(server, err)

    def progress(self, server: str, method: str, name: str, message: Message) -> Message | None:
        """A progress notification of one call as the client is to see it: for a tool
        with an output policy made anew from its numbers alone (anything else in it is the
        server's to fill), none when it has no number; credentials masked."""
        if method == TOOL and self.policy.for_tool(server, name) is not None:
            params = message.get("params")
            params = params if isinstance(params, dict) else {}
            kept = {"progressToken": params.get("progressToken")}
            for key in ("progress", "total"):
                if type(params.get(key)) in (int, float):
                    kept[key] = params[key]
            if "progress" not in kept:
                return None
            return {"jsonrpc": "2.0", "method": "notifications/progress", "params": kept}
        return self.message(server, message)

    def message(self, server: str, message: Message) -> Message:
        """A notification or a request from ``server``, credentials masked."""
        found: list[str] = []
        if self.mask_secrets.get(server, True):
            message = mask_strings(message, found)
        masked: Message = mask_known(message, self.known, found)
        return masked

    def listed(self, server: str, items: list[Message]) -> list[Message]:
        """What ``server`` lists (tools, prompts, resources, templates) as the client is
        to see it: credentials masked everywhere but in a ``name``, which routes calls."""
        on = self.mask_secrets.get(server, True)
        if not on and not self.known:
            return items
        found: list[str] = []
        shown = []
        for item in items:
            masked = mask_strings(item, found) if on else item
            masked = mask_known(masked, self.known, found)
            if masked is not item and "name" in item:
                masked = {**masked, "name": item["name"]}
            shown.append(masked)
        return shown


def _filter_tool_result(policy: ToolOutputPolicy, answer: Message, counts: Filtered) -> Message:
    """The answer rebuilt from what the policy lets through: only the keys a tool's result
    has (``content``, ``structuredContent``, ``isError``), each filtered."""
    out: Message = {}
    dropped = [key for key in answer if key not in RESULT_KEYS]
    counts.removed += len(dropped)
    structured = answer.get("structuredContent")
    if isinstance(structured, dict | list):
        out["structuredContent"] = _apply(policy, structured, counts)
    elif "structuredContent" in answer:
        counts.removed += 1  # not an object or an array: nothing to filter it by
    content = answer.get("content")
    if isinstance(content, list):
        out["content"] = [_filter_item(policy, item, counts) for item in content]
    else:
        if "content" in answer:
            counts.removed += 1
        out["content"] = []
    if answer.get("isError") is True:
        out["isError"] = True
    return out


def _filter_item(policy: ToolOutputPolicy, item: Any, counts: Filtered) -> Message:
    """One content item through the policy, rebuilt from its filtered text alone (its
    ``annotations`` and ``_meta``, a resource's URI and ``blob`` are the server's to fill
    and not filtered field by field); what cannot be filtered is replaced."""
    if isinstance(item, dict):
        if item.get("type") == "text" and isinstance(item.get("text"), str):
            filtered = _filter_json_text(policy, item["text"], counts)
            if filtered is not None:
                return {"type": "text", "text": filtered}
        resource = item.get("resource")
        if item.get("type") == "resource" and isinstance(resource, dict):
            mime = resource.get("mimeType")
            if isinstance(mime, str) and _is_json(mime) and isinstance(resource.get("text"), str):
                filtered = _filter_json_text(policy, resource["text"], counts)
                if filtered is not None:
                    return {
                        "type": "resource",
                        "resource": {"uri": FILTERED_URI, "mimeType": mime, "text": filtered},
                    }
    counts.removed += 1
    return {"type": "text", "text": UNFILTERABLE}


def _filter_json_text(policy: ToolOutputPolicy, text: str, counts: Filtered) -> str | None:
    """The text filtered when it is a JSON object or array (None: it is not)."""
    start = text.lstrip()[:1]
    if start not in ("{", "["):
        return None
    try:
        value = loads(text)
    except (ValueError, RecursionError):
        return None
    filtered = _apply(policy, value, counts)
    indent = 2 if "\n" in text.strip() else None
    return json.dumps(filtered, ensure_ascii=False, indent=indent)


def _apply(policy: ToolOutputPolicy, value: Any, counts: Filtered) -> Any:
    filtered, done = policy.apply(value)
    counts.add(done)
    return filtered


def _is_json(mime: str) -> bool:
    """
    >>> _is_json("application/json"), _is_json("application/ld+json; charset=utf-8")
    (True, True)
    >>> _is_json("text/plain")
    False
    """
    base = mime.split(";", 1)[0].strip().lower()
    return base == "application/json" or base.endswith("+json")

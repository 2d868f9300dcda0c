"""Credentials in what the agent sends a server: the arguments of a tool call, a prompt or a
resource read, read by the same detectors that mask what servers send
(:mod:`policy.secrets`), and for the exact value of every secret the config holds.

What is caught, in any string of the arguments (object keys too, at any depth):

- a detector's match, as the text holds it, or in the text URL-decoded (``%2F``...);
- a configured secret's value as it is; URL-encoded (any ``%XX`` spelling, decoded before
  the search); as hex (upper or lower case); as base64, standard or URL-safe, padded or not,
  alone or inside a longer text that was encoded whole (``user:VALUE`` in a ``Basic``
  credential): the part of its encoding that only the value decides, at each of the three
  alignments, so no decoding is needed. Encoded forms are looked for only for a value of 8
  characters or more (a shorter one's encodings are too short to tell from chance).

What is not: a value split across strings, reversed, compressed, encrypted, encoded twice,
line-wrapped base64 (MIME's 76 columns), or in any other encoding. The scan catches what
an agent passes on by accident or on a page's say-so; it is no bound on a determined one.

A finding names the detector (``aws-access-key-id``, or ``configured-secret NAME`` with
the form it was found in) and where in the arguments it was (``content``,
``files[2].text``), never the value. A text shorter than any match is passed over without
a search."""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from urllib.parse import unquote

from policy.decision import Decision
from policy.secrets import DETECTORS, mask_text
from sandbox_profiles.records import frozen

SECRET_RULE = "secret-in-arguments"
# What an opt-out names for the configured secrets' values (all of them).
CONFIGURED = "configured-secret"
DETECTOR_NAMES = (*(d.kind for d in DETECTORS), CONFIGURED)
# The shortest text any detector matches (a Slack token: ``xoxb-`` and 10 more).
SHORTEST_MATCH = 15
SHORTEST_ENCODED = 8  # a value shorter than this is looked for only as it is
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]{1,64}")


@frozen
class Finding:
    """A credential in one argument: ``argument`` is where (a top-level name, then
    ``.key`` and ``[index]`` down to the string), ``detector`` what found it."""

    argument: str
    detector: str
    top: str  # the top-level argument that holds it

    def said(self) -> str:
        """
        >>> Finding("files[0].text", "github-token", "files").said()
        "argument 'files[0].text' holds a credential (github-token)"
        """
        return f"argument '{self.argument}' holds a credential ({self.detector})"


@frozen
class ArgumentScan:
    """What one server's arguments are scanned for: the detectors kept (none when every
    one is opted out), and each configured secret's forms as (name, form, text)."""

    detectors: frozenset[str]
    forms: tuple[tuple[str, str, str], ...]
    shortest: int  # the shortest text that may hold a finding

    @classmethod
    def of(cls, known: Iterable[tuple[str, str]], skip: Iterable[str] = ()) -> ArgumentScan:
        """For the config's secrets ``known`` (name, value), without the detectors named in
        ``skip`` (:data:`CONFIGURED` for the values).

        >>> scan = ArgumentScan.of([("T", "0123456789ab")], skip=["jwt"])
        >>> "jwt" in scan.detectors, sorted({form for _, form, _ in scan.forms})
        (False, ['base64', 'hex', 'plain'])
        """
        skipped = set(skip)
        detectors = frozenset(d.kind for d in DETECTORS if d.kind not in skipped)
        forms = () if CONFIGURED in skipped else tuple(_forms(known))
        lengths = [len(text) for _, _, text in forms]
        if detectors:
            lengths.append(SHORTEST_MATCH)
        return cls(detectors, forms, min(lengths, default=1 << 62))


def _forms(known: Iterable[tuple[str, str]]) -> Iterator[tuple[str, str, str]]:
    r"""Each value, and (when long enough) its base64 and hex forms.

    >>> sorted({text for _, form, text in _forms([("T", "user:pass")]) if form == "base64"})
    ['ZXI6cGFz', 'c2VyOnBh', 'dXNlcjpwYXNz']
    """
    seen: set[str] = set()
    for name, value in known:
        raw = value.encode()
        candidates = [("plain", value)]
        if len(value) >= SHORTEST_ENCODED:
            candidates += [("hex", raw.hex()), ("hex", raw.hex().upper())]
            for core in _base64_cores(raw):
                safe = core.replace("+", "-").replace("/", "_")  # the URL-safe alphabet
                candidates += [("base64", core), ("base64", safe)]
        for form, text in candidates:
            if text and text not in seen:
                seen.add(text)
                yield name, form, text


def _base64_cores(raw: bytes) -> Iterator[str]:
    """The part of the base64 of any text holding ``raw`` that only ``raw`` decides, at
    each alignment (``raw`` starting 0, 1 or 2 bytes into a group of three): the groups
    that hold bytes of ``raw`` alone."""
    for shift in range(3):
        encoded = base64.b64encode(bytes(shift) + raw).decode()
        whole = (len(raw) + shift) // 3 * 4
        core = encoded[4 if shift else 0 : whole]
        if len(core) >= SHORTEST_ENCODED:
            yield core


def scan_arguments(arguments: Mapping[str, object], scan: ArgumentScan) -> tuple[Finding, ...]:
    """The credentials in ``arguments``: the first found in each top-level argument.

    >>> scan = ArgumentScan.of([("API_TOKEN", "s3cr3t-Value-for-the-api")])
    >>> [f.said() for f in scan_arguments({"a": ["x", {"k": "AKIAIOSFODNN7EXAMPLE"}]}, scan)]
    ["argument 'a[1].k' holds a credential (aws-access-key-id)"]
    >>> [f.detector for f in scan_arguments({"b": "czNjcjN0LVZhbHVlLWZvci10aGUtYXBp"}, scan)]
    ['configured-secret API_TOKEN, base64']
    >>> scan_arguments({"path": "notes.txt", "content": "nothing to see"}, scan)
    ()
    """
    shortest = scan.shortest
    found: list[Finding] = []
    for top, value in arguments.items():
        if isinstance(value, str):  # the common case, without the walk
            strings: Iterable[tuple[str, str]] = ((str(top), value),)
        elif isinstance(value, (dict, list, tuple)):
            strings = _strings(str(top), value)
        else:
            continue
        for where, text in strings:
            if len(text) < shortest:
                continue
            detector = _in_text(text, scan)
            if detector is not None:
                found.append(Finding(where, detector, str(top)))
                break
    return tuple(found)


def escalated(found: Sequence[Finding], decision: Decision) -> Decision:
    """``decision`` for a request whose arguments hold ``found``: a human must approve
    sending them (never silently forwarded; with no one to ask, the request is not made);
    what the policy said besides is kept in the reason.

    >>> escalated([Finding("t", "jwt", "t")], Decision("allow", "r", "ok")).reason
    "argument 't' holds a credential (jwt); a human must approve sending it to the server"
    """
    if not found or decision.decision == "deny":
        return decision
    also = f"; and {decision.rule}: {decision.reason}" if decision.decision != "allow" else ""
    said = "; ".join(finding.said() for finding in found)
    reason = f"{said}; a human must approve sending it to the server{also}"
    return Decision("escalate", SECRET_RULE, reason)


def _strings(top: str, value: object) -> Iterator[tuple[str, str]]:
    """Every string in ``value`` (keys too), with where it is; depth-first, no recursion
    (the client chooses the depth)."""
    stack: list[tuple[str, object]] = [(_step("", top), value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, str):
            yield where, item
        elif isinstance(item, dict):
            pending: list[tuple[str, object]] = []
            for index, (key, inner) in enumerate(item.items()):
                if isinstance(key, str):
                    yield f"{where} (key {index})", key
                named = key if isinstance(key, str) and _PLAIN_KEY.fullmatch(key) else None
                pending.append((_step(where, named or f"<key {index}>"), inner))
            stack.extend(reversed(pending))
        elif isinstance(item, (list, tuple)):
            stack.extend((f"{where}[{i}]", inner) for i, inner in reversed(list(enumerate(item))))


def _step(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _in_text(text: str, scan: ArgumentScan) -> str | None:
    """What finds a credential in ``text`` (None: nothing does)."""
    found = _detected(text, scan.detectors) or _known(text, scan.forms)
    if found is None and "%" in text:
        decoded = unquote(text)
        if decoded != text:
            found = _detected(decoded, scan.detectors) or _known(decoded, scan.forms, True)
    return found


def _detected(text: str, detectors: frozenset[str]) -> str | None:
    if not detectors:
        return None
    kinds: list[str] = []
    mask_text(text, kinds)
    return next((kind for kind in kinds if kind in detectors), None)


def _known(text: str, forms: Sequence[tuple[str, str, str]], decoded: bool = False) -> str | None:
    for name, form, value in forms:
        if value in text:
            said = "url-encoded" if decoded and form == "plain" else form
            return f"{CONFIGURED} {name}, {said}"
    return None

"""Pattern approvals: which patterns a question may offer, and whether a call falls under one.

A human who approves a call "for this session" may widen the approval to a pattern the
question offers, of one of three kinds, each bound to one server, one tool and the policy
rule that escalated the call:

- ``directory``: calls whose every path (by the tool's annotated roles, absolute, ``..``
  and links resolved) lies under one directory, the call reading or writing there (never
  removing: a delete role is not covered);
- ``domain``: calls whose every URL is an ``http``/``https`` URL on exactly one scheme,
  host and port (no subdomain, no user information, nothing a URL parser could read two
  ways);
- ``tool``: calls with any arguments, for a tool whose arguments are all of one role class
  that changes nothing on the host and reaches no host but this one (reads, or none naming
  a resource).

No pattern is offered for, nor answers, a call escalated because its arguments hold a
credential: each credential sent is approved on its own.

A pattern only ever answers a question: what the policy denies (a ``deny`` rule, a
structural invariant) is decided before anyone is asked, so no pattern reaches it. A
directory that is, or lies inside, a protected place or a system directory is never offered.

Pure functions over the annotation and the call's arguments.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Literal

from policy.argument_scan import SECRET_RULE
from policy.models import Annotation
from policy.paths import iter_strings
from policy.prepare import prepare_tool_args
from policy.roles import ArgumentRole
from sandbox_profiles.records import frozen

Kind = Literal["directory", "domain", "tool"]
# The role classes a tool's arguments fall in.
_CLASS_OF: dict[str, str] = {
    "read-path": "read",
    "write-path": "write",
    "delete-path": "delete",
    "fetch-url": "url",
    "git-remote-url": "git",
    "branch-name": "opaque",
    "commit-message": "opaque",
    "none": "opaque",
}
# Classes a tool pattern may cover: nothing on the host is changed through them. (A tool
# that writes is offered its directory instead, one that fetches its host: "any URL" would
# be every host at once.)
_TOOL_CLASSES = frozenset({"read", "opaque"})
_CLASS_WORDS = {
    "read": "the paths it names are read",
    "opaque": "none of them names a path or a URL",
}
# A URL a domain pattern can judge: scheme, then a host of ASCII letters, digits, '-' and
# dots only, then an optional port, then the end of the authority. User information ('@'),
# a backslash, percent escapes, non-ASCII (IDN) hosts and IP literals never match.
_STRICT_URL = re.compile(
    r"(?P<scheme>https?)://(?P<host>[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
    r"(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)+)\.?(?::(?P<port>[0-9]{1,5}))?(?:[/?#]|$)",
    re.IGNORECASE,
)
_DEFAULT_PORT = {"http": 80, "https": 443}


# Rules no pattern is given for, nor answers: a credential in a call's arguments is
# approved by a human each time it is sent (the next call carries another one).
_ASKED_EACH_TIME = frozenset({SECRET_RULE})
# A tool's name or a directory shown as it is in a pattern's words: anything else is quoted.
_PLAIN = re.compile(r"[A-Za-z0-9_./+@:~-]+")


@frozen(slots=True)
class CallShape:
    """What the patterns judge of one tool call: its server, tool, the rule that escalated
    it, the role class of each argument (None: an argument the annotation does not name),
    its paths as the policy reads them and its URLs as they are forwarded."""

    server: str
    tool: str
    rule: str
    classes: Mapping[str, str | None]
    paths: tuple[str, ...]
    urls: tuple[str, ...]

    @property
    def kinds(self) -> frozenset[str]:
        """The resource classes of the call's arguments ('opaque' alone when none)."""
        found = {c for c in self.classes.values() if c is not None and c != "opaque"}
        return frozenset(found or {"opaque"})

    @property
    def unannotated(self) -> bool:
        return any(c is None for c in self.classes.values())


@frozen(slots=True)
class Pattern:
    kind: Kind
    server: str
    tool: str
    rule: str
    value: str  # the directory, the host, or the role class

    def text(self) -> str:
        """The exact words the human chooses (and the list shows). The tool's name (the
        server's) and the directory (the agent's) are quoted when they hold anything but a
        plain name's characters, so neither can pass for the words around it."""
        tool, value = _delimited(self.tool), _delimited(self.value)
        head = f"calls of {tool} on server '{self.server}' escalated by rule {self.rule}"
        if self.kind == "directory":
            return f"{head} whose every path is under {value} (reads and writes there)"
        if self.kind == "domain":
            return (
                f"{head} whose every URL is on {value} "
                "(exactly this scheme, host and port; no subdomain)"
            )
        return f"{head}, with any arguments ({_CLASS_WORDS[self.value]})"

    def record(self) -> dict[str, str]:
        return {
            "kind": self.kind,
            "server": self.server,
            "tool": self.tool,
            "rule": self.rule,
            "value": self.value,
        }


def _delimited(name: str) -> str:
    """``name`` as it is, when it is made of a plain name's characters; else in double
    quotes with its quotes, backslashes and non-ASCII written as escapes (so it ends where
    the quote does, and no look-alike or invisible character passes as another)."""
    return name if _PLAIN.fullmatch(name) else json.dumps(name)


def call_shape(
    server: str,
    tool: str,
    rule: str,
    annotation: Annotation,
    arguments: Mapping[str, object],
    cwd: str | None,
) -> CallShape:
    """The shape of a call of ``tool`` annotated ``annotation`` (``arguments`` as they are
    forwarded; paths are read as the policy reads them)."""
    roles: Mapping[str, Sequence[ArgumentRole]] = annotation.args
    transport, for_policy = prepare_tool_args(arguments, annotation, cwd)
    classes: dict[str, str | None] = {}
    paths: list[str] = []
    urls: list[str] = []
    for argument in arguments:
        given = roles.get(argument)
        if given is None:
            classes[argument] = None
            continue
        kinds = {_CLASS_OF[r] for r in given} - {"opaque"}
        classes[argument] = "/".join(sorted(kinds)) if kinds else "opaque"
        if kinds & {"read", "write", "delete"}:
            paths += list(iter_strings(for_policy.get(argument)))
        if kinds & {"url", "git"}:
            urls += list(iter_strings(transport.get(argument)))
    return CallShape(server, tool, rule, classes, tuple(paths), tuple(urls))


def strict_host(url: str) -> str | None:
    """The host of ``url`` when a domain pattern can judge it (lower case), else None."""
    found = _STRICT_URL.match(url)
    if found is None or url != url.strip():
        return None
    return found["host"].lower()


def strict_origin(url: str) -> str | None:
    """The scheme, host and port of ``url`` (``https://example.com``, the default port
    left out) when a domain pattern can judge it, else None: a pattern given for one never
    covers another port of the host, nor its plain ``http`` for ``https``."""
    host = strict_host(url)
    found = _STRICT_URL.match(url)
    if host is None or found is None:
        return None
    scheme = found["scheme"].lower()
    port = int(found["port"]) if found["port"] is not None else _DEFAULT_PORT[scheme]
    if not 0 < port < 65536:
        return None
    return f"{scheme}://{host}" + ("" if port == _DEFAULT_PORT[scheme] else f":{port}")


def _under(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def offered(shape: CallShape, refused: Callable[[str], str | None]) -> list[Pattern]:
    """The patterns a question about the call ``shape`` may offer; ``refused(directory)``
    says why a directory may not be approved as a whole (None: it may)."""
    if shape.unannotated or shape.rule in _ASKED_EACH_TIME:
        return []
    found: list[Pattern] = []
    kinds = shape.kinds
    head = (shape.server, shape.tool, shape.rule)
    if "write" in kinds and kinds <= {"read", "write"} and shape.paths:
        directory = _directory(shape.paths)
        if directory is not None and refused(directory) is None:
            found.append(Pattern("directory", *head, directory))
    if kinds == {"url"} and shape.urls:
        origins = {strict_origin(url) for url in shape.urls}
        if len(origins) == 1 and None not in origins:
            (origin,) = origins
            assert origin is not None
            found.append(Pattern("domain", *head, origin))
    if len(kinds) == 1 and next(iter(kinds)) in _TOOL_CLASSES:
        found.append(Pattern("tool", *head, next(iter(kinds))))
    return found


def _directory(paths: Sequence[str]) -> str | None:
    """The directory holding every path's directory: the one a directory pattern names
    (None: only the root holds them, or a path is not absolute)."""
    if not all(os.path.isabs(p) and "\0" not in p for p in paths):
        return None
    directory = os.path.commonpath([os.path.dirname(p) for p in paths])
    return None if directory == "/" else directory


def covers(pattern: Pattern, shape: CallShape) -> bool:
    """Whether the call ``shape`` falls under ``pattern``."""
    if (pattern.server, pattern.tool, pattern.rule) != (shape.server, shape.tool, shape.rule):
        return False
    if shape.unannotated or shape.rule in _ASKED_EACH_TIME:
        return False
    kinds = shape.kinds
    if pattern.kind == "directory":
        return (
            "write" in kinds
            and kinds <= {"read", "write"}
            and bool(shape.paths)
            and all(os.path.isabs(p) and _under(p, pattern.value) for p in shape.paths)
        )
    if pattern.kind == "domain":
        return (
            kinds == {"url"}
            and bool(shape.urls)
            and all(strict_origin(url) == pattern.value for url in shape.urls)
        )
    return kinds == {pattern.value} and pattern.value in _TOOL_CLASSES

"""A small reader of Seatbelt profiles (SBPL): balanced forms, the allow and deny rules, and
a structural check of a rendered profile against the profile it came from: ``(deny
default)`` first, every allowed path present in both its ``/private`` forms, every deny after
every allow for the same path, no network but the proxy's port, no Apple Events."""

from __future__ import annotations

import re
from dataclasses import dataclass

from sandbox_profiles import seatbelt
from sandbox_profiles.model import SandboxProfile
from sandbox_profiles.profile import EGRESS_SOCKET

_TOKEN = re.compile(r'\s+|;[^\n]*|#"(?:[^"])*"|"(?:\\.|[^"\\])*"|[()]|[^\s()";]+')


@dataclass
class Form:
    items: list[object]
    line: int

    @property
    def head(self) -> str:
        return str(self.items[0]) if self.items else ""


def parse(text: str) -> list[Form]:
    """Top-level forms; raises on an unbalanced or unterminated profile."""
    stack: list[Form] = []
    top: list[Form] = []
    pos = line = 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            raise ValueError(f"line {line + 1}: cannot read {text[pos : pos + 20]!r}")
        token = match.group(0)
        pos = match.end()
        line += token.count("\n")
        if token.isspace() or token.startswith(";"):
            continue
        if token == "(":
            stack.append(Form([], line + 1))
        elif token == ")":
            if not stack:
                raise ValueError(f"line {line + 1}: unbalanced )")
            form = stack.pop()
            (stack[-1].items if stack else top).append(form)
        else:
            if not stack:
                raise ValueError(f"line {line + 1}: atom outside a form: {token}")
            stack[-1].items.append(token)
    if stack:
        raise ValueError(f"unbalanced: {len(stack)} form(s) not closed")
    return top


def unquote(token: object) -> str:
    text = str(token)
    if text.startswith('#"'):
        return text[2:-1]
    if text.startswith('"'):
        return re.sub(r"\\(.)", r"\1", text[1:-1])
    return text


@dataclass(frozen=True)
class Rule:
    action: str  # allow / deny
    operations: tuple[str, ...]
    filters: tuple[tuple[str, str], ...]  # (subpath|literal|regex, value)
    index: int


def rules(forms: list[Form]) -> list[Rule]:
    out = []
    for index, form in enumerate(forms):
        if form.head not in ("allow", "deny"):
            continue
        ops = tuple(str(i) for i in form.items[1:] if not isinstance(i, Form))
        filters = tuple(
            (f.head, unquote(f.items[1]))
            for f in form.items[1:]
            if isinstance(f, Form) and len(f.items) == 2 and not isinstance(f.items[1], Form)
        )
        out.append(Rule(form.head, ops, filters, index))
    return out


def allowed(rs: list[Rule], op: str) -> set[str]:
    return {
        v
        for r in rs
        if r.action == "allow" and any(o.startswith(op) for o in r.operations)
        for k, v in r.filters
        if k in ("subpath", "literal")
    }


def check_structure(text: str, profile: SandboxProfile) -> list[Rule]:
    forms = parse(text)
    assert forms[0].items == ["version", "1"]
    assert forms[1].items == ["deny", "default"]
    rs = rules(forms)
    reads, writes = allowed(rs, "file-read"), allowed(rs, "file-write")
    for mount in profile.mounts:
        inside_writable = any(
            mount.dest == w or mount.dest.startswith(w + "/") for w in profile.writable
        )
        if mount.kind == "ro-bind" and mount.source == mount.dest and not inside_writable:
            for form in seatbelt.both_forms(mount.dest):
                assert form in reads, f"read of {form} missing"
        if mount.kind == "bind" and mount.dest != EGRESS_SOCKET:
            for form in seatbelt.both_forms(mount.dest):
                assert form in writes, f"write of {form} missing"
    # No allow after a deny for the same path: the deny would lose.
    denied_at: dict[str, int] = {}
    for rule in rs:
        for _kind, value in rule.filters:
            if rule.action == "deny":
                denied_at.setdefault(value, rule.index)
            elif value in denied_at:
                raise AssertionError(f"allow of {value} after its deny")
    last_allow = max(r.index for r in rs if r.action == "allow")
    assert all(
        r.index > last_allow
        for r in rs
        if (r.action == "deny" and r.filters)
        or (r.action == "deny" and r.operations in (("network*",), ("appleevent-send",)))
    )
    assert any(r.action == "deny" and r.operations == ("appleevent-send",) for r in rs)
    network_allows = [
        r for r in rs if r.action == "allow" and any(o.startswith("network") for o in r.operations)
    ]
    if profile.network == "none":
        assert any(r.action == "deny" and r.operations == ("network*",) for r in rs)
        assert network_allows == []
    else:  # only the proxy's loopback port
        assert [r.operations for r in network_allows] == [("network-outbound",)]
        assert '(allow network-outbound (remote ip "localhost:3128"))' in text
    return rs

"""The Seatbelt rendering: a golden file, and a small SBPL reader that checks structure.

sandbox-exec does not exist here, so the profile is checked as text: balanced forms,
``(deny default)`` first, every allowed path present in both its ``/private`` forms, every
deny after every allow for the same path, no network, no Apple Events.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from sandbox_profiles import seatbelt
from sandbox_profiles.model import Mount, SandboxProfile
from sandbox_profiles.profile import (
    ALWAYS_PROTECTED_NAMES,
    EGRESS_SOCKET,
    ProfileRequest,
    build_profile,
)

GOLDEN = Path(__file__).parent / "data" / "golden" / "seatbelt-filesystem.sb"

# -- a small SBPL reader ------------------------------------------------------------------

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
            (stack[-1].items if stack else top).append(form)  # type: ignore[arg-type]
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


def sample_profile() -> SandboxProfile:
    """A fixed profile (no host paths looked at), as build_profile makes them."""
    ws = "/tmp/ic-ws"
    return SandboxProfile(
        name="filesystem",
        argv=("/opt/node/bin/node", "/opt/npm/lib/node_modules/fs-server/dist/index.js", ws),
        cwd=ws,
        env={"PATH": "/usr/bin:/bin", "HOME": "/tmp/home"},
        mounts=(
            Mount("ro-bind", "/usr", "/usr", "programs and libraries"),
            Mount("symlink", "/bin", "usr/bin", "programs (often a link into /usr)"),
            Mount("ro-bind", "/etc/ssl", "/etc/ssl", "system configuration programs read"),
            Mount("ro-bind", "/etc/passwd", "/run/ic/passwd", "generated /etc/passwd"),
            Mount("proc", "/proc", reason="a fresh /proc"),
            Mount("dev", "/dev", reason="a minimal /dev"),
            Mount("tmpfs", "/tmp", reason="a private /tmp", mode=0o1777),
            Mount("ro-bind", "/Users/me/lib", "/Users/me/lib", "allowRead"),
            Mount("bind", ws, ws, "the session workspace"),
            Mount("bind", "/Users/me/out", "/Users/me/out", "allowWrite"),
            Mount("dir", "/opt", reason="parent of /opt/node", mode=0o755),
            Mount("ro-bind", "/opt/node", "/opt/node", "installation prefix of node"),
            Mount(
                "ro-bind",
                "/opt/npm/lib/node_modules",
                "/opt/npm/lib/node_modules",
                "the command's Node package tree",
            ),
            Mount(
                "ro-bind", f"{ws}/.git/hooks", f"{ws}/.git/hooks", "always protected: .git/hooks"
            ),
            Mount("ro-bind", f"{ws}/report.txt", f"{ws}/report.txt", "denyWrite"),
            Mount("tmpfs", "/Users/me/lib/secrets", reason="denyRead: hidden behind an empty dir"),
            Mount("mask-file", f"{ws}/.env", "/run/ic/masked", "denyRead: an unreadable file"),
        ),
        writable=(ws, "/Users/me/out"),
    )


def test_golden_profile() -> None:
    text = seatbelt.render(sample_profile())
    if os.environ.get("IRONCURTAIN_UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()


def test_golden_profile_structure() -> None:
    profile = sample_profile()
    rs = check_structure(seatbelt.render(profile), profile)
    denied = {(r.action, v) for r in rs for _, v in r.filters if r.action == "deny"}
    assert ("deny", "/tmp/ic-ws/.git/hooks") in denied
    assert ("deny", "/private/tmp/ic-ws/report.txt") in denied
    assert ("deny", "/Users/me/lib/secrets") in denied
    assert ("deny", "/tmp/ic-ws/.env") in denied
    # The always-protected names at any depth, in both forms of each writable root.
    regexes = [v for r in rs for k, v in r.filters if k == "regex"]
    for name in ALWAYS_PROTECTED_NAMES:
        assert any(re.match(rx, f"/private/tmp/ic-ws/a/b/{name}/x") for rx in regexes), name
        assert any(re.match(rx, f"/Users/me/out/{name}") for rx in regexes), name
    assert not any(re.match(rx, "/tmp/ic-ws/notes/.git-hooks.md") for rx in regexes)
    assert not any(re.match(rx, "/tmp/ic-ws-evil/.bashrc") for rx in regexes)


def test_a_real_profile_renders_with_the_same_structure(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "deep" / ".git" / "hooks").mkdir(parents=True)
    profile = build_profile(
        ProfileRequest(
            name="probe",
            command_path=sys.executable,
            args=["-V"],
            env={},
            workspace=str(ws),
            deny_read=[str(ws / "secret-dir")],
            runtime_dir=str(tmp_path / "rt"),
        )
    )
    check_structure(seatbelt.render(profile), profile)


@pytest.mark.parametrize(
    "broken",
    ["(version 1)\n(deny default", "(version 1))", '(allow file-read* (subpath "/x))'],
)
def test_the_reader_rejects_broken_profiles(broken: str) -> None:
    with pytest.raises(ValueError):
        parse(broken)


def test_a_networked_server_may_reach_only_the_proxy_port(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    profile = build_profile(
        ProfileRequest(
            name="fetch",
            command_path=sys.executable,
            args=[],
            env={},
            workspace=str(ws),
            runtime_dir=str(tmp_path / "rt"),
            egress_socket=str(tmp_path / "rt" / "egress.sock"),
            bridge_python=sys.executable,
        )
    )
    assert profile.network == "proxy"
    text = seatbelt.render(profile)
    check_structure(text, profile)
    assert "(deny network*)" not in text  # it would override the one allow


def test_the_reader_catches_an_allow_after_a_deny() -> None:
    profile = sample_profile()
    text = seatbelt.render(profile) + '(allow file-write* (subpath "/tmp/ic-ws/report.txt"))\n'
    with pytest.raises(AssertionError):
        check_structure(text, profile)

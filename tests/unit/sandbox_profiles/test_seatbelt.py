"""The Seatbelt rendering: a golden file, and the structure a small SBPL reader checks
(tests/support/seatbelt.py).

sandbox-exec does not exist here, so the profile is checked as text: balanced forms,
``(deny default)`` first, every allowed path present in both its ``/private`` forms, every
deny after every allow for the same path, no network, no Apple Events.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from sandbox_profiles import seatbelt
from sandbox_profiles.autorun import PROTECTED_PATTERNS, PROTECTED_SUFFIXES
from sandbox_profiles.model import Mount, SandboxProfile
from sandbox_profiles.profile import (
    ALWAYS_PROTECTED_NAMES,
    ProfileRequest,
    build_profile,
)
from tests.support.paths import TESTS
from tests.support.seatbelt import check_structure, parse

GOLDEN = TESTS / "data" / "golden" / "seatbelt-filesystem.sb"


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
    regexes = [re.compile(v) for r in rs for k, v in r.filters if k == "regex"]
    for name in ALWAYS_PROTECTED_NAMES:
        assert any(rx.match(f"/private/tmp/ic-ws/a/b/{name}/x") for rx in regexes), name
        assert any(rx.match(f"/Users/me/out/{name}") for rx in regexes), name
    assert not any(rx.match("/tmp/ic-ws/notes/.git-hooks.md") for rx in regexes)
    assert not any(rx.match("/tmp/ic-ws-evil/.bashrc") for rx in regexes)


def _instance(pattern: str) -> str:
    return pattern.replace("*", "staging")


@pytest.mark.parametrize("pattern", [*PROTECTED_PATTERNS, *PROTECTED_SUFFIXES])
def test_names_with_a_wildcard_are_denied_at_any_depth_in_any_case(pattern: str) -> None:
    """``mise.*.toml`` as ``mise.staging.toml`` (and ``*.pth``): a Mac's file system folds
    case, so ``MISE.STAGING.TOML`` is the file mise reads too."""
    profile = sample_profile()
    rs = check_structure(seatbelt.render(profile), profile)
    regexes = [
        re.compile(v) for r in rs if r.action == "deny" for k, v in r.filters if k == "regex"
    ]
    for path in (
        f"/tmp/ic-ws/a/b/{_instance(pattern)}",
        f"/private/tmp/ic-ws/{_instance(pattern).upper()}",
        f"/Users/me/out/x/{_instance(pattern)}/inside",
    ):
        assert any(rx.match(path) for rx in regexes), path
    if 0 < pattern.find("*") < len(pattern) - 1:  # the wildcard does not cross a directory
        crossing = pattern.replace("*", "a/b")
        assert not any(rx.match(f"/tmp/ic-ws/{crossing}") for rx in regexes), crossing


def test_every_catalogue_name_is_denied_whatever_its_case() -> None:
    profile = sample_profile()
    rs = check_structure(seatbelt.render(profile), profile)
    regexes = [
        re.compile(v) for r in rs if r.action == "deny" for k, v in r.filters if k == "regex"
    ]
    for name in ALWAYS_PROTECTED_NAMES:
        assert any(rx.match(f"/tmp/ic-ws/d/{name.upper()}") for rx in regexes), name


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

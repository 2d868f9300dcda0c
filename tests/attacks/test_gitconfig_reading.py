"""Git configurations read as git reads them, checked against the real ``git config``.

Each configuration below is a variant an attacker would try for a file that names a hooks
directory: ``git config -f FILE --list`` (the user's git) and the reader must agree on every
key and value, byte for byte, or both refuse the file. A path that is not UTF-8 is protected
as the exact bytes git uses, and the guard moves what a server makes there.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from launcher.guard.watch import Guard, Quarantined
from sandbox_profiles.gitconfig import GitConfigError, parse_config, read_config
from sandbox_profiles.present import existing
from tests.support.client import Client
from tests.support.home import Home
from tests.support.marks import needs_bwrap
from tests.support.paths import IRONCURTAIN
from tests.support.probe import probe_session

CORE = b"[core]\n\trepositoryformatversion = 0\n"
VARIANTS: dict[str, bytes] = {
    "bom": b"\xef\xbb\xbf" + CORE + b"\thooksPath = .hk\n",
    "partial-bom": b"\xef\xbb" + CORE,
    "utf-16": "[core]\n\thooksPath = .hk\n".encode("utf-16"),
    "crlf": (CORE + b"\thooksPath = .hk\n").replace(b"\n", b"\r\n"),
    "cr-inside-a-value": CORE + b"\thooksPath = .h\rk\n",
    "form-feed": CORE + b"\thooksPath = .h\x0ck\n",
    "vertical-tab-line": CORE + b"\x0b\thooksPath = .hk\n",
    "nul-in-a-value": CORE + b"\thooksPath = .hk\x00/x\n",
    "quoted-escapes": CORE + b'\thooksPath = ".h\\"k\\\\\\tx"\n',
    "unknown-escape": CORE + b"\thooksPath = .h\\qk\n",
    "continuation": CORE + b"\thooksPath = .h\\\nk\n",
    "continuation-crlf": CORE + b"\thooksPath = .h\\\r\nk\r\n",
    "inline-comments": CORE + b"\thooksPath = .hk ; no\n\tfsmonitor = a # b\n",
    "quoted-comment-chars": CORE + b'\thooksPath = ".h;k#"\n',
    "case": b"[CoRe]\n\tHOOKSPATH = .hk\n",
    "subsection": b'[core "x"]\n\thooksPath = .hk\n[core.Y]\n\thooksPath = .y\n',
    "subsection-escapes": b'[includeIf "gitdir:/a\\"b\\\\c"]\n\tpath = x\n',
    "conditions": b'[includeIf "onbranch:m*"]\n\tpath = a\n[includeIf "hasconfig:remote.*.url:h"]'
    b"\n\tpath = b\n",
    "inner-blanks": CORE + b"\thooksPath =   .h   k  \n",
    "no-value": CORE + b"\tbare\n",
    "no-header": b"hooksPath = .hk\n",
    "not-utf-8": CORE + b"\thooksPath = .h\xffk\n",
    "bad-header": b"[core\n\thooksPath = .hk\n",
    "key-with-digit-first": CORE + b"\t1x = y\n",
    "long": CORE + b"#" * (3 << 20) + b"\n\thooksPath = .hk\n",
}


def _git_reads(path: Path) -> list[tuple[str, str]] | None:
    """What the real git reads from a file: (key, value) in order; None when it refuses."""
    done = subprocess.run(
        ["git", "config", "--file", str(path), "--list", "--null"],
        capture_output=True,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GIT_CONFIG_NOSYSTEM": "1"},
        check=False,
    )
    if done.returncode != 0:
        return None
    found = []
    for item in done.stdout.split(b"\0")[:-1]:
        key, _, value = item.partition(b"\n")
        found.append((os.fsdecode(key), os.fsdecode(value) if b"\n" in item else "true"))
    return found


def _we_read(path: Path) -> list[tuple[str, str]] | None:
    try:
        entries = parse_config(read_config(str(path)))
    except GitConfigError:
        return None
    found = []
    for section, sub, key, value in entries:
        name = ".".join(p for p in (section, sub, key) if p is not None and p != "")
        found.append((name, "true" if value is None else value))
    # git --list shows a value up to a NUL byte (a C string), as git uses it
    return [(k, v.split("\0", 1)[0]) for k, v in found]


@pytest.mark.parametrize("name", VARIANTS)
def test_the_reader_reads_what_git_reads(name: str, tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_bytes(VARIANTS[name])
    assert _we_read(config) == _git_reads(config)


def test_a_hooks_path_that_is_not_utf8_is_protected_as_its_bytes(tmp_path: Path) -> None:
    """The user's repository takes hooks from a directory named by bytes that are not
    UTF-8, not there yet. It is guarded as exactly those bytes: a hook made there is moved
    before git could run it. Unguarded (the control), git runs it."""
    results = {}
    for guarded in (True, False):
        ws = tmp_path / f"ws-{guarded}"
        repo = ws / "repo"
        repo.mkdir(parents=True)
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
        with open(repo / ".git" / "config", "ab") as config:
            config.write(b"\thooksPath = h\xffooks\n")
        protection = existing([str(ws)], str(tmp_path / "home"), None)
        hooks = os.path.join(str(repo), os.fsdecode(b"h\xffooks"))
        assert hooks in protection.guarded, protection.guarded
        seen: list[Quarantined] = []
        guard = Guard([str(ws)], protection.guarded if guarded else [], str(tmp_path), seen.append)
        guard.start()
        hook = os.path.join(os.fsencode(str(repo)), b"h\xffooks", b"pre-commit")
        os.makedirs(os.path.dirname(hook))
        marker = tmp_path / f"ran-{guarded}"
        with open(hook, "w") as script:
            script.write(f"#!/bin/sh\ntouch {marker}\n")
        os.chmod(hook, 0o755)
        guard.settle()
        guard.close()
        subprocess.run(
            [
                "git",
                "-c",
                "user.name=u",
                "-c",
                "user.email=u@x",
                "commit",
                "-qm",
                "x",
                "--allow-empty",
            ],
            cwd=repo,
            env={
                "PATH": os.environ.get("PATH", ""),
                "HOME": str(tmp_path),
                "GIT_CONFIG_NOSYSTEM": "1",
            },
            capture_output=True,
            check=False,
        )
        results[guarded] = (marker.exists(), [r.path for r in seen] == [hooks])
    assert results[True] == (False, True), results
    assert results[False][0], results  # the control: unguarded, git ran it


def test_a_configuration_that_cannot_be_read_makes_every_root_read_only(tmp_path: Path) -> None:
    """No permission to read a repository's configuration: every writable root is shown
    read-only, saying which file and why (as root, a FIFO stands for it)."""
    ws = tmp_path / "ws"
    other = tmp_path / "other"
    other.mkdir()
    repo = ws / "repo"
    repo.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    os.mkfifo(ws / "team.gitconfig")
    subprocess.run(["git", "-C", str(repo), "config", "include.path", "../../team.gitconfig"])
    protection = existing([str(ws), str(other)], str(tmp_path / "home"), None)
    assert set(protection.read_only) == {str(ws), str(other)}, protection.read_only
    assert "team.gitconfig: is not a regular file" in protection.read_only[str(ws)]
    assert protection.guarded == [] and protection.unreadable


@needs_bwrap
def test_a_session_whose_roots_are_made_read_only_says_so(user: Home) -> None:
    """Failing closed, loudly: the operator is told at start that the server can write
    nothing, and why."""
    ws = user.ws()
    repo = ws / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    os.mkfifo(ws / "team.gitconfig")
    subprocess.run(["git", "-C", str(repo), "config", "include.path", "../../team.gitconfig"])
    args, _, _ = probe_session(user)
    client = Client.spawn([IRONCURTAIN, "run", *args], user.env, stderr=subprocess.PIPE)
    try:
        client.initialize({}, timeout=60)
        client.hang_up()
        client.proc.wait(timeout=20)
        assert client.proc.stderr is not None
        stderr = client.proc.stderr.read().decode()
    finally:
        client.kill()
    said = [line for line in stderr.splitlines() if "can write nothing this session" in line]
    assert said and "server 'probe'" in said[0] and "team.gitconfig" in said[0], stderr

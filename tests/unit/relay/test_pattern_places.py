"""Which paths a pattern approval never answers for (each such call is asked): files in the
places host tools load or run from, whatever the case of their names (a
case-insensitive mount opens ``.GIT/hooks`` as ``.git/hooks``), and the home's settings and
secrets. Ordinary project files stay answerable, or patterns would be worthless."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from launcher.relay.approving.grants import runs_on_host
from launcher.relay.escalation import _loaded_or_steering

# Below the project ``proj``, or the home: each a file in a place host tools load or run.
NEVER = {
    "git-hook": "proj/.git/hooks/pre-commit",
    "git-hook-upper": "proj/.GIT/HOOKS/pre-commit",
    "git-hook-trailing-dot": "proj/.git./hooks/pre-commit",
    "claude-settings": "proj/.claude/settings.json",
    "claude-upper": "proj/.CLAUDE/settings.json",
    "vscode-tasks": "proj/.vscode/tasks.json",
    "direnv": "proj/.direnv/x",
    "ssh-authorized-keys": "home/.ssh/authorized_keys",
    "local-bin": "home/.local/bin/ls",
    "autostart": "home/.config/autostart/x.desktop",
    "systemd-user": "home/.config/systemd/user/x.service",
    "aws-credentials": "home/.aws/credentials",
    "netrc": "home/.netrc",
}
ANSWERABLE = ["proj/src/main.py", "proj/README.md", "proj/docs/notes.txt", "home/notes/a.txt"]


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "home").mkdir()
    (tmp_path / "proj").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return tmp_path


@pytest.mark.parametrize("relative", list(NEVER.values()), ids=list(NEVER))
def test_a_pattern_never_answers_a_call_naming(root: Path, relative: str) -> None:
    path = os.path.join(root, relative)
    assert _loaded_or_steering(path)
    # Control: the file's own name is in no catalogue (only the place holding it is).
    if relative not in (NEVER["aws-credentials"], NEVER["netrc"]):
        assert runs_on_host(path, False) is None


@pytest.mark.parametrize("relative", ANSWERABLE)
def test_an_ordinary_file_stays_answerable(root: Path, relative: str) -> None:
    assert not _loaded_or_steering(os.path.join(root, relative))

"""The catalogue's matcher on the families that live in a home: every user-level file of every
client ``wrap`` knows (walked from the client table, so the two stay in step), the login,
PATH and autostart places, agent instruction files and direnv's own names, each as a
home-relative suffix below any directory; and the ordinary work that must stay writable."""

from __future__ import annotations

import pytest

from launcher.clients.catalogue.table import CLIENTS
from sandbox_profiles import autorun


def _none(_: str) -> bool:
    return False


def _matched(parts: list[str]) -> bool:
    """Whether the path, or a directory on its way (the catalogue finds a directory
    entry whole and does not descend into it), is a catalogue entry."""
    return any(
        autorun.match(parts[:n], n < len(parts), _none) is not None
        for n in range(1, len(parts) + 1)
    )


def _user_files() -> list[tuple[str, str]]:
    files = [(c.name, rel) for c in CLIENTS for rel in c.user]
    files += [(c.name, rel) for c in CLIENTS for rel, _ in c.unsupported]
    return [(name, rel.replace("*", "x")) for name, rel in files]


USER_FILES = _user_files()


@pytest.mark.parametrize(("client", "rel"), USER_FILES, ids=[f"{c}:{r}" for c, r in USER_FILES])
def test_every_user_file_of_every_client_is_in_the_catalogue(client: str, rel: str) -> None:
    """Below a home, below a home kept inside a project, at any depth."""
    for base in ([], ["backup", "home", "ada"]):
        assert _matched([*base, *rel.split("/")]), (client, rel)


# Where each is matched below any directory, with the entry it is.
HOME_PLACES = [
    "Library/Application Support/Claude/claude_desktop_config.json",
    "Library/Application Support/Code/User/mcp.json",
    ".config/Code/User/settings.json",
    ".config/Code/User/tasks.json",
    ".vscode-server/extensions/evil/extension.js",
    ".local/bin/git",
    ".local/bin",
    ".bashrc.d/50-evil.sh",
    ".profile.d/evil.sh",
    ".config/systemd/user/evil.service",
    ".local/share/systemd/user/evil.timer",
    ".config/autostart/evil.desktop",
    ".config/environment.d/50-evil.conf",
    ".aws/config",
    ".aws/cli/alias",
    ".kube/config",
    ".ssh/config",
    ".ssh/rc",
    ".pam_environment",
    ".xprofile",
    ".xsessionrc",
    ".tmux.conf",
    ".docker/cli-plugins/docker-evil",
    ".gnupg/gpg-agent.conf",
    "CLAUDE.md",
    "sub/dir/CLAUDE.local.md",
    "AGENTS.md",
    "GEMINI.md",
    ".cursorrules",
    ".cursor/rules/evil.mdc",
    ".windsurfrules",
    ".clinerules",
    ".clinerules/evil.md",
    ".github/copilot-instructions.md",
    ".github/instructions/evil.instructions.md",
    ".envrc.local",
    ".envrc.private",
    ".envrc.d/evil.sh",
    ".direnv/python-3.11/bin/git",
]


@pytest.mark.parametrize("rel", HOME_PLACES)
def test_a_home_place_is_matched_below_any_directory(rel: str) -> None:
    assert _matched(["proj", *rel.split("/")]), rel


def test_a_homes_bin_is_told_from_a_projects_bin_by_a_profile_beside_it() -> None:
    for marker in autorun.HOME_MARKERS:
        found = autorun.match(["backup", "bin"], True, {marker}.__contains__)
        assert found is autorun.HOME_BIN_ENTRY, marker
    assert autorun.match(["proj", "bin"], True, {"setup.py", "README.md"}.__contains__) is None


# Ordinary work: what projects write that no host tool loads or runs by itself.
ORDINARY = [
    "proj/bin/build.sh",
    "proj/.env",
    "proj/.env.local",
    "proj/.env.example",
    "proj/docs/agents.txt",
    "proj/CLAUDE.md.txt",
    "proj/github/copilot-instructions.md",
    "proj/.github/workflows/ci.yml",
    "proj/local/bin/tool",
    "proj/.aws-notes/config",
    "proj/kube/config",
    "proj/envrc.local",
]


@pytest.mark.parametrize("rel", ORDINARY)
def test_ordinary_work_stays_out_of_the_catalogue(rel: str) -> None:
    assert not _matched(rel.split("/")), rel


def test_instruction_files_are_known_as_such() -> None:
    """A call the user approved may write them; the rest of the catalogue it may not."""
    for rel in ("CLAUDE.md", "AGENTS.md", ".github/copilot-instructions.md", ".cursorrules"):
        entry = autorun.match(["proj", *rel.split("/")], False, _none)
        assert entry in autorun.INSTRUCTION_ENTRIES, rel
    assert autorun.match(["proj", ".bashrc"], False, _none) not in autorun.INSTRUCTION_ENTRIES

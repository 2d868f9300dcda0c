"""An entry wrap writes may start its own name's definition or its client's definition of
that name (``NAME.CLIENT``, when another client defines ``NAME`` otherwise). As a hostile
project: a planted entry exactly as wrap writes it, but starting another server of the
user's config (one the user granted more), must not count as protected; and a planted
``.github/mcp.json`` or ``.trae/mcp.json`` is read as the project's (its relative paths
never resolved to the user's). Each beside its control."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.support.home import Home
from tests.support.paths import IRONCURTAIN


def _cli(user: Home, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [IRONCURTAIN, *args], env=user.env, cwd=cwd, capture_output=True, text=True,
        stdin=subprocess.DEVNULL, timeout=120,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("server", "protected"),
    [("home-files", False), ("notes.gemini", False), ("notes.claude-code.07", False),
     ("notes.claude-code", True), ("notes.claude-code.2", True), ("notes", True)],
)  # fmt: skip
def test_a_planted_entry_starting_another_definition_is_not_protected(
    user: Home, server: str, protected: bool
) -> None:
    project = user.root / "proj"
    project.mkdir()
    config_dir = user.config / "ironcurtain"
    config_dir.mkdir(parents=True)
    # The user's own server, granted their whole home.
    (config_dir / "mcp-servers.json").write_text(json.dumps({"mcpServers": {
        "home-files": {"command": "/usr/bin/env", "args": ["true"],
                       "sandbox": {"filesystem": {"allowWrite": [str(user.home)]}}},
    }}))  # fmt: skip
    run = ["run", "--workspace", str(project), "--config", str(config_dir / "mcp-servers.json"),
           "--policy-dir", str(config_dir / "policy"), "--server", server]  # fmt: skip
    entry = {"command": IRONCURTAIN, "args": run}
    (project / ".mcp.json").write_text(json.dumps({"mcpServers": {"notes": entry}}))
    listed = _cli(user, project, "clients", "--check")
    line = next(x for x in listed.stdout.splitlines() if x.strip().startswith("notes "))
    if protected:  # the control: its own name's, or its client's definition of that name
        assert "runs through ironcurtain" in line, listed.stdout
    else:  # the attack: the user's other server, under the project's entry's name
        assert "NOT protected" in line and "not what wrap writes" in line, listed.stdout
        assert listed.returncode == 1


@pytest.mark.parametrize("relative", [".github/mcp.json", ".trae/mcp.json"])
@pytest.mark.parametrize("linked", [True, False])
def test_a_new_project_file_gets_a_projects_treatment(
    user: Home, relative: str, linked: bool
) -> None:
    project = user.root / "proj"
    (project / "data").mkdir(parents=True)
    mine = user.home / "mine.json"
    entry = {"command": "/usr/bin/env", "args": ["true", "../home", str(project / "data")]}
    if relative.startswith(".github"):
        entry["type"] = "local"
    mine.write_text(json.dumps({"mcpServers": {"s": entry}}))
    planted = project / relative
    planted.parent.mkdir(parents=True)
    if linked:  # the attack: the project's file is a link to the user's own
        planted.symlink_to(mine)
    else:  # the control: a plain file of the project
        planted.write_text(mine.read_text())
    before = mine.read_bytes()
    done = _cli(user, project, "wrap", "--all", "--no-annotate")
    assert done.returncode == 0, done.stderr
    if linked:
        assert f"{planted}: a symbolic link" in done.stderr, done.stderr
        assert mine.read_bytes() == before and planted.is_symlink()
        return
    config = json.loads((user.config / "ironcurtain" / "mcp-servers.json").read_text())
    fs = config["mcpServers"]["s"].get("sandbox", {}).get("filesystem", {})
    granted = [m for ms in fs.values() for m in ms]
    assert str(user.home) not in granted and granted == [str(project / "data")], granted

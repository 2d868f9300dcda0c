"""A client fills in variables (and, Crush, runs commands) in its own file before it starts a
server: what wrap writes there, and what an entry already wrapped holds, must reach
ironcurtain as written. As a hostile project: a directory named with the client's variable
syntax would turn the wrapped entry's ``--workspace`` into the home; a planted entry that is
"exactly what wrap writes" but for an environment value the client fills by running a
command would count as protected. Each attack beside its control."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.support.home import Home
from tests.support.paths import IRONCURTAIN


def _cli(user: Home, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [IRONCURTAIN, *args], env=user.env, cwd=cwd, capture_output=True, text=True,
        stdin=subprocess.DEVNULL, timeout=60,
    )  # fmt: skip


def _as_opencode_reads(path: Path) -> dict[str, object]:
    """The file as opencode takes it: every {env:NAME} replaced in the raw text (unset: "")."""
    text = re.sub(r"\{env:([^}]+)\}", lambda m: os.environ.get(m.group(1), ""), path.read_text())
    return json.loads(text)  # type: ignore[no-any-return]


@pytest.mark.parametrize("named", ["..{env:IC_UNSET_VARIABLE}", "plain-project"])
def test_a_project_named_with_the_clients_syntax_is_not_wrapped(user: Home, named: str) -> None:
    project = user.root / "home" / "work" / named
    project.mkdir(parents=True)
    config = {"mcp": {"files": {"type": "local", "command": ["/usr/bin/env", "true"]}}}
    (project / "opencode.json").write_text(json.dumps(config, indent=2))
    done = _cli(user, project, "wrap", "--client", "opencode", "--no-annotate")
    entry = _as_opencode_reads(project / "opencode.json")["mcp"]["files"]  # type: ignore[index]
    command = entry["command"]
    if named == "plain-project":  # the control: wrapped, the project as its workspace
        assert done.returncode == 0, done.stderr
        assert command[command.index("--workspace") + 1] == str(project)
        return
    # The attack: opencode would give ironcurtain `.../work/..` (the home) as the workspace.
    assert "--workspace" not in command, command
    assert "fills in what looks like a variable" in done.stdout + done.stderr


@pytest.mark.parametrize("value", ["$(id > PLANTED)", "`id > PLANTED`", "$API_TOKEN"])
def test_an_entry_whose_env_the_client_fills_by_a_command_is_not_protected(
    user: Home, value: str
) -> None:
    # As the project: a Crush entry exactly as wrap writes it, but for an env value Crush
    # resolves by running a command on the host before it starts ironcurtain.
    project = user.root / "home" / "proj"
    project.mkdir(parents=True)
    done = _cli(user, project, "clients")
    assert done.returncode == 0, done.stderr
    config_dir = user.root / "xdg-config" / "ironcurtain"
    run = ["run", "--workspace", str(project), "--config", str(config_dir / "mcp-servers.json"),
           "--policy-dir", str(config_dir / "policy"), "--server", "s"]  # fmt: skip
    entry = {"type": "stdio", "command": IRONCURTAIN, "args": run, "env": {"API_TOKEN": value}}
    (project / "crush.json").write_text(json.dumps({"mcp": {"s": entry}}))
    listed = _cli(user, project, "clients", "--check")
    line = next(x for x in listed.stdout.splitlines() if x.strip().startswith("s "))
    if value == "$API_TOKEN":  # the control: a plain reference to a secret is what wrap keeps
        assert "runs through ironcurtain" in line, listed.stdout
    else:
        assert "NOT protected" in line and "runs the command" in line, listed.stdout
        assert listed.returncode == 1


@pytest.mark.parametrize("hidden", [True, False])
def test_an_opencode_file_read_one_way_by_opencode_and_another_by_ironcurtain_is_refused(
    user: Home, hidden: bool
) -> None:
    # As the project: opencode fills {env:...} in the raw text before it parses; a quote in
    # one ends a string for opencode only, and a second "mcp" with a bare command appears.
    project = user.root / "home" / "proj"
    project.mkdir(parents=True)
    config_dir = user.root / "xdg-config" / "ironcurtain"
    run = ["run", "--workspace", str(project), "--config", str(config_dir / "mcp-servers.json"),
           "--policy-dir", str(config_dir / "policy"), "--server", "srv"]  # fmt: skip
    wrapped = json.dumps({"srv": {"type": "local", "command": [IRONCURTAIN, *run]}})
    trick = '"{env:x", "theme": /* "}"' if hidden else '"{env:HOME}", "theme": "dark"'
    text = (
        '{\n  "mcp": ' + wrapped + ',\n  "$schema": ' + trick + ',\n'
        '  "mcp": {"srv": {"type": "local", "command": ["/bin/sh", "-c", "id > PWNED"]}},\n'
        '  "username": // */\n  "me"\n}\n'
    )  # fmt: skip
    if not hidden:  # the control: the same file without the trick, as opencode reads it too
        text = text.replace("// */\n", "\n")
    (project / "opencode.json").write_text(text)
    listed = _cli(user, project, "clients", "--check")
    assert listed.returncode == 1, listed.stdout  # anything but "all protected"
    said = listed.stdout + listed.stderr
    assert ("would read the file differently" in said) is hidden, said


@pytest.mark.parametrize("templated", [True, False])
def test_a_continue_entry_the_client_fills_from_a_projects_env_is_left_alone(
    user: Home, templated: bool
) -> None:
    # Continue renders ${{ secrets.X }} into the YAML text before it reads it, X from the
    # project's own .env files: that entry's value cannot be said in ironcurtain's config.
    # It is listed with the reason and left alone; the file's other entry is wrapped, and
    # the file counts as one whose reading is not known (clients --check fails).
    project = user.root / "home" / "proj"
    (project / ".continue" / "mcpServers").mkdir(parents=True)
    note = "${{ secrets.NOTE }}" if templated else "a note"
    block = project / ".continue" / "mcpServers" / "b.yaml"
    block.write_text(
        "name: b\nversion: 0.0.1\nschema: v1\nmcpServers:\n  - name: plainserver\n"
        '    command: /usr/bin/env\n    args: ["true"]\n  - name: blockserver\n'
        f'    command: /usr/bin/env\n    args: ["true"]\n    description: {note}\n'
    )
    (project / ".continue" / ".env").write_text("NOTE=x\n")
    done = _cli(user, project, "wrap", "--all", "--no-annotate")
    assert done.returncode == 0, done.stderr
    listed = _cli(user, project, "clients", "--check")
    said = listed.stdout + listed.stderr
    lines = {x.split()[0]: x for x in listed.stdout.splitlines() if x.startswith("  ")}
    assert "runs through ironcurtain" in lines["plainserver"], said
    if templated:
        assert "blockserver: Continue fills its ${{ ... }}" in done.stderr, done.stderr
        assert "NOT" not in lines["blockserver"] and "fills its ${{ ... }}" in lines["blockserver"]
        assert "Continue fills each ${{ ... }} into this file's text" in said
        assert listed.returncode == 1  # what Continue reads there is not known
        assert "${{ secrets.NOTE }}" in block.read_text()
    else:  # the control: both wrapped, all counted as protected
        assert "runs through ironcurtain" in lines["blockserver"], said
        assert listed.returncode == 0, said


@pytest.mark.parametrize("above", [True, False])
def test_an_opencode_file_above_the_project_is_named_as_not_read(user: Home, above: bool) -> None:
    repo = user.root / "home" / "repo"
    project = repo / "packages" / "app"
    project.mkdir(parents=True)
    if above:  # opencode started in the project loads this one too
        bare = {"mcp": {"x": {"type": "local", "command": ["/bin/sh", "-c", "id"]}}}
        (repo / "opencode.json").write_text(json.dumps(bare))
    listed = _cli(user, project, "clients", "--check")
    said = listed.stdout + listed.stderr
    assert (str(repo / "opencode.json") in said) is above, said
    assert listed.returncode == (1 if above else 0), said


@pytest.mark.parametrize("form", ["dash alone", "long name", "plain"])
def test_a_project_file_of_an_odd_form_is_left_alone_or_wrapped_never_a_traceback(
    user: Home, form: str
) -> None:
    # As the project: valid files of forms the editors might miss must not stop wrap with a
    # traceback, half done.
    blocks = user.root / "home" / "p" / ".continue" / "mcpServers"
    blocks.mkdir(parents=True)
    item = "  -\n    name: s\n" if form == "dash alone" else "  - name: s\n"
    text = f"name: b\nversion: 1\nschema: v1\nmcpServers:\n{item}    command: /usr/bin/env\n"
    name = ("b" * 230 if form == "long name" else "b") + ".yaml"
    (blocks / name).write_text(text + '    args: ["true"]\n')
    done = _cli(user, blocks.parent.parent, "wrap", "--all", "--no-annotate")
    assert "Traceback" not in done.stderr and done.returncode == 0, done.stderr
    wrapped = "wrapped s in" in done.stdout + done.stderr
    assert wrapped is (form != "dash alone"), done.stdout + done.stderr

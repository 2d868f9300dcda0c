"""What ``clients`` and ``wrap`` take as already protected (only exactly what wrap writes),
how they show what a client's file names (as escapes where it could act on a terminal), and
a user's client file kept as a symbolic link (dotfiles) through wrap and unwrap."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.home import Home
from tests.support.paths import BIN, IRONCURTAIN

FS = os.path.join(BIN, "mcp-server-filesystem")
TIME = os.path.join(BIN, "mcp-server-time")


def _cli(user: Home, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [IRONCURTAIN, *args], env=user.env, cwd=cwd, capture_output=True, text=True,
        stdin=subprocess.DEVNULL, timeout=60,
    )  # fmt: skip


def _line(out: str, name: str) -> str:
    return next(line for line in out.splitlines() if line.startswith(f"  {name} "))


def test_only_what_wrap_writes_counts_as_protected(user: Home) -> None:
    project = user.root / "proj"
    (project / "bin").mkdir(parents=True)
    mcp = project / ".mcp.json"
    mcp.write_text(json.dumps({"mcpServers": {"clock": {"command": TIME, "args": []}}}))
    assert _cli(user, project, "wrap", "--client", "claude-code", "--no-annotate").returncode == 0
    written = json.loads(mcp.read_text())["mcpServers"]["clock"]
    config = str(user.config / "ironcurtain" / "mcp-servers.json")

    def like(*args: str, command: str = IRONCURTAIN, **more: object) -> dict[str, object]:
        return {"command": command, "args": ["run", *args], **more}

    exact = written["args"][1:]
    hostile = {
        # The project's own program, named ironcurtain.
        "own-script": like("--server", "own-script", command="./bin/ironcurtain"),
        # The real ironcurtain with the project's own config.
        "own-config": like("--config", "./x.json", "--server", "own-config"),
        # What wrap writes, and the sandbox turned off.
        "unsandboxed": like(*exact[:-1], "unsandboxed", "--allow-unsandboxed"),
        # What wrap writes, and the interpreter told to load the project's code first.
        "preloaded": like(*exact[:-1], "preloaded", env={"PYTHONPATH": str(project)}),
        # What wrap writes for another server's name.
        "other-name": like(*exact),
        # What wrap writes, with the home as the workspace.
        "home-ws": like(
            *[str(user.home) if a == str(project) else a for a in exact[:-1]], "home-ws"
        ),
    }
    data = json.loads(mcp.read_text())
    data["mcpServers"].update(hostile)
    mcp.write_text(json.dumps(data, indent=2))
    assert config in json.dumps(hostile["unsandboxed"])

    listed = _cli(user, project, "clients")
    assert listed.returncode == 0, listed.stderr
    assert (
        _line(listed.stdout, "clock").split(None, 1)[1].startswith("runs through ironcurtain")
    )  # the control
    reasons = {
        "own-script": "starts ./bin/ironcurtain, not this ironcurtain",
        "own-config": "its arguments are not what wrap writes",
        "unsandboxed": "--allow-unsandboxed",
        "preloaded": "its environment sets PYTHONPATH",
        "other-name": "its arguments are not what wrap writes",
        "home-ws": f"--workspace {user.home}",
    }
    for name, reason in reasons.items():
        line = _line(listed.stdout, name)
        assert "NOT protected" in line and reason in line, line
        assert "runs through ironcurtain" not in line

    before = mcp.read_bytes()
    done = _cli(user, project, "wrap", "--client", "claude-code", "--no-annotate")
    assert done.returncode == 0, done.stderr
    for name in hostile:
        assert f"{name}: NOT protected" in done.stderr, done.stderr
    assert mcp.read_bytes() == before  # left alone, said


def test_what_a_client_file_names_reaches_the_terminal_as_escapes(user: Home) -> None:
    project = user.root / "proj\x1b]0;owned\x07"
    project.mkdir()
    forged = "evil\n  fake  runs through ironcurtain"
    servers = {
        "clock\x1b[2J\u202e": {"command": TIME + "\x1b[31m", "args": ["\u202earg"]},
        "clock": {"command": TIME + "\x1b[31m", "args": ["\u202earg"]},
        forged: {"command": TIME, "args": []},
        "far\x1b[1A": {"url": "https://example.com/\x1b[2Kmcp"},
    }
    (project / ".mcp.json").write_text(json.dumps({"mcpServers": servers}, ensure_ascii=False))
    runs = {
        "clients": _cli(user, project, "clients"),
        "dry-run": _cli(user, project, "wrap", "--client", "claude-code", "--dry-run"),
        "wrap": _cli(user, project, "wrap", "--client", "claude-code", "--no-annotate"),
        "unwrap": _cli(user, project, "unwrap", "--client", "claude-code"),
    }
    for what, done in runs.items():
        out = done.stdout + done.stderr
        assert done.returncode in (0, 2), (what, out)
        for raw in ("\x1b", "\x07", "\u202e"):
            assert raw not in out, (what, out)
        assert not any(line.lstrip().startswith("fake") for line in out.splitlines()), out
    assert "clock\\x1b[2J\\u202e" in runs["clients"].stdout
    assert "proj\\x1b]0;owned\\x07" in runs["clients"].stdout
    assert "evil\\x0a  fake" in runs["clients"].stdout
    assert "https://example.com/\\x1b[2Kmcp" in runs["clients"].stdout
    assert "\\u202earg" in runs["dry-run"].stdout
    # A name ironcurtain's config refuses is left alone, and said so, escaped.
    assert "clock\\x1b[2J\\u202e: ironcurtain run would refuse it (" in runs["wrap"].stderr


def _dotfiles(user: Home) -> tuple[Path, Path, bytes]:
    """~/.claude.json a link into ~/dotfiles (with a comment-free JSON body and a server)."""
    dotfiles = user.home / "dotfiles"
    dotfiles.mkdir()
    target = dotfiles / "claude.json"
    target.write_text(
        json.dumps({"numStartups": 1, "mcpServers": {"clock": {"command": TIME}}}, indent=2)
    )
    link = user.home / ".claude.json"
    link.symlink_to("dotfiles/claude.json")
    return link, target, target.read_bytes()


def test_a_symlinked_user_file_stays_a_link_through_wrap_and_unwrap(user: Home) -> None:
    link, target, original = _dotfiles(user)
    # ironcurtain's own config kept in the dotfiles too.
    config = user.config / "ironcurtain" / "mcp-servers.json"
    config.parent.mkdir(parents=True)
    kept = user.home / "dotfiles" / "mcp-servers.json"
    kept.write_text('{\n  "mcpServers": {}\n}\n')
    config.symlink_to(kept)
    project = user.root / "proj"
    project.mkdir()
    done = _cli(user, project, "wrap", "--client", "claude-code", "--no-annotate")
    assert done.returncode == 0, done.stderr
    assert os.readlink(link) == "dotfiles/claude.json"
    assert json.loads(target.read_text())["mcpServers"]["clock"]["args"][-1] == "clock"
    assert (
        os.readlink(config) == str(kept) and "clock" in json.loads(kept.read_text())["mcpServers"]
    )
    done = _cli(user, project, "unwrap", "--client", "claude-code")
    assert done.returncode == 0, done.stderr
    assert os.readlink(link) == "dotfiles/claude.json"
    assert target.read_bytes() == original


def test_a_user_file_linked_into_the_project_is_not_written(user: Home) -> None:
    # The user's ~/.cursor/mcp.json points into the project wrap runs in: writing it would
    # write into a directory the project controls.
    project = user.root / "proj"
    project.mkdir()
    inside = project / "cursor-mcp.json"
    inside.write_text(json.dumps({"mcpServers": {"clock": {"command": TIME}}}))
    (user.home / ".cursor").mkdir()
    (user.home / ".cursor" / "mcp.json").symlink_to(inside)
    before = inside.read_bytes()
    done = _cli(user, project, "wrap", "--client", "cursor", "--no-annotate")
    assert done.returncode == 2
    assert f"{user.home}/.cursor/mcp.json: it links to {inside}, inside the project" in (
        done.stderr
    )
    assert inside.read_bytes() == before and (user.home / ".cursor" / "mcp.json").is_symlink()


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a file to another user")
def test_a_user_file_linked_to_another_users_file_is_not_written(user: Home) -> None:
    link, target, original = _dotfiles(user)
    os.chown(target, 65534, 65534)
    done = _cli(user, user.root, "wrap", "--client", "claude-code", "--no-annotate")
    assert done.returncode == 2
    assert f"{link}: it links to {target}, which uid 65534 owns, not you" in done.stderr
    assert target.read_bytes() == original and link.is_symlink()


def test_a_hard_linked_user_file_is_not_parted_from_its_other_name(user: Home) -> None:
    # ~/.claude.json kept as a hard link of the dotfiles' copy: a new file in its place
    # would leave the dotfiles' copy behind, silently.
    link, target, original = _dotfiles(user)
    link.unlink()
    os.link(target, link)
    dry = _cli(user, user.root, "wrap", "--client", "claude-code", "--dry-run")
    done = _cli(user, user.root, "wrap", "--client", "claude-code", "--no-annotate")
    for run in (dry, done):
        assert run.returncode == 2, run.stderr
        assert f"{link}: it has 2 hard links; writing it anew would part them" in run.stderr
    assert os.path.samefile(link, target) and target.read_bytes() == original

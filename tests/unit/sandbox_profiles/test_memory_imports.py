"""What an agent instruction file imports (``@path`` in ``CLAUDE.md`` and ``GEMINI.md``), and
that an approved call may write such a file as it may write the instruction file."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.relay.approving.grants import plan_grants
from sandbox_profiles.gitconfig import UnreadableConfig
from sandbox_profiles.memory_imports import imported
from sandbox_profiles.model import Mount, SandboxProfile
from sandbox_profiles.present import INSTRUCTIONS, existing


def test_imports_are_followed_five_hops_and_code_is_no_import(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "CLAUDE.md").write_text(
        "# ours\nSee @docs/a.md and @~/personal.md.\n```\n@not-in-a-block.md\n```\n"
        "Mail me: ada@example.com, not `@not-in-a-span.md`; @docs is a folder.\n"
    )
    (tmp_path / "docs" / "a.md").write_text("@b.md\n")
    (tmp_path / "docs" / "b.md").write_text("@c.md\n")
    found = {p for p, _ in imported(str(tmp_path / "CLAUDE.md"), "/home/ada")}
    assert str(tmp_path / "docs" / "a.md") in found and str(tmp_path / "docs" / "c.md") in found
    assert "/home/ada/personal.md" in found
    assert not any("not-in" in p or p.endswith("ada@example.com,") for p in found), found
    assert str(tmp_path / "docs") not in found


def test_an_unreadable_instruction_file_fails_closed(tmp_path: Path) -> None:
    (tmp_path / "CLAUDE.md").write_bytes(b"@x\n" * (1 << 19))
    with pytest.raises(UnreadableConfig):
        imported(str(tmp_path / "CLAUDE.md"), "/h")


def test_what_claude_md_imports_is_read_only_and_an_approval_may_write_it(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    (tmp_path / "CLAUDE.md").write_text("@ws/above.md\n")  # above the root: read too
    (tmp_path / "home" / ".claude").mkdir(parents=True)  # the user's own memory
    (tmp_path / "home" / ".claude" / "CLAUDE.md").write_text(f"@{ws}/mine.md\n")
    (ws / "sub" / "CLAUDE.md").write_text("@notes.md @new.md\n")
    (ws / "sub" / "notes.md").write_text("# notes\n")
    found = existing([str(ws)], str(tmp_path / "home"), None)
    notes = str(ws / "sub" / "notes.md")
    assert found.read_only[notes].startswith(INSTRUCTIONS)
    assert str(ws / "sub" / "new.md") in found.guarded
    assert str(ws / "above.md") in found.guarded
    assert str(ws / "mine.md") in found.guarded
    mounts = (
        Mount("bind", str(ws), str(ws), "the workspace"),
        Mount("ro-bind", notes, notes, found.read_only[notes]),
    )
    profile = SandboxProfile(
        "fs", ("/usr/bin/fs", str(ws)), str(ws), {}, mounts, writable=(str(ws),)
    )
    (grant,) = plan_grants(profile, {"path": frozenset({"write-path"})}, {"path": notes}, {})
    assert grant.outside and grant.kind == "file"

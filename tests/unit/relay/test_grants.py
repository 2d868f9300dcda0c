"""What an approval would have to give a call beyond its server's standing sandbox, and what
no approval can give (pure logic over a profile and the files there are)."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.relay.approving.grants import (
    SYSTEM_PLACES,
    CannotWiden,
    Grant,
    describe,
    instruction_paths,
    plan_grants,
)
from launcher.servers.widen import grant_dirs, widened_profile
from sandbox_profiles.model import Mount, SandboxProfile

WRITE = {"path": frozenset({"write-path"})}
READ = {"path": frozenset({"read-path"})}
REMOVE = {"path": frozenset({"delete-path"})}
MOVE = {"source": frozenset({"read-path", "delete-path"}), "destination": frozenset({"write-path"})}


def _profile(tmp_path: Path, *extra: Mount) -> SandboxProfile:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    mounts = (
        Mount("ro-bind", "/usr", "/usr", "programs"),
        Mount("tmpfs", "/tmp", reason="a private /tmp"),
        Mount("bind", str(ws), str(ws), "the workspace"),
        Mount("ro-bind", str(ws / ".git" / "config"), reason="protected"),
        *extra,
    )
    return SandboxProfile("fs", ("/usr/bin/fs", str(ws)), str(ws), {}, mounts, writable=(str(ws),))


def test_calls_the_standing_sandbox_reaches_need_nothing(tmp_path: Path) -> None:
    profile = _profile(tmp_path)
    ws = tmp_path / "ws"
    assert plan_grants(profile, WRITE, {"path": str(ws / "a.txt")}, {}) == []
    assert plan_grants(profile, READ, {"path": "/usr/share/x"}, {}) == []
    move = {"source": str(ws / "a"), "destination": str(ws / "b")}
    assert plan_grants(profile, MOVE, move, {}) == []


def test_a_write_outside_is_granted_for_that_file(tmp_path: Path) -> None:
    profile = _profile(tmp_path)
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "old.md").write_text("x")
    new = plan_grants(profile, WRITE, {"path": str(notes / "todo.md")}, {})
    assert new == [Grant("path", str(notes / "todo.md"), "write", False, "absent", reads=False)]
    old = plan_grants(profile, WRITE, {"path": str(notes / "old.md")}, {})
    assert old[0].kind == "file" and old[0].staged
    text = describe("fs", new)
    assert f"write access to the new file {notes / 'todo.md'}" in text
    assert "nothing else" in text and "each identical call after it gets the same" in text


def test_a_move_out_of_the_workspace_stages_both_ends(tmp_path: Path) -> None:
    profile = _profile(tmp_path)
    ws, notes = tmp_path / "ws", tmp_path / "notes"
    notes.mkdir()
    (ws / "r.txt").write_text("x")
    move = {"source": str(ws / "r.txt"), "destination": str(notes / "r.txt")}
    grants = plan_grants(profile, MOVE, move, {})
    assert [(g.argument, g.outside, g.staged) for g in grants] == [
        ("source", False, True),
        ("destination", True, True),
    ]
    # Only the destination is what the human grants.
    assert str(ws / "r.txt") not in describe("fs", grants)


def test_a_directory_read_outside_is_copied_never_mounted(tmp_path: Path) -> None:
    # A live mount of a host directory, even read-only, lets a server connect to the unix
    # sockets in it: a directory to read is staged as a copy, and nothing new is mounted.
    profile = _profile(tmp_path)
    data = tmp_path / "data"
    data.mkdir()
    grants = plan_grants(profile, READ, {"path": str(data)}, {})
    assert [(g.access, g.kind, g.staged) for g in grants] == [("read", "directory", True)]
    widened = widened_profile(profile, grants, str(tmp_path / "stage"), [str(tmp_path / "ws")])
    assert not any(m.source == str(data) for m in widened.mounts)
    assert {m.source for m in widened.mounts[1:]} <= {m.source for m in profile.mounts}
    assert widened.argv[-1] == str(data)


def test_the_one_shot_profile_has_no_writable_root(tmp_path: Path) -> None:
    profile = _profile(tmp_path)
    notes = tmp_path / "notes"
    notes.mkdir()
    grants = plan_grants(profile, WRITE, {"path": str(notes / "t")}, {})
    stage = str(tmp_path / "stage")
    widened = widened_profile(profile, grants, stage, [str(tmp_path / "ws")])
    assert widened.mounts[0] == Mount(
        "bind", "/", stage, "one-shot root: staged copies of the approved paths"
    )
    assert widened.writable == ()
    dests = [m.dest for m in widened.mounts]
    assert (
        str(tmp_path / "ws") not in dests and str(tmp_path / "ws" / ".git" / "config") not in dests
    )
    # The notes directory is under /tmp, whose private tmpfs would hide the staged copy.
    assert "/tmp" not in dests and "/usr" in dests
    assert widened.argv == (*profile.argv, str(notes))
    assert grant_dirs(grants) == [str(notes)]


@pytest.mark.parametrize(
    ("place", "roles", "said"),
    [
        ("usr", WRITE, "sees read-only"),
        ("masked", WRITE, "denyRead"),
        ("masked", READ, "denyRead"),
        ("state", WRITE, "inside ironcurtain's state"),
        ("state", READ, "inside ironcurtain's state"),
        ("state-parent", READ, "holds ironcurtain's state"),
        ("state-parent", REMOVE, "holds ironcurtain's state"),
        ("root", READ, "holds"),
        ("proc", READ, "inside the kernel's view of processes"),
        ("existing-dir", WRITE, "existing directory"),
        ("no-parent", WRITE, "does not exist"),
        ("protected", WRITE, "sees read-only"),
        ("nul", WRITE, "NUL byte"),
    ],
)
def test_what_no_approval_can_open(
    tmp_path: Path, place: str, roles: dict[str, frozenset[str]], said: str
) -> None:
    masked = tmp_path / "secret"
    masked.mkdir()
    state = tmp_path / "local" / "state"
    state.mkdir(parents=True)
    (tmp_path / "dir").mkdir()
    profile = _profile(
        tmp_path, Mount("tmpfs", str(masked), reason="denyRead: hidden behind an empty dir")
    )
    path = {
        "usr": "/usr/lib/evil.so",
        "masked": str(masked / "key"),
        "state": str(state / "audit.jsonl"),
        "state-parent": str(tmp_path / "local"),
        "root": "/",
        "proc": "/proc/self/environ",
        "existing-dir": str(tmp_path / "dir"),
        "no-parent": str(tmp_path / "nowhere" / "x"),
        "protected": str(tmp_path / "ws" / ".git" / "config"),
        "nul": str(tmp_path / "dir" / "a\0b"),
    }[place]
    off_limits = {str(state): "ironcurtain's state", **SYSTEM_PLACES}
    with pytest.raises(CannotWiden, match=said) as raised:
        plan_grants(profile, roles, {"path": path}, off_limits)
    assert str(raised.value).startswith("path: ")


def test_the_question_warns_of_a_file_host_tools_run(tmp_path: Path) -> None:
    profile = _profile(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    grants = plan_grants(profile, WRITE, {"path": str(home / ".bashrc")}, {})
    assert "beware" in describe("fs", grants) and "bash" in describe("fs", grants)


def test_the_question_shows_control_characters_as_escapes(tmp_path: Path) -> None:
    profile = _profile(tmp_path)
    notes = tmp_path / "notes"
    notes.mkdir()
    grants = plan_grants(profile, WRITE, {"path": str(notes / "a\x1b[2Kb")}, {})
    assert "\x1b" not in describe("fs", grants) and "\\x1b[2Kb" in describe("fs", grants)


def test_two_arguments_naming_one_path_are_one_grant(tmp_path: Path) -> None:
    profile = _profile(tmp_path)
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a").write_text("x")
    both = {"source": str(notes / "a"), "destination": str(notes / "a")}
    grants = plan_grants(profile, MOVE, both, {})
    assert len(grants) == 1
    assert (grants[0].access, grants[0].removes, grants[0].reads) == ("write", True, True)


def test_seatbelt_never_renders_a_staging_root_as_write_access(tmp_path: Path) -> None:
    # Seatbelt has no mounts: a one-shot profile's "staging tree at /" must not become
    # "/ writable" there.
    from sandbox_profiles import seatbelt

    profile = _profile(tmp_path)
    notes = tmp_path / "notes"
    notes.mkdir()
    grants = plan_grants(profile, WRITE, {"path": str(notes / "t")}, {})
    widened = widened_profile(profile, grants, str(tmp_path / "stage"), [str(tmp_path / "ws")])
    text = seatbelt.render(widened)
    allows = [line for line in text.splitlines() if line.startswith("(allow file-write")]
    assert not any('(subpath "/")' in line for line in allows), text
    assert f";; not expressible in Seatbelt: / <- {tmp_path / 'stage'}" in text


def test_an_instruction_file_in_the_workspace_is_written_by_an_approved_call(
    tmp_path: Path,
) -> None:
    """The sandbox's own write of one is quarantined: an approved call writes it through a
    one-shot instance (there before, read-only in the sandbox, or new); the rest of the
    catalogue stays out of reach of any approval."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "CLAUDE.md").write_text("# notes\n")
    own = Mount("ro-bind", str(ws / "CLAUDE.md"), reason="always protected: CLAUDE.md")
    profile = _profile(tmp_path, own)
    for name, kind in (("CLAUDE.md", "file"), ("AGENTS.md", "absent")):
        (grant,) = plan_grants(profile, WRITE, {"path": str(ws / name)}, {})
        assert grant.outside and grant.kind == kind and grant.access == "write", name
        assert instruction_paths([grant]) == [str(ws / name)]
    assert plan_grants(profile, WRITE, {"path": str(ws / "notes.md")}, {}) == []
    # In an instruction folder (.github/instructions/), there before: read-only in the sandbox.
    folder = ws / ".github" / "instructions"
    folder.mkdir(parents=True)
    ro = Mount("ro-bind", str(folder), reason="always protected: .github/instructions")
    (grant,) = plan_grants(_profile(tmp_path, own, ro), WRITE, {"path": str(folder / "a.md")}, {})
    assert grant.outside and grant.kind == "absent"
    with pytest.raises(CannotWiden, match="read-only"):
        plan_grants(profile, WRITE, {"path": str(ws / ".git" / "config")}, {})

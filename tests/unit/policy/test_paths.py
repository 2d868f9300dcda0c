"""Canonical paths: the pure logic, on a fake filesystem (pyfakefs)."""

from __future__ import annotations

import os

import pytest
from pyfakefs.fake_filesystem import FakeFilesystem

from policy import schema
from policy.models import ToolAnnotation
from policy.paths import canonical_path, expand_tilde, is_under, resolve_real_path
from policy.prepare import prepare_tool_args

WS = "/ws"


@pytest.fixture
def ws(fs: FakeFilesystem) -> FakeFilesystem:
    fs.create_dir(WS)
    fs.create_file(f"{WS}/notes.txt", contents="hi")
    fs.create_dir("/outside")
    fs.create_file("/outside/secret.txt", contents="s3cret")
    fs.create_dir("/home/ada/.ssh")
    fs.create_file("/home/ada/.ssh/id_rsa")
    return fs


def test_tier1_existing_path_is_real_path(ws: FakeFilesystem) -> None:
    assert resolve_real_path(f"{WS}/./sub/../notes.txt") == f"{WS}/notes.txt"


def test_tier2_new_file_in_existing_dir(ws: FakeFilesystem) -> None:
    ws.create_symlink("/alias", WS)
    assert resolve_real_path("/alias/new.txt") == f"{WS}/new.txt"


def test_tier3_nothing_exists_below_an_existing_prefix(ws: FakeFilesystem) -> None:
    assert resolve_real_path(f"{WS}/a/b/c.txt") == f"{WS}/a/b/c.txt"
    assert resolve_real_path("/no/such/../thing") == "/no/thing"


def test_relative_paths_resolve_against_cwd(ws: FakeFilesystem) -> None:
    assert resolve_real_path("notes.txt", cwd=WS) == f"{WS}/notes.txt"
    assert resolve_real_path("../outside/secret.txt", cwd=WS) == "/outside/secret.txt"


@pytest.mark.parametrize("suffix", ["", "/secret.txt", "/new-file"])
def test_symlink_inside_workspace_pointing_outside(ws: FakeFilesystem, suffix: str) -> None:
    ws.create_symlink(f"{WS}/escape", "/outside")
    resolved = resolve_real_path(f"{WS}/escape{suffix}")
    assert resolved == "/outside" + suffix
    assert not is_under(resolved, WS)


def test_symlink_escape_in_a_new_subdirectory(ws: FakeFilesystem) -> None:
    # The parent does not exist yet: a lexical resolve would call this "inside the workspace",
    # but mkdir -p through the link would create it outside.
    ws.create_symlink(f"{WS}/escape", "/outside")
    assert resolve_real_path(f"{WS}/escape/new/dir/file") == "/outside/new/dir/file"


def test_chained_and_relative_links(ws: FakeFilesystem) -> None:
    ws.create_symlink(f"{WS}/a", "b")  # relative link, resolved in the link's directory
    ws.create_symlink(f"{WS}/b", "../outside")
    assert resolve_real_path(f"{WS}/a/secret.txt") == "/outside/secret.txt"


def test_dotdot_through_a_link_is_physical(ws: FakeFilesystem) -> None:
    ws.create_dir("/deep/inner")
    ws.create_file("/deep/loot.txt")
    ws.create_symlink(f"{WS}/link", "/deep/inner")
    # Lexically this is /ws/loot.txt; the kernel resolves it to /deep/loot.txt.
    assert resolve_real_path(f"{WS}/link/../loot.txt") == "/deep/loot.txt"


def test_dangling_link_is_followed_to_where_a_write_lands(ws: FakeFilesystem) -> None:
    ws.create_symlink(f"{WS}/dangling", "/outside/not-yet")
    assert resolve_real_path(f"{WS}/dangling") == "/outside/not-yet"


def test_dangling_chain(ws: FakeFilesystem) -> None:
    ws.create_symlink(f"{WS}/one", f"{WS}/two")
    ws.create_symlink(f"{WS}/two", "/outside/planted")
    assert resolve_real_path(f"{WS}/one") == "/outside/planted"


def test_link_loop_does_not_hang_or_raise(ws: FakeFilesystem) -> None:
    ws.create_symlink(f"{WS}/loop1", f"{WS}/loop2")
    ws.create_symlink(f"{WS}/loop2", f"{WS}/loop1")
    result = resolve_real_path(f"{WS}/loop1/x")
    assert isinstance(result, str) and result.startswith("/")


def test_nul_byte_never_raises(ws: FakeFilesystem) -> None:
    assert resolve_real_path("/ws/a\x00b").startswith("/")


@pytest.mark.parametrize(
    ("path", "inside"),
    [
        ("/ws", True),
        ("/ws/x", True),
        ("/ws/", True),
        ("/ws-evil", False),
        ("/ws-evil/x", False),
        ("/wsx", False),
        ("/w", False),
        ("/", False),
    ],
)
def test_prefix_attacks(path: str, inside: bool) -> None:
    assert is_under(os.path.normpath(path), "/ws") is inside


def test_root_contains_everything() -> None:
    assert is_under("/etc/passwd", "/")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("~", "/home/ada"),
        ("~/", "/home/ada/"),
        ("~/.ssh/id_rsa", "/home/ada/.ssh/id_rsa"),
        ("~root/x", os.path.expanduser("~root") + "/x"),
        ("~no-such-user-xyz/x", "~no-such-user-xyz/x"),
        ("a~b", "a~b"),
    ],
)
def test_tilde_forms(value: str, expected: str) -> None:
    assert expand_tilde(value, home="/home/ada") == expected


def test_tilde_then_real_path(ws: FakeFilesystem) -> None:
    assert canonical_path("~/.ssh/../.ssh/id_rsa", home="/home/ada") == "/home/ada/.ssh/id_rsa"


def test_unknown_user_tilde_stays_relative(ws: FakeFilesystem) -> None:
    assert canonical_path("~nobody-xyz/a", cwd=WS) == f"{WS}/~nobody-xyz/a"


WRITE = schema.validate(
    ToolAnnotation,
    {
        "toolName": "write_file",
        "serverName": "fs",
        "effect": "write",
        "sideEffects": True,
        "args": {"path": ["write-path"], "content": ["none"], "paths": ["read-path"]},
    },
)


def test_prepare_canonicalises_only_resource_roles(ws: FakeFilesystem) -> None:
    ws.create_symlink(f"{WS}/escape", "/outside")
    args = {"path": f"{WS}/escape/x", "content": "/etc/../etc/passwd", "count": 3}
    transport, policy = prepare_tool_args(args, WRITE)
    assert transport == {"path": "/outside/x", "content": "/etc/../etc/passwd", "count": 3}
    assert policy == transport
    assert args["path"] == f"{WS}/escape/x"  # input untouched


def test_prepare_none_role_path_lookalikes_pass_unchanged(ws: FakeFilesystem) -> None:
    transport, _ = prepare_tool_args({"content": "./disclaimer text", "path": "a"}, WRITE, cwd=WS)
    assert transport["content"] == "./disclaimer text"
    assert transport["path"] == f"{WS}/a"


def test_prepare_arrays_of_paths(ws: FakeFilesystem) -> None:
    transport, _ = prepare_tool_args({"paths": ["a", "../outside/secret.txt", 7]}, WRITE, cwd=WS)
    assert transport["paths"] == [f"{WS}/a", "/outside/secret.txt", 7]


def test_prepare_unknown_tool_uses_heuristic(ws: FakeFilesystem) -> None:
    args = {"p": "./x", "q": "plain words", "r": "~/y", "s": ["../z"]}
    transport, policy = prepare_tool_args(args, None, cwd=WS, home="/home/ada")
    assert transport == {"p": f"{WS}/x", "q": "plain words", "r": "/home/ada/y", "s": ["/z"]}
    assert policy == transport and policy is not transport


def three_tier_reference(path: str, cwd: str | None = None) -> str:
    """The three tiers (existing path; existing parent + name; plain resolve) tried one
    after the other (how resolve_real_path once read)."""
    joined = path if os.path.isabs(path) else os.path.join(cwd or os.getcwd(), path)
    try:
        return os.path.realpath(joined, strict=True)
    except (OSError, ValueError):
        pass
    try:
        if os.path.islink(joined):
            return os.path.realpath(joined)
        parent, name = os.path.split(joined)
        if name not in ("", ".", ".."):
            return os.path.join(os.path.realpath(parent, strict=True), name)
    except (OSError, ValueError):
        pass
    try:
        return os.path.realpath(joined)
    except (OSError, ValueError):
        return os.path.normpath(joined)


def _link_maze(root: str) -> list[str]:
    """Links, loops, dangling chains and missing paths under ``root``; the paths to ask."""
    os.makedirs(f"{root}/ws/sub/deep")
    os.makedirs(f"{root}/outside/inner")
    for name in ("ws/notes.txt", "outside/secret.txt", "ws/sub/deep/f"):
        with open(f"{root}/{name}", "w") as handle:
            handle.write("x")
    links = {
        "ws/escape": f"{root}/outside",
        "ws/rel": "../outside/inner",
        "ws/dangling": f"{root}/outside/not-yet",
        "ws/chain1": f"{root}/ws/chain2",
        "ws/chain2": f"{root}/outside/planted",
        "ws/loop1": f"{root}/ws/loop2",
        "ws/loop2": f"{root}/ws/loop1",
        "ws/self": f"{root}/ws/self",
        "ws/sub/up": "..",
        "ws/to-file": f"{root}/ws/notes.txt",
        "ws/mid-dangling": f"{root}/nowhere/deeper",
    }
    for name, target in links.items():
        os.symlink(target, f"{root}/{name}")
    tails = ["", "/x", "/x/y", "/..", "/../loot", "/./z", "/../../q"]
    heads = [
        "ws",
        "ws/notes.txt",
        "ws/new.txt",
        "ws/sub/deep",
        "ws/sub/missing/more",
        *(f"ws/{name.split('/', 1)[1]}" for name in links),
        "nothing/at/all",
    ]
    return [f"{root}/{head}{tail}" for head in heads for tail in tails]


def test_one_walk_agrees_with_the_three_tiers_on_a_real_filesystem(tmp_path: object) -> None:
    root = os.path.realpath(str(tmp_path))
    paths = _link_maze(root)
    assert len(paths) > 100
    for path in paths:
        assert resolve_real_path(path) == three_tier_reference(path), path
    assert resolve_real_path("sub/up/../notes.txt", cwd=f"{root}/ws") == three_tier_reference(
        "sub/up/../notes.txt", cwd=f"{root}/ws"
    )


def test_one_walk_agrees_with_the_three_tiers_on_a_fake_filesystem(fs: FakeFilesystem) -> None:
    for path in _link_maze("/r"):
        assert resolve_real_path(path) == three_tier_reference(path), path

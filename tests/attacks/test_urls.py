"""URL parsing, domain matching and the untrusted-domain gate: attack tables as data."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from policy import schema
from policy.decision import StructuralConfig
from policy.engine import PolicyEngine
from policy.gitremotes import resolve_git_remote
from policy.models import CompiledPolicyFile, ToolAnnotationsFile
from policy.urls import domain_matches, extract_domain, extract_git_domain

# (domain, pattern, matches)
MATCHES = [
    ("github.com", "github.com", True),
    ("GitHub.COM", "github.com", True),
    ("github.com.", "github.com", True),
    ("api.github.com", "*.github.com", True),
    ("github.com", "*.github.com", True),
    ("evilgithub.com", "*.github.com", False),
    ("evilgithub.com", "github.com", False),
    ("github.com.evil.net", "github.com", False),
    ("github.com.evil.net", "*.github.com", False),
    ("api.github.com", "github.com", False),
    ("example.org", "*", True),
    ("127.0.0.1", "*", False),
    ("::1", "*", False),
    ("", "*", False),
]


@pytest.mark.parametrize(("domain", "pattern", "expected"), MATCHES)
def test_domain_matching(domain: str, pattern: str, expected: bool) -> None:
    assert domain_matches(domain, pattern) is expected


# (url, the host it really reaches)
URLS = [
    ("https://github.com/x", "github.com"),
    ("https://github.com@evil.com/", "evil.com"),
    ("https://user:pw@evil.com:8443/a", "evil.com"),
    ("HTTPS://GITHUB.COM./", "github.com"),
    ("http://[::1]:80/", "::1"),
    ("http://[::ffff:127.0.0.1]/", "::ffff:127.0.0.1"),
    ("http://169.254.169.254/latest", "169.254.169.254"),
    ("https://xn--80ak6aa92e.com/", "xn--80ak6aa92e.com"),
]


@pytest.mark.parametrize(("url", "host"), URLS)
def test_extract_domain_parses_rather_than_string_matches(url: str, host: str) -> None:
    assert extract_domain(url) == host


@pytest.mark.parametrize(
    ("remote", "host"),
    [
        ("git@github.com:user/repo.git", "github.com"),
        ("github.com:user/repo.git", "github.com"),
        ("ssh://git@GitHub.com:22/user/repo", "github.com"),
        ("https://gitlab.com/a/b.git", "gitlab.com"),
        ("git@[::1]:repo", "::1"),
    ],
)
def test_git_remote_forms(remote: str, host: str) -> None:
    assert extract_git_domain(remote) == host


def _engine(allowed: list[str], rules: Sequence[Mapping[str, object]]) -> PolicyEngine:
    annotations = schema.validate(
        ToolAnnotationsFile,
        {
            "servers": {
                "web": {
                    "tools": [
                        {
                            "toolName": "fetch",
                            "serverName": "web",
                            "effect": "read",
                            "sideEffects": True,
                            "args": {"url": ["fetch-url"]},
                        },
                        {
                            "toolName": "push",
                            "serverName": "web",
                            "effect": "other",
                            "sideEffects": True,
                            "args": {"repo_path": ["read-path"], "remote": ["git-remote-url"]},
                        },
                    ]
                }
            }
        },
    )
    policy = schema.validate(CompiledPolicyFile, {"rules": rules})
    return PolicyEngine(policy, annotations, StructuralConfig(), {"web": allowed})


ALLOW_ALL = [{"name": "allow-all", "if": {}, "then": "allow", "reason": "test"}]


@pytest.mark.parametrize(
    ("url", "decision"),
    [
        ("https://api.github.com/repos", "allow"),
        ("https://github.com@evil.com/", "escalate"),
        ("https://evilgithub.com/", "escalate"),
        ("http://169.254.169.254/", "escalate"),
        ("not a url", "escalate"),
    ],
)
def test_untrusted_domain_gate(url: str, decision: str) -> None:
    result, _ = _engine(["*.github.com"], ALLOW_ALL).decide("web", "fetch", {"url": url})
    assert result.decision == decision
    if decision == "escalate":
        assert result.rule == "structural-untrusted-domain" and url not in result.reason


def test_gate_never_weakens_a_compiled_deny() -> None:
    engine = _engine(
        [], [{"name": "no-fetch", "if": {"tool": ["fetch"]}, "then": "deny", "reason": "no"}]
    )
    assert engine.decide("web", "fetch", {"url": "https://evil.com"})[0].rule == "no-fetch"


def test_domains_condition_in_compiled_rules() -> None:
    rules = [
        {
            "name": "docs-only",
            "if": {"domains": {"roles": ["fetch-url"], "allowed": ["docs.python.org"]}},
            "then": "allow",
            "reason": "docs",
        },
        {"name": "rest", "if": {}, "then": "escalate", "reason": "ask"},
    ]
    engine = _engine(["*"], rules)
    assert engine.decide("web", "fetch", {"url": "https://docs.python.org/3/"})[0].rule == (
        "docs-only"
    )
    assert engine.decide("web", "fetch", {"url": "https://pypi.org/"})[0].rule == "rest"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(
        ["git", "-C", str(tmp_path), "remote", "add", "origin", "git@github.com:me/project.git"],
        check=True,
    )
    subprocess.run(
        [
            "git",
            "-C",
            str(tmp_path),
            "remote",
            "add",
            "sneaky",
            "https://github.com@evil.com/x.git",
        ],
        check=True,
    )
    return tmp_path


def test_named_remotes_resolve_to_their_urls(repo: Path) -> None:
    engine = _engine(["github.com"], ALLOW_ALL)
    args = {"repo_path": str(repo)}
    assert engine.decide("web", "push", {**args, "remote": "origin"})[0].decision == "allow"
    sneaky = engine.decide("web", "push", {**args, "remote": "sneaky"})[0]
    assert sneaky.rule == "structural-untrusted-domain"
    missing = engine.decide("web", "push", {**args, "remote": "nope"})[0]
    assert missing.rule == "structural-untrusted-domain"


@pytest.mark.parametrize("name", ["--upload-pack=touch /tmp/pwned", "-v", "--", ""])
def test_remote_names_that_look_like_options_are_never_passed_to_git(repo: Path, name: str) -> None:
    assert resolve_git_remote(name, {"repo_path": str(repo)}, tool="git_push") == ("",)


CRAFTED_REMOTE_URLS = [
    "ext::sh -c touch% /tmp/pwned",  # git's command-running transport
    "-oProxyCommand=touch /tmp/pwned:repo",  # an ssh option as the host
    "ssh://-oProxyCommand=touch%20/tmp/pwned/repo",
    "--upload-pack=touch /tmp/pwned",
    "file:///etc/passwd",
    "fd::17",
]


@pytest.mark.parametrize("url", CRAFTED_REMOTE_URLS)
def test_crafted_remote_urls_never_pass_the_domain_gate(repo: Path, url: str) -> None:
    subprocess.run(["git", "-C", str(repo), "remote", "add", "crafted", "--", url], check=True)
    # Even an allowlist of "*" (any name) does not take these for names.
    engine = _engine(["*"], ALLOW_ALL)
    decision = engine.decide("web", "push", {"repo_path": str(repo), "remote": "crafted"})[0]
    assert (decision.decision, decision.rule) == ("escalate", "structural-untrusted-domain")

"""The secrets ``wrap`` brokers: a credential a client's entry passes its server in ``env``
becomes one of the server's ``secrets`` (the server holds a sentinel; ironcurtain's egress
proxy puts the value in its place on the way to the hosts named, and only there) when where
the server's package sends it is known (:data:`CARRIED`, each with where that is documented).

The value stays where the client's entry keeps it (its file, or the environment the client
fills it from): the client passes it to ``ironcurtain run`` as before, and ironcurtain's
config only names it (``"from": "env:NAME"``), so no new file ever holds it. The hosts come
from this catalogue alone, never from the entry: an entry chooses neither the hosts nor the
package wrap believes it runs (a project's entry, one wrap gives no network, one whose env
sends the credential elsewhere is never brokered, and is said so). Every secret-like
variable is said: brokered, and to where; or left in the server's environment, and why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from launcher.clients.wrap.network import NPM, PROGRAM
from sandbox_profiles.records import frozen

__all__ = ["CARRIED", "Carried", "broker", "credential_value", "secret_sources"]


@frozen
class Carried:
    """Where a package sends its credential: the variable it reads it from, the hosts it
    sends it to in request headers, the variables and options (``--name``) that would send
    it to another host."""

    variables: tuple[str, ...]
    hosts: tuple[str, ...]
    moved_by: tuple[str, ...]
    source: str


_ARCHIVED = "github.com/modelcontextprotocol/servers-archived"
CARRIED: dict[tuple[str, str], Carried] = {
    # Authorization header to the REST API (common/utils.ts: githubRequest).
    (NPM, "@modelcontextprotocol/server-github"): Carried(
        ("GITHUB_PERSONAL_ACCESS_TOKEN",),
        ("api.github.com",),
        (),
        f"{_ARCHIVED} src/github/common/utils.ts",
    ),
    # Authorization header to the API, uploads and raw contents; GITHUB_HOST or the
    # option --gh-host (cmd/github-mcp-server/main.go: the same setting; the option's name
    # also read with "_" for "-") names another server (GitHub Enterprise), where the value
    # would have to go instead.
    (PROGRAM, "github-mcp-server"): Carried(
        ("GITHUB_PERSONAL_ACCESS_TOKEN",),
        ("api.github.com", "uploads.github.com", "raw.githubusercontent.com"),
        ("GITHUB_HOST", "--gh-host"),
        "github.com/github/github-mcp-server internal/ghmcp/server.go, pkg/raw/raw.go",
    ),
    # X-Subscription-Token header (index.ts).
    (NPM, "@modelcontextprotocol/server-brave-search"): Carried(
        ("BRAVE_API_KEY",), ("api.search.brave.com",), (), f"{_ARCHIVED} src/brave-search/index.ts"
    ),
    # Authorization: Bearer to https://slack.com/api/ (index.ts: SlackClient).
    (NPM, "@modelcontextprotocol/server-slack"): Carried(
        ("SLACK_BOT_TOKEN",), ("slack.com",), (), f"{_ARCHIVED} src/slack/index.ts"
    ),
    # Authorization: Bearer to gitlab.com's API; GITLAB_API_URL names another instance.
    (NPM, "@modelcontextprotocol/server-gitlab"): Carried(
        ("GITLAB_PERSONAL_ACCESS_TOKEN",),
        ("gitlab.com",),
        ("GITLAB_API_URL",),
        f"{_ARCHIVED} src/gitlab/index.ts",
    ),
}
# Packages known to send their credential where the proxy never puts a value (a URL's
# query): brokering would break them, so their variables stay in their environment.
IN_THE_URL: dict[tuple[str, str], str] = {
    (NPM, "@modelcontextprotocol/server-google-maps"): (
        "its package sends it in the URL (key=...), where the egress proxy never puts a value"
    ),
}


def credential_value(value: str) -> bool:
    """Whether a credential detector recognises ``value`` (a variable holding one is a
    secret whatever its name: it stays in the client's entry, never copied).

    >>> credential_value("ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8")
    True
    >>> credential_value("eu-west-1")
    False
    """
    from policy.secrets import mask_text

    kinds: list[str] = []
    mask_text(value, kinds)
    return bool(kinds)


def _why_not(
    variable: str,
    carried: Carried | None,
    package: tuple[str, str] | None,
    granted: list[str],
    env: Mapping[str, str],
    args: Sequence[str] = (),
) -> str | None:
    """Why ``variable`` is not brokered (None: it is)."""
    if package is not None and package in IN_THE_URL:
        return IN_THE_URL[package]
    if carried is None:
        return "where its package sends it is not known"
    if variable not in carried.variables:
        return f"{package[1] if package else 'its package'} is not known to send it anywhere"
    moved = sorted(v for v in carried.moved_by if v in env)
    if moved:
        return f"its entry's env {', '.join(moved)} sends it to another host than the known"
    options = {a.split("=", 1)[0].replace("_", "-") for a in args if a.startswith("--")}
    moved = sorted(o for o in carried.moved_by if o in options)
    if moved:
        return f"its entry's option {', '.join(moved)} sends it to another host than the known"
    missing = [h for h in carried.hosts if h not in granted]
    if missing:
        return f"wrap gives its sandbox no network to {', '.join(missing)}"
    return None


def broker(
    name: str,
    package: tuple[str, str] | None,
    network: Mapping[str, Any] | None,
    entry_env: Mapping[str, str],
    kept: Mapping[str, str],
    refused: str | None,
    args: Sequence[str] = (),
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """The ``secrets`` of the server ``name``'s moved definition for those of ``kept``
    (the variables its client's entry keeps and passes) its package is known to send to
    known hosts, and what to say of each of ``kept``. ``network``: the ``sandbox.network``
    wrap gives it (None: none); ``refused``: why none of its secrets may be brokered at
    all (a project's entry), or None; ``args``: the entry's arguments."""
    granted = [str(h) for h in (network or {}).get("allowedDomains", ())]
    carried = CARRIED.get(package) if package is not None else None
    secrets: dict[str, dict[str, Any]] = {}
    notes: list[str] = []
    for variable in sorted(kept):
        why = refused or _why_not(variable, carried, package, granted, entry_env, args)
        if why is None and not kept[variable]:
            why = "its entry gives it no value"
        if why is not None:
            notes.append(
                f"{name}: {variable} not brokered ({why}): the server holds its value in its "
                "environment, as its client gave it"
            )
            continue
        assert carried is not None and package is not None
        secrets[variable] = {"from": f"env:{variable}", "hosts": list(carried.hosts)}
        notes.append(
            f"{name}: {variable} brokered: its sandbox holds a sentinel, and ironcurtain's "
            f"egress proxy puts the value in request headers to {', '.join(carried.hosts)} "
            f"alone, as {package[1]} sends it ({carried.source})"
        )
    return secrets, notes


def secret_sources(definition: Mapping[str, Any]) -> list[str]:
    """The variables of ironcurtain's environment a definition's ``secrets`` are read
    from (``"from": "env:NAME"``)."""
    out: list[str] = []
    for spec in (definition.get("secrets") or {}).values():
        source = spec.get("from", "") if isinstance(spec, Mapping) else ""
        if isinstance(source, str) and source.startswith("env:"):
            out.append(source[len("env:") :])
    return sorted(set(out))

"""The network ``wrap`` gives a wrapped server: the hosts its package is known to need
(:data:`KNOWN`, each with where that is documented), or none, said with the field that
grants it.

The package is the program the entry runs, never a word among its arguments: the command
itself (``mcp-server-fetch``, ``/usr/local/bin/github-mcp-server``), the package a runner
starts (``npx -y @modelcontextprotocol/server-github``, ``uvx mcp-server-fetch``, ``pipx run
...``) or the module ``python -m`` runs. A project's entry gets no network from the table:
its runner may take the package from the project's own ``node_modules`` or virtualenv, so
the code that would run is the project's; what it would need is said, for the user to grant.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

from sandbox_profiles.records import frozen


@frozen
class Needs:
    """The hosts a server package reaches, and where that is documented."""

    hosts: tuple[str, ...]
    source: str


_SERVERS = "github.com/modelcontextprotocol/servers"
_ARCHIVED = "github.com/modelcontextprotocol/servers-archived"

# By package name (npm, PyPI) or program name, lower case.
KNOWN: dict[str, Needs] = {
    # Fetches the URL each call names, and that host's /robots.txt.
    "mcp-server-fetch": Needs(("*",), f"{_SERVERS} src/fetch/README.md"),
    # The GitHub REST API (common/utils.ts: https://api.github.com).
    "@modelcontextprotocol/server-github": Needs(
        ("api.github.com",), f"{_ARCHIVED} src/github/README.md, common/utils.ts"
    ),
    # GitHub's own server: the REST and GraphQL API, uploads and raw file contents
    # (internal/ghmcp/server.go, pkg/raw/raw.go); GITHUB_HOST names another installation.
    "github-mcp-server": Needs(
        ("api.github.com", "uploads.github.com", "raw.githubusercontent.com"),
        "github.com/github/github-mcp-server README.md, pkg/raw/raw.go",
    ),
    "@modelcontextprotocol/server-brave-search": Needs(
        ("api.search.brave.com",), f"{_ARCHIVED} src/brave-search/README.md, index.ts"
    ),
    "@modelcontextprotocol/server-slack": Needs(
        ("slack.com",), f"{_ARCHIVED} src/slack/README.md, index.ts (https://slack.com/api/)"
    ),
    "@modelcontextprotocol/server-gitlab": Needs(
        ("gitlab.com",), f"{_ARCHIVED} src/gitlab/README.md (GITLAB_API_URL names another)"
    ),
    "@modelcontextprotocol/server-google-maps": Needs(
        ("maps.googleapis.com",), f"{_ARCHIVED} src/google-maps/README.md, index.ts"
    ),
}
# Known to need no network: said nothing of.
OFFLINE = frozenset(
    {
        "mcp-server-filesystem",
        "@modelcontextprotocol/server-filesystem",
        "mcp-server-git",
        "mcp-server-time",
        "@modelcontextprotocol/server-memory",
        "@modelcontextprotocol/server-sequential-thinking",
        "@modelcontextprotocol/server-everything",
    }
)
# Programs that start the package named by their first argument that is not an option.
RUNNERS = frozenset({"npx", "bunx", "uvx", "pipx", "pnpx"})
# Options of those runners that take a value (the value is not the package).
_VALUED = frozenset({"-p", "--package", "--from", "--python", "--with", "-c", "--call"})
_VERSION = re.compile(r"(?<=.)@[^/@]*$")  # @1.2.3 or @latest after a name


def package_of(command: str, args: Sequence[str]) -> str | None:
    """The package or program an entry runs, lower case, without its version.

    >>> package_of("npx", ["-y", "@modelcontextprotocol/server-github@1.0"])
    '@modelcontextprotocol/server-github'
    >>> package_of("python3", ["-m", "mcp_server_fetch"]), package_of("uvx", ["mcp-server-fetch"])
    ('mcp-server-fetch', 'mcp-server-fetch')
    >>> package_of("python3", ["-c", "pass", "mcp-server-fetch"]) is None
    True
    """
    program = os.path.basename(command).lower()
    if re.fullmatch(r"python3?(\.\d+)?", program):
        if len(args) >= 2 and args[0] == "-m":
            return args[1].lower().replace("_", "-")
        return None
    if program in RUNNERS:
        rest = list(args[1:]) if program == "pipx" and args[:1] == ["run"] else list(args)
        skip = False
        for arg in rest:
            if skip:
                skip = False
            elif arg in _VALUED:
                skip = True
            elif not arg.startswith("-"):
                return _VERSION.sub("", arg.lower())
        return None
    return program


def network_for(
    name: str, command: str, args: Sequence[str], project: bool, config: str
) -> tuple[dict[str, list[str]] | None, str | None]:
    """The ``sandbox.network`` wrap gives the server ``name`` (None: none), and what to say."""
    package = package_of(command, args)
    field = f"mcpServers.{name}.sandbox.network.allowedDomains in {config}"
    needs = KNOWN.get(package or "")
    if needs is None:
        if package in OFFLINE:
            return None, None
        return None, (
            f"{name}: no network (what it needs is not known); if it needs some, list the "
            f"hosts in {field}"
        )
    hosts = ", ".join("any public name (*)" if h == "*" else h for h in needs.hosts)
    if project:
        return None, (
            f"{name}: no network: a project's entry gets none from wrap ({package} is known "
            f"to need {hosts}, but the project may supply its code); grant it in {field}"
        )
    said = f"{name}: network: {hosts}, as {package} needs ({needs.source}); change it in {field}"
    return {"allowedDomains": list(needs.hosts)}, said

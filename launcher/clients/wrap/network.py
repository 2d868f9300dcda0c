"""The network ``wrap`` gives a wrapped server: the hosts its package is known to need
(:data:`KNOWN`, each with where that is documented), or none, said with the field that
grants it.

The package is the program the entry runs, never a word among its arguments: the command
itself (``mcp-server-fetch``, ``/usr/local/bin/github-mcp-server``), the package a runner
starts (``npx -y @modelcontextprotocol/server-github``, ``uvx mcp-server-fetch``, ``pipx run
...``) or the module ``python -m`` runs, each name looked up where its runner takes it from
(npm's ``mcp-server-fetch`` is not PyPI's). An entry that may run other code under that
name gets none: a runner told to take another package (``npx -p``, ``uvx --from`` or
``--with``, another index), an env that chooses the code (``PYTHONPATH``, ``NODE_OPTIONS``,
``npm_config_*``...), a runner started in a directory that may hold its own copy (``python
-m`` looks there first, ``npx`` in its ``node_modules``), and a project's entry (its code may
be the project's). What it would need is said, for the user to grant."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence

from sandbox_profiles.records import frozen


@frozen
class Needs:
    """The hosts a server package reaches, and where that is documented."""

    hosts: tuple[str, ...]
    source: str


_SERVERS = "github.com/modelcontextprotocol/servers"
_ARCHIVED = "github.com/modelcontextprotocol/servers-archived"
_FETCH = Needs(("*",), f"{_SERVERS} src/fetch/README.md")
_GITHUB = Needs(
    ("api.github.com", "uploads.github.com", "raw.githubusercontent.com"),
    "github.com/github/github-mcp-server README.md, pkg/raw/raw.go",
)

# Where a name is looked up: the program itself, or the registry its runner installs from
# (one name may be different code in each: npm's ``mcp-server-fetch`` is not PyPI's).
PROGRAM, NPM, PYPI = "program", "npm", "pypi"
KNOWN: dict[tuple[str, str], Needs] = {
    # Fetches the URL each call names, and that host's /robots.txt (PyPI's package, and
    # the program it installs).
    (PYPI, "mcp-server-fetch"): _FETCH,
    (PROGRAM, "mcp-server-fetch"): _FETCH,
    # The GitHub REST API (common/utils.ts: https://api.github.com).
    (NPM, "@modelcontextprotocol/server-github"): Needs(
        ("api.github.com",), f"{_ARCHIVED} src/github/README.md, common/utils.ts"
    ),
    # GitHub's own server, a program: the REST and GraphQL API, uploads and raw file
    # contents (internal/ghmcp/server.go, pkg/raw/raw.go); GITHUB_HOST names another.
    (PROGRAM, "github-mcp-server"): _GITHUB,
    (NPM, "@modelcontextprotocol/server-brave-search"): Needs(
        ("api.search.brave.com",), f"{_ARCHIVED} src/brave-search/README.md, index.ts"
    ),
    (NPM, "@modelcontextprotocol/server-slack"): Needs(
        ("slack.com",), f"{_ARCHIVED} src/slack/README.md, index.ts (https://slack.com/api/)"
    ),
    (NPM, "@modelcontextprotocol/server-gitlab"): Needs(
        ("gitlab.com",), f"{_ARCHIVED} src/gitlab/README.md (GITLAB_API_URL names another)"
    ),
    (NPM, "@modelcontextprotocol/server-google-maps"): Needs(
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
# Programs that start the package named by their first argument that is not an option,
# and the registry they take it from.
RUNNERS = {"npx": NPM, "bunx": NPM, "pnpx": NPM, "uvx": PYPI, "pipx": PYPI}
# Options of those runners that take a value (the value is not the package).
_VALUED = frozenset({"--python", "--cache", "--cache-dir", "--userconfig"})
# Options that make the runner run other code than the package named: another package
# for the program (npx -p, uvx --from, pipx --spec), more packages beside it (uvx --with),
# another index or registry, a shell command (npx -c).
_OTHER_CODE = frozenset(
    {"-p", "--package", "--from", "--with", "--with-editable", "--with-requirements",
     "--spec", "--index", "--index-url", "--extra-index-url", "--default-index",
     "--find-links", "-f", "--registry", "-c", "--call", "--preinstall", "--pip-args"}
)  # fmt: skip
# Environment variables that choose which code a program, an interpreter or a runner runs.
_CODE_VARIABLES = re.compile(
    r"PATH|PYTHON(PATH|HOME|USERBASE|STARTUP|PLATLIBDIR)|NODE_OPTIONS|NODE_PATH|LD_\w+"
    r"|NPM_CONFIG_\w+|UV_\w+|PIP_\w+|PIPX_\w+|BUN_\w+",
    re.IGNORECASE,
)
_VERSION = re.compile(r"(?<=.)@[^/@]*$")  # @1.2.3 or @latest after a name


def _runner_package(registry: str, args: Sequence[str]) -> tuple[str, str] | None:
    skip = False
    for arg in args:
        option = arg.split("=", 1)[0]
        if skip:
            skip = False
        elif option in _OTHER_CODE:
            return None
        elif option in _VALUED:
            skip = "=" not in arg
        elif not arg.startswith("-"):
            name = _VERSION.sub("", arg.lower())
            # A path or URL (./evil, git+https://...) is not the registry's package.
            return None if re.search(r"[:\\]|^\.|/.*/|^/", name) else (registry, name)
    return None


def package_of(command: str, args: Sequence[str]) -> tuple[str, str] | None:
    """Where the entry's package comes from and its name, lower case, without its version;
    None when the entry may run other code than the package it names.

    >>> package_of("npx", ["-y", "@modelcontextprotocol/server-github@1.0"])
    ('npm', '@modelcontextprotocol/server-github')
    >>> package_of("python3", ["-m", "mcp_server_fetch"]), package_of("uvx", ["mcp-server-fetch"])
    (('pypi', 'mcp-server-fetch'), ('pypi', 'mcp-server-fetch'))
    >>> package_of("python3", ["-c", "pass", "mcp-server-fetch"]) is None
    True
    >>> package_of("uvx", ["--from", "./evil", "mcp-server-fetch"]) is None
    True
    >>> package_of("npx", ["--package=evil", "mcp-server-fetch"]) is None
    True
    """
    program = os.path.basename(command).lower()
    if re.fullmatch(r"python3?(\.\d+)?", program):
        if len(args) >= 2 and args[0] == "-m":
            return PYPI, args[1].lower().replace("_", "-")
        return None
    if program in RUNNERS:
        rest = list(args[1:]) if program == "pipx" and args[:1] == ["run"] else list(args)
        return _runner_package(RUNNERS[program], rest)
    return PROGRAM, program


def _other_code(
    env: Mapping[str, str], places: Sequence[str], package: tuple[str, str], command: str
) -> str:
    """What in the entry besides its package chooses the code it runs ("": nothing).
    ``places``: where it starts (first, "" when not known), then the directories it may
    write."""
    chosen = sorted(k for k in env if _CODE_VARIABLES.fullmatch(k))
    if chosen:
        return f"its entry's env {', '.join(chosen)} chooses what code runs"
    cwd, writable = places[0], places[1:]
    if cwd and package[0] != PROGRAM:
        # python -m looks first in its directory; npx and the others, in its node_modules.
        return f"it starts in {cwd}, which may hold code its runner takes first"
    # As written (a link there could be changed) and where it leads.
    named = [os.path.normpath(command), os.path.realpath(command)] if os.path.isabs(command) else []
    held = [p for p in (cwd, *writable) if p and any(_under(n, os.path.realpath(p)) for n in named)]
    if held:
        return f"its program lies in {held[0]}, where other code may be put"
    return ""


def _under(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip(os.sep) + os.sep)


def network_for(
    name: str,
    command: str,
    args: Sequence[str],
    where: tuple[Mapping[str, str], Sequence[str]],
    project: bool,
    config: str,
) -> tuple[dict[str, list[str]] | None, str | None]:
    """The ``sandbox.network`` wrap gives the server ``name`` (None: none), and what to say.
    ``where``: the entry's env, and the directory it starts in (its own, or the workspace
    it is given; "" when not known) followed by the directories it may write."""
    package = package_of(command, args)
    field = f"mcpServers.{name}.sandbox.network.allowedDomains in {config}"
    needs = KNOWN.get(package) if package else None
    if needs is None:
        if package is not None and package[1] in OFFLINE:
            return None, None
        return None, (
            f"{name}: no network (what it needs is not known); if it needs some, list the "
            f"hosts in {field}"
        )
    assert package is not None
    hosts = ", ".join("any public name (*)" if h == "*" else h for h in needs.hosts)
    other = _other_code(*where, package, command)
    if project or other:
        why = "a project's entry gets none from wrap" if project else other
        return None, (
            f"{name}: no network: {why} ({package[1]} is known to need {hosts}, but "
            f"{'the project may supply its code' if project else 'it may not be what runs'}); "
            f"grant it in {field}"
        )
    said = f"{name}: network: {hosts}, as {package[1]} needs ({needs.source}); change it in {field}"
    return {"allowedDomains": list(needs.hosts)}, said

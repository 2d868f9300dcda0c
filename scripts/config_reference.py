#!/usr/bin/env python3
"""Write the reference of ``mcp-servers.json`` (docs/configuration.md) from the dataclasses that
validate it (launcher/plan/config_schema.py): every field with its JSON name, type, bounds,
default, meaning and an example.

    scripts/config_reference.py            print the Markdown
    scripts/config_reference.py --write    write docs/configuration.md
    scripts/config_reference.py --check    exit 1 when docs/configuration.md differs

A field's meaning is the comment above it in the schema, then the words of :data:`MEANING`
here, which say what the schema does not; a field with neither that its class's docstring
does not name, or one without an example in :data:`EXAMPLES`, stops the script (so a new
field cannot go undocumented).
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import os
import re
import sys
import textwrap
import types
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from launcher.plan import config_schema as schema
from launcher.plan.config_schema import ConfigFile, json_name

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "configuration.md"
# A complete example, shown in the reference (the tests validate it).
EXAMPLE = ROOT / "docs" / "mcp-servers.example.json"

# What the schema does not say of a field: (class name, Python field name) -> meaning.
MEANING: dict[tuple[str, str], str] = {
    ("ConfigFile", "mcp_servers"): (
        "The servers, by name. Their tools are exposed as `<server>__<tool>`, so a name may "
        "not hold `__` or end with `_`."
    ),
    ("ConfigFile", "servers"): (
        "The same, under the key VS Code uses; read only when `mcpServers` is absent."
    ),
    ("ServerConfig", "command"): (
        "The program to start: a name found on `PATH` (or next to ironcurtain's own Python), "
        "or a path. `npx -y PACKAGE` runs the package from npx's cache or a global install, "
        "since a sandbox cannot download it."
    ),
    ("ServerConfig", "args"): "Its arguments.",
    ("ServerConfig", "env"): (
        "Its environment: these variables plus `PATH`, `HOME`, `LANG` and `TERM`, nothing else "
        "of ironcurtain's. They are handed to the sandbox as its environment, never on a "
        "command line."
    ),
    ("ServerConfig", "cwd"): (
        "The directory it starts in (absolute, or starting with `~` or `${workspace}`). "
        "Default: the workspace when its sandbox shows it, else its private home."
    ),
    ("ServerConfig", "description"): (
        "A note for people reading the file; ironcurtain does not act on it "
        "(`ironcurtain wrap` writes one saying where a definition came from)."
    ),
    ("ServerConfig", "disabled"): (
        "`true`: the server is not started; `--server NAME` naming it is an error."
    ),
    ("ServerConfig", "timeout"): (
        "Seconds the server has to answer each request that reaches it (a tool call, a "
        "prompt, a resource read, a completion). Past it the request is cancelled and the "
        "agent gets `ERROR: server 'NAME' did not answer within N s; the call was "
        "cancelled`. Default: no limit."
    ),
    ("ServerConfig", "sandbox"): (
        "What its sandbox holds. `false` runs the server without one: the policy is then "
        "its only guard."
    ),
    ("ServerConfig", "restart"): (
        "Start the server again when it exits: `true` (3 restarts, 1 s back-off), an object, "
        "or `false` (a server that exits stays stopped, and its calls fail)."
    ),
    ("ServerConfig", "client_requests"): (
        "What it may ask of the client (questions for the human, the model's answers)."
    ),
    ("SandboxConfig", "filesystem"): (
        "What of the host it sees beyond the workspace and its own program."
    ),
    ("SandboxConfig", "limits"): (
        "Resource limits, on by default: a server over one is stopped and its calls are "
        "answered with an error naming the limit."
    ),
    ("SandboxConfig", "network"): (
        "Where it may connect. Absent, `null` or `false`: nowhere (loopback only)."
    ),
    ("FilesystemSandbox", "allow_read"): (
        "Host paths it sees read-only. Each is shown where it really is (a link followed); "
        "one reached through a link may not lead into a dot-directory of your home, a "
        "`.ssh`, your home itself or the system's own trees, and none may hold the "
        "directory where sessions keep their sockets (`$XDG_RUNTIME_DIR`, `/tmp`)."
    ),
    ("FilesystemSandbox", "deny_read"): (
        "Paths hidden inside what it sees, including ones that only appear later."
    ),
    ("FilesystemSandbox", "allow_write"): (
        "Host paths it may write. Inside them, what host tools load or run (git hooks and "
        "configs, shell rc files, editor and AI-client configs...) and ironcurtain's own "
        "state stay read-only. Naming the workspace makes it writable even for a server "
        "whose tools only read."
    ),
    ("FilesystemSandbox", "deny_write"): (
        "Paths kept read-only inside the writable places, at any depth: an existing one is "
        "mounted read-only, a new one is moved to the quarantine as it appears."
    ),
    ("NetworkSandbox", "allowed_domains"): (
        "The names it may connect to, through its egress proxy. `*` is any name (never an IP "
        "address), `*.example.com` that domain and its subdomains, `host:port` one port. An "
        "IP address is allowed only when an entry names it with its port. A name that "
        "resolves to a loopback, private, link-local, CGNAT, multicast, reserved or "
        "cloud-metadata address, or to this machine's own, is refused. The policy sees "
        "them too: a URL argument outside them is escalated to a human."
    ),
    ("NetworkSandbox", "denied_domains"): (
        "Names refused even when `allowedDomains` matches them; checked first."
    ),
    ("NetworkSandbox", "hosts"): (
        "Names pinned to IP addresses: the proxy connects there without a lookup, and the "
        "address is exempt from the refusal of private addresses for that name only, on "
        "every port its `allowedDomains` entry allows (give the entry a port)."
    ),
    ("LimitsConfig", "memory"): (
        "Memory: each process's data segment (RLIMIT_DATA) and the resident memory of the "
        "server's whole process tree."
    ),
    ("LimitsConfig", "open_files"): "Open file descriptors per process (RLIMIT_NOFILE).",
    ("LimitsConfig", "processes"): (
        "Processes: RLIMIT_NPROC on top of what the server's user already runs, and the "
        "process tree's count."
    ),
    ("LimitsConfig", "cpu_seconds"): (
        "CPU seconds per process (RLIMIT_CPU: SIGXCPU, then SIGKILL a second later). Off by "
        "default: a long session uses CPU legitimately."
    ),
    ("LimitsConfig", "file_size"): "The largest file it may write (RLIMIT_FSIZE).",
}

# One example per field, as its JSON value.
EXAMPLES: dict[tuple[str, str], object] = {
    ("ConfigFile", "mcp_servers"): {"time": {"command": "mcp-server-time"}},
    ("ConfigFile", "servers"): {"time": {"command": "mcp-server-time"}},
    ("ServerConfig", "command"): "mcp-server-git",
    ("ServerConfig", "args"): ["--repository", "${workspace}"],
    ("ServerConfig", "env"): {"GITHUB_TOKEN": "${GITHUB_TOKEN}"},
    ("ServerConfig", "cwd"): "${workspace}/app",
    ("ServerConfig", "description"): "git on the project",
    ("ServerConfig", "disabled"): True,
    ("ServerConfig", "timeout"): 120,
    ("ServerConfig", "sandbox"): {"network": {"allowedDomains": ["api.github.com"]}},
    ("ServerConfig", "restart"): True,
    ("ServerConfig", "client_requests"): {"sampling": "deny"},
    ("ServerConfig", "mask_secrets"): False,
    ("SandboxConfig", "filesystem"): {"allowRead": ["~/reference"]},
    ("SandboxConfig", "network"): {"allowedDomains": ["pypi.org"]},
    ("SandboxConfig", "limits"): {"memory": "8G", "processes": False},
    ("FilesystemSandbox", "allow_read"): ["~/reference", "/srv/datasets"],
    ("FilesystemSandbox", "deny_read"): ["${workspace}/.env"],
    ("FilesystemSandbox", "allow_write"): ["~/notes"],
    ("FilesystemSandbox", "deny_write"): ["${workspace}/.github", "${workspace}/CHANGELOG.md"],
    ("NetworkSandbox", "allowed_domains"): ["docs.python.org", "*.github.com", "pypi.org:443"],
    ("NetworkSandbox", "denied_domains"): ["gist.github.com"],
    ("NetworkSandbox", "hosts"): {"db.internal": "10.0.0.5"},
    ("LimitsConfig", "memory"): "8G",
    ("LimitsConfig", "open_files"): 1024,
    ("LimitsConfig", "processes"): 64,
    ("LimitsConfig", "cpu_seconds"): 3600,
    ("LimitsConfig", "file_size"): "100M",
    ("RestartConfig", "max_restarts"): 5,
    ("RestartConfig", "backoff_seconds"): 0.5,
    ("ClientRequestsConfig", "elicitation"): "deny",
    ("ClientRequestsConfig", "sampling"): "allow",
}

# What each validator of the schema lets a value be, by the validator's name.
VALIDATORS = {
    "_size": 'bytes, or a size with K, M, G or T (powers of 1024: `"512M"`, `"2GiB"`), at least 1M',
    "_lifted": "`null` or `false` lifts it",
    "_addresses": "each value an IP address",
    "_names": "each name letters, digits, `.`, `-` or `_`",
}

HEAD = """\
<!-- Written by scripts/config_reference.py from launcher/plan/config_schema.py: change those,
then run scripts/config_reference.py --write (a test fails while this file differs). -->

# Configuration: `mcp-servers.json`

The file names the MCP servers a session starts, how to start each and what its sandbox
holds (every server has a sandbox unless its entry says `"sandbox": false`, which leaves the
policy its only guard). What the agent may do with their tools is the policy's business
([pipeline.md](pipeline.md)); what the sandbox does with these fields, in detail, is in
[containment.md](containment.md).

## Where ironcurtain looks for it

The first of these that is given or exists is used (files are never merged); the start-up
report names it on its `config:` line:

1. `--config FILE`;
2. the file `$IRONCURTAIN_CONFIG` names;
3. `mcp-servers.json` in the current directory;
4. `~/.config/ironcurtain/mcp-servers.json` (`$XDG_CONFIG_HOME/ironcurtain/` when that is
   set), where `ironcurtain wrap` writes the servers it moves;
5. the bundled default, `launcher/defaults/mcp-servers.json`: filesystem, git, time and fetch.

The file is checked before any server starts: a mistake is one line naming its place and
the session does not start (exit status 2). A key the schema does not know is ignored, with
a warning naming it; the Python spelling of a name (`allow_read`) is accepted too. A file
that has not changed since it was last checked is read from a cache in the state directory.

## `${VAR}` in values

`command`, `args`, the values of `env`, `cwd` and the four lists of `sandbox.filesystem` may
hold `${NAME}`, the variable of ironcurtain's own environment (an empty one counts as unset),
`${NAME:-default}`, and `${workspace}`, the session's workspace. A variable that is not set
and has no default is an error for a session that starts that server; the file's other
servers are not affected. `cwd` and the sandbox paths must be absolute once expanded, or
start with `~` (your home; `~` is expanded there and only there: in `args`, write
`${HOME}`).

## A complete example

[mcp-servers.example.json](mcp-servers.example.json):

```json
"""


def _doc(text: str | None) -> str:
    """A docstring as Markdown: its paragraphs joined, Sphinx roles made code."""
    text = inspect.cleandoc(text or "")
    text = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", text).replace("``", "`")
    return "\n\n".join(" ".join(p.split()) for p in text.split("\n\n") if p.strip())


def _wrap(text: str, indent: str = "", first: str = "") -> str:
    """A paragraph of Markdown in lines of at most 100 characters (a code span may break)."""
    return textwrap.fill(
        text,
        100,
        initial_indent=first,
        subsequent_indent=indent,
        break_long_words=False,
        break_on_hyphens=False,
    )


def field_comments() -> dict[tuple[str, str], str]:
    """The comment lines directly above each field of the schema's classes."""
    source = inspect.getsource(schema)
    lines = source.splitlines()
    found: dict[tuple[str, str], str] = {}
    for node in ast.parse(source).body:
        if not isinstance(node, ast.ClassDef):
            continue
        for item in node.body:
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                above: list[str] = []
                row = item.lineno - 2
                while row >= 0 and lines[row].strip().startswith("#"):
                    above.insert(0, lines[row].strip().lstrip("#").strip())
                    row -= 1
                if above:
                    text = re.sub(r"^(false|true|null)\b", r"`\1`", " ".join(above))
                    found[node.name, item.target.id] = text
    return found


def _classes_in(hint: object) -> Iterator[type[Any]]:
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        yield hint
    for arg in typing.get_args(hint):
        yield from _classes_in(arg)


def places() -> dict[type[Any], str]:
    """Every dataclass of the schema and where it sits in the file, as a JSON path (``NAME``
    for a server's name): those the file reaches first, depth first, then any other."""
    where: dict[type[Any], str] = {}

    def visit(cls: type[Any], path: str) -> None:
        where[cls] = path or "The file"
        for f in dataclasses.fields(cls):
            hint = typing.get_type_hints(cls)[f.name]
            keyed = any(typing.get_origin(a) is dict for a in _union(hint))
            child = f"{path}.{json_name(f.name)}".lstrip(".") + (".NAME" if keyed else "")
            for part in _classes_in(hint):
                if part not in where:
                    visit(part, child)

    visit(ConfigFile, "")
    for _, cls in inspect.getmembers(schema, inspect.isclass):
        if dataclasses.is_dataclass(cls) and cls.__module__ == schema.__name__:
            where.setdefault(cls, cls.__name__)
    return where


def _union(hint: object) -> tuple[object, ...]:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return typing.get_args(hint)
    return (hint,)


def anchor(heading: str) -> str:
    """The anchor a Markdown renderer gives a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def type_text(hint: object, where: dict[type[Any], str]) -> str:
    """A type as a reader of JSON says it."""
    if typing.get_origin(hint) is typing.Annotated:
        return type_text(typing.get_args(hint)[0], where)
    if typing.get_origin(hint) is Literal:
        return " or ".join(f"`{json.dumps(v)}`" for v in typing.get_args(hint))
    parts = _union(hint)
    if len(parts) > 1:
        return " or ".join(type_text(p, where) for p in parts)
    if hint is type(None):
        return "`null`"
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return f"object ([{where[hint]}](#{anchor(where[hint])}))"
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is list:
        return f"array of {type_text(args[0], where)}s"
    if origin is dict:
        return f"object: name to {type_text(args[1], where)}"
    words: dict[object, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}
    if hint in words:
        return words[hint]
    raise SystemExit(f"config_reference.py: no words for the type {hint!r}")


def bounds(hint: object) -> list[str]:
    """What the annotations' bounds and validators ask of a value."""
    said: list[str] = []
    for item in getattr(hint, "__metadata__", ()):
        func: Callable[..., object] | None = getattr(item, "func", None)
        if func is not None:
            if func.__name__ not in VALIDATORS:
                raise SystemExit(f"config_reference.py: no words for the validator {func!r}")
            said.append(VALIDATORS[func.__name__])
        for rule in getattr(item, "metadata", ()):
            for attr, word in (("ge", "at least"), ("gt", "above"), ("min_length", "length")):
                if hasattr(rule, attr):
                    value = getattr(rule, attr)
                    said.append("not empty" if attr == "min_length" else f"{word} {value}")
    return said


def default_text(f: dataclasses.Field[Any], sizes: bool) -> str:
    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
        return "required"
    value = f.default
    if f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    if dataclasses.is_dataclass(value):
        return "every field at its default"
    if value is None:
        return "not set"
    if sizes and isinstance(value, int):
        unit = next(u for u in "TGMK" if value % (1 << (10 * (" KMGT".index(u)))) == 0)
        return f'`{value}` (`"{value >> (10 * " KMGT".index(unit))}{unit}"`)'
    return f"`{json.dumps(value)}`"


def section(cls: type[Any], where: dict[type[Any], str], comments: dict[Any, str]) -> str:
    name = cls.__name__
    out = [f"### {where[cls]}", "", *(_wrap(p) + "\n" for p in _doc(cls.__doc__).split("\n\n"))]
    hints = typing.get_type_hints(cls, include_extras=True)
    for f in dataclasses.fields(cls):
        key, hint = json_name(f.name), hints[f.name]
        said = [comments.get((name, f.name)), MEANING.get((name, f.name))]
        meaning = " ".join(s for s in said if s)
        if not meaning and f"`{key}`" not in _doc(cls.__doc__):
            raise SystemExit(f"config_reference.py: {name}.{f.name} has no meaning: add it")
        if (name, f.name) not in EXAMPLES:
            raise SystemExit(f"config_reference.py: {name}.{f.name} has no example: add it")
        rules = bounds(hint)
        sizes = VALIDATORS["_size"] in rules
        facts = [type_text(hint, where), *rules, f"default: {default_text(f, sizes)}"]
        example = json.dumps({key: EXAMPLES[name, f.name]})[1:-1]
        out += [_wrap(f"- **`{key}`**: {'; '.join(facts)}.", "  "), ""]
        if meaning:
            out += [_wrap(meaning, "  ", "  "), ""]
        out += [f"  Example: `{example}`", ""]
    return "\n".join(out)


def render() -> str:
    where, comments = places(), field_comments()
    example = EXAMPLE.read_text(encoding="utf-8")
    body = [HEAD + example + "```\n", "## Every field\n"]
    body += [section(cls, where, comments) for cls in where]
    return "\n".join(body).rstrip("\n") + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if argv[1:] == ["--write"]:
        DOC.write_text(text, encoding="utf-8")
        return 0
    if argv[1:] == ["--check"]:
        if not DOC.is_file() or DOC.read_text(encoding="utf-8") != text:
            name = DOC.relative_to(ROOT)
            print(f"{name} differs: run scripts/config_reference.py --write", file=sys.stderr)
            return 1
        return 0
    if argv[1:]:
        print("usage: scripts/config_reference.py [--check | --write]", file=sys.stderr)
        return 2
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

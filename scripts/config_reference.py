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

# One example per field, as its JSON value.
EXAMPLES: dict[tuple[str, str], object] = {
    ("ConfigFile", "mcp_servers"): {"time": {"command": "mcp-server-time"}},
    ("ConfigFile", "servers"): {"time": {"command": "mcp-server-time"}},
    ("ServerConfig", "command"): "mcp-server-git",
    ("ServerConfig", "url"): "https://mcp.example.com/mcp",
    ("ServerConfig", "type"): "sse",
    ("ServerConfig", "headers"): {"X-Team": "platform"},
    ("ServerConfig", "hosts"): {"mcp.internal": "10.0.0.5"},
    ("ServerConfig", "auth"): {"clientId": "ironcurtain-team", "scopes": ["repo:read"]},
    ("AuthConfig", "client_id"): "https://ironcurtain.example.org/client.json",
    ("AuthConfig", "client_secret"): {"from": "env:GITHUB_CLIENT_SECRET"},
    ("AuthConfig", "scopes"): ["repo:read", "issues:write"],
    ("AuthConfig", "login"): "shared",
    ("ClientSecretConfig", "from_"): "file:~/.config/tokens/team-client-secret",
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
    ("ServerConfig", "scan_arguments"): {"skip": ["jwt"]},
    ("ArgumentScanConfig", "skip"): ["jwt", "configured-secret"],
    ("ServerConfig", "era"): "stateless",
    ("ServerConfig", "secrets"): {
        "GITHUB_TOKEN": {"from": "env:GITHUB_TOKEN", "hosts": ["api.github.com"]}
    },
    ("SecretConfig", "from_"): "file:~/.config/tokens/github",
    ("SecretConfig", "hosts"): ["api.github.com", "uploads.github.com"],
    ("SecretConfig", "as_"): "env",
    ("SecretConfig", "body"): True,
    ("SandboxConfig", "filesystem"): {"allowRead": ["~/reference"]},
    ("SandboxConfig", "network"): {"allowedDomains": ["pypi.org"]},
    ("SandboxConfig", "limits"): {"memory": "8G", "processes": False},
    ("FilesystemSandbox", "allow_read"): ["~/reference", "/srv/datasets"],
    ("FilesystemSandbox", "deny_read"): ["${workspace}/.env"],
    ("FilesystemSandbox", "allow_write"): ["~/notes"],
    ("FilesystemSandbox", "workspace"): ["~/notes"],
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
    "_detectors": "each a detector's name, or `configured-secret`",
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
a warning naming it, at the two levels MCP clients share (the file's own keys and a server
entry's: `type`, `autoApprove`... of another client); inside ironcurtain's own objects
(`sandbox` and everything in it, `restart`, `clientRequests`), where every key narrows or
widens what a server may do, it is an error naming the nearest known key, so a misspelt
restriction never leaves a session running without it. At a server entry's level a key
close to one of ironcurtain's own that narrow what a server may do (`sandbox`,
`clientRequests`, `maskSecrets`) is that key misspelt, and an error too (`Sandbox`,
`sandbx`: every restriction in it would be dropped), and so is a key of `sandbox` written
there, one level too high (`denyRead` beside `command`: did you mean
`sandbox.filesystem.denyRead`?):

```
$ ironcurtain run --config typo.json        # (the error is one line, folded here)
ironcurtain: error: typo.json: $.mcpServers.files.sandbox.filesystem.denyReed: unknown key \
"denyReed": did you mean "denyRead"?
$ ironcurtain run --config typo2.json
ironcurtain: error: typo2.json: $.mcpServers.files.Sandbox: unknown key "Sandbox": \
did you mean "sandbox"?
$ echo $?
2
```

A key given twice in one object is an error wherever it is (JSON keeps only the last, so
the first, a `denyRead` list or a whole `sandbox`, would be dropped without a word). The
Python spelling of a name (`allow_read`) is accepted too, but not beside the JSON one (one
of the two would be dropped):

```
$ ironcurtain run --config both.json        # (one line, folded here)
ironcurtain: error: both.json: $.mcpServers.files.sandbox.filesystem.deny_read: \
"deny_read" is given twice, also as "denyRead": write it once
```

A file that has not changed since it was last checked is read from a cache in the state
directory.

## `${VAR}` in values

`command`, `args`, the values of `env`, `cwd` and the four lists of `sandbox.filesystem` may
hold `${NAME}`, the variable of ironcurtain's own environment (an empty one counts as unset),
`${NAME:-default}`, `${workspace}`, the session's workspace, and `${caller}`, the caller's
name made safe for a path (never an environment variable: see
[gateway.md](gateway.md#per-caller-workspaces)). A variable that is not set and has no default
is an error for a session that starts that server; the file's other servers are not
affected. `cwd` and the sandbox paths must be absolute once expanded, or start with `~` (your
home; `~` is expanded there and only there: in `args`, write `${HOME}`).

`"allowWrite": ["/srv/shared/${caller}"]` gives each caller a directory of its own: with a
caller file (`run --caller`) it is that caller's (used when it is there); in gateway mode
each caller's servers are planned with its own name when it first calls, and the directory
is made for it then. A session with no caller refuses to start a
server whose values name `${caller}` (write `${caller:-name}` for one), saying which value.

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
        meaning = comments.get((name, f.name), "")
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

"""docs/architecture.md names the code as it is: every module path it gives (a package's
``policy/...`` and ``sandbox_profiles/...``, a room of the launcher's ``relay/...`` below
``launcher/``, a bare ``name.py`` in the room its paragraph is about) is a file or folder of
the tree, every ``module.py::name`` is defined there, and every class and method the walk of
one ``tools/call`` names is defined in the module it stands beside. The control: the same
checks on a page naming a module, a class and a method that do not exist find all three."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

from tests.support.paths import REPO

DOC = REPO / "docs" / "architecture.md"
PACKAGES = ("launcher", "policy", "sandbox_profiles", "scripts")
WALK = "## One `tools/call`, from stdin to the server and back"

# A path of the tree: folders and a module, or a folder ending in a slash (MCP method names
# such as ``tools/call`` have neither ending and are left alone).
PATH = re.compile(r"[a-z_]+(?:/[a-z_]+)*(?:\.py|/)")
FENCE = re.compile(r"^ *```.*?^ *```", re.S | re.M)
INLINE = re.compile(r"`([^`]+)`", re.S)
# A paragraph about one room: "- `policy/` decides" or "- **`relay/`**: the relay core".
ROOM = re.compile(r"^- (?:\*\*)?`([a-z_]+)/`", re.M)
# In the walk: a module, then what it holds (a class, Class.method, or a function in
# parentheses right after its module).
WALK_TOKEN = re.compile(
    r"(?P<module>[a-z_]+(?:/[a-z_]+)*\.py)(?: (?P<function>[a-z_]+)\))?"
    r"|(?P<name>\b[A-Z][a-z]\w*(?:\.\w+)?)"
)


def resolve(path: str, room: str | None = None) -> Path | None:
    """``path`` as the doc means it: from the repository, from ``launcher/``, or from the
    room of the paragraph it is in."""
    bases = [REPO, REPO / "launcher"]
    if room is not None:
        bases += [REPO / room, REPO / "launcher" / room]
    for base in bases:
        if "/" in path.rstrip("/") or path.endswith("/"):
            if (base / path).exists():
                return base / path
        elif base != REPO and list(base.rglob(path)):  # a bare name.py: somewhere in its room
            return next(base.rglob(path))
    return None


@cache
def _tree(module: Path) -> ast.Module:
    return ast.parse(module.read_text(encoding="utf-8"))


def _names(body: list[ast.stmt]) -> dict[str, ast.stmt]:
    found: dict[str, ast.stmt] = {}
    for node in body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            found[node.name] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            found[node.target.id] = node
        elif isinstance(node, ast.Assign):
            found.update({t.id: node for t in node.targets if isinstance(t, ast.Name)})
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.update({(a.asname or a.name): node for a in node.names})
    return found


def defines(module: Path, dotted: str) -> bool:
    """Whether ``module`` defines ``Name`` or ``Name.attribute`` (a method, or a field of a
    class), or imports ``Name`` from a module of the tree that does."""
    name, _, attribute = dotted.partition(".")
    node = _names(_tree(module).body).get(name)
    if isinstance(node, ast.ImportFrom):
        source = REPO / (str(node.module).replace(".", "/") + ".py")
        return source.is_file() and defines(source, dotted)
    if node is None or not attribute:
        return node is not None
    return isinstance(node, ast.ClassDef) and attribute in _names(node.body)


def _cut(text: str, fences: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``text`` cut into spans: the fences and what lies between them, in order."""
    spans, at = [], 0
    for a, b in fences:
        spans += [(at, a), (a, b)]
        at = b
    return [*spans, (at, len(text))]


def problems(text: str) -> list[str]:
    """Every name in ``text`` (architecture.md's form) that the tree does not have."""
    wrong: list[str] = []
    rooms = [(m.start(), m.group(1)) for m in ROOM.finditer(text)]
    # The drawings' paths, then the inline code's with the drawings blanked out (a fence's
    # backticks would pair with the prose's); each with the room of its paragraph.
    fences = [m.span() for m in FENCE.finditer(text)]
    named = [(m.start(), m.group(0)) for a, b in fences for m in PATH.finditer(text, a, b)]
    prose = "".join(" " * (b - a) if (a, b) in fences else text[a:b] for a, b in _cut(text, fences))
    named += [(m.start(), re.sub(r"\s+", "", m.group(1))) for m in INLINE.finditer(prose)]
    for at, token in named:
        path, _, name = token.partition("::")
        if not PATH.fullmatch(path):
            continue
        room = next((r for start, r in reversed(rooms) if start < at), None)
        found = resolve(path, room)
        if found is None:
            wrong.append(f"no {path}")
        elif name and not (found.is_file() and defines(found, name)):
            wrong.append(f"{path} has no {name}")
    walk = text[text.index(WALK) :] if WALK in text else ""
    walk = walk[walk.find("```") : walk.find("```", walk.find("```") + 3)]
    module: Path | None = None
    for match in WALK_TOKEN.finditer(walk):
        if match["module"]:
            module = resolve(match["module"])
            if module is None:
                wrong.append(f"no {match['module']}")
            elif match["function"] and not defines(module, match["function"]):
                wrong.append(f"{match['module']} has no {match['function']}")
        elif module is not None and not defines(module, match["name"]):
            wrong.append(f"{module.relative_to(REPO)} has no {match['name']}")
    return sorted(set(wrong))


def test_every_name_in_the_architecture_exists() -> None:
    assert problems(DOC.read_text(encoding="utf-8")) == []


def test_the_walk_of_one_call_names_its_steps() -> None:
    walk = DOC.read_text(encoding="utf-8").split(WALK, 1)[1]
    for step in ("transports/stdio.py", "relay/gate/decide.py", "servers/connection.py"):
        assert step in walk


def test_control_names_that_do_not_exist_are_found() -> None:
    page = (
        "- **`relay/`**: `core.py`, `nowhere.py`, `relay/gone/` and `relay/core.py::Nobody`\n\n"
        f"{WALK}\n\n```\n"
        "client ──▶ relay/core.py   Relay.feed → Relay.fly (policy/access.py no_such_function)\n"
        "           relay/absent.py\n"
        "```\n"
    )
    assert problems(page) == [
        "launcher/relay/core.py has no Relay.fly",
        "no nowhere.py",
        "no relay/absent.py",
        "no relay/gone/",
        "policy/access.py has no no_such_function",
        "relay/core.py has no Nobody",
    ]

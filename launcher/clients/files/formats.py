"""A client file's servers read, and one entry replaced, in the file's own format, with every
other byte kept where the format's editor allows: JSON and JSONC by the in-place editor of
:mod:`launcher.clients.files.jsonc` (only the entry's text changes), TOML with tomlkit and YAML
with ruamel.yaml's round trip (the entry's keys set in place: comments, the entry's other
keys, the rest of the file kept). Servers are an object of entries by name, or (``listed``:
Continue's YAML, Mistral Vibe's TOML) a list of entries each with its ``name``.

A YAML file is read with the round-trip loader (no tags constructed); aliases are
followed as shared values, and a file whose values, aliases followed, exceed
:data:`MAX_VALUES` is refused (a "billion laughs" file planted in a project).
"""

from __future__ import annotations

import io
import json
import tomllib
from typing import Any, cast

from launcher.clients.files.jsonc import JsoncError, parse
from launcher.shared.user_errors import UsageError

Path = tuple[str, ...]
MAX_VALUES = 100_000


def load(syntax: str, text: str, where: object) -> Any:
    """The file's whole value; UsageError names the file and the place of a mistake."""
    if syntax == "toml":
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise UsageError(f"{where}: not TOML: {exc}") from None
        except RecursionError:
            raise UsageError(f"{where}: not TOML a client reads: nested too deeply") from None
        except ValueError as exc:  # an integer longer than Python converts (its digit limit)
            raise UsageError(f"{where}: a value ironcurtain cannot read: {exc}") from None
    if syntax == "yaml":
        return _yaml_load(text, where)
    try:
        return parse(text).value
    except JsoncError as exc:
        raise UsageError(f"{where}: {exc}") from None


def servers_at(data: Any, at: Path, listed: bool, where: object) -> dict[str, Any]:
    """The servers at ``at`` of the file's value, by name."""
    if not isinstance(data, dict):
        raise UsageError(f"{where}: expected an object at the top")
    value: Any = data
    for key in at:
        value = value.get(key) if isinstance(value, dict) else None
    if value is None:
        return {}
    if not listed:
        if not isinstance(value, dict):
            raise UsageError(f"{where}: {at[-1]} is not an object of servers")
        return dict(value)
    if not isinstance(value, list):
        raise UsageError(f"{where}: {at[-1]} is not a list of servers")
    out: dict[str, Any] = {}
    for i, item in enumerate(value):
        name = item.get("name") if isinstance(item, dict) else None
        if not isinstance(name, str):
            raise UsageError(f"{where}: {at[-1]} entry {i + 1} has no name")
        if name in out:
            raise UsageError(f"{where}: two servers named {name!r} in {at[-1]}")
        out[name] = item
    return out


def replace(syntax: str, listed: bool, text: str, at: Path, name: str, entry: Any) -> str:
    """``text`` with the server ``name`` at ``at`` holding ``entry``, and nothing else of
    the file's meaning changed (read back and compared: :class:`NotEditable` when it
    would be)."""
    try:
        new = _replace(syntax, listed, text, at, name, entry)
        read_back = plain(load(syntax, new, ""))
    except (ValueError, IndexError, KeyError, UsageError) as exc:  # a form the editor misses
        raise NotEditable(f"the file, edited, could not be read back the same ({exc})") from None
    expected = plain(load(syntax, text, ""))
    container = expected
    for key in at:
        container = container[key]
    if listed:
        container[next(i for i, e in enumerate(container) if e.get("name") == name)] = entry
    else:
        container[name] = entry
    if _dumped(read_back) != _dumped(expected):
        raise NotEditable("the file, read back, would differ beyond it")
    return new


def _dumped(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _replace(syntax: str, listed: bool, text: str, at: Path, name: str, entry: Any) -> str:
    if syntax in ("json", "jsonc"):
        doc = parse(text)
        if not listed:
            return doc.replace((*at, name), entry)
        index = list(servers_at(doc.value, at, True, "")).index(name)
        return doc.replace((*at, str(index)), entry)
    if syntax == "toml":
        import tomlkit  # only wrap needs it

        toml = tomlkit.parse(text)
        _set_keys(_find(toml, at, name, listed), entry)
        return tomlkit.dumps(toml)
    return _yaml_replace(text, at, name, entry, listed)


def entry_at(syntax: str, listed: bool, text: str, at: Path, name: str) -> Any:
    """The value of server ``name`` at ``at`` (KeyError when it is not there)."""
    servers = servers_at(load(syntax, text, ""), at, listed, "")
    return plain(servers[name])


def plain(value: Any) -> Any:
    """``value`` as plain JSON-like values (a YAML or TOML file's own types made dicts,
    lists, strings and numbers)."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    return str(value)  # a date or the like: never a value wrap writes


def _find(doc: Any, at: Path, name: str, listed: bool) -> Any:
    container = doc
    for key in at:
        container = container[key]
    if not listed:
        return container[name]
    return next(item for item in container if item.get("name") == name)


def _set_keys(table: Any, entry: dict[str, Any]) -> None:
    """The keys of ``table`` made those of ``entry``: each changed one set in place, those
    gone removed, the rest (their comments, their layout) left as they are."""
    for key in [k for k in table if k not in entry]:
        del table[key]
    for key, value in entry.items():
        if key not in table or plain(table[key]) != value:
            table[key] = value


class NotEditable(Exception):
    """An entry written in a form wrap does not rewrite (the message says which)."""


def _yaml_replace(text: str, at: Path, name: str, entry: dict[str, Any], listed: bool) -> str:
    """``text`` with the YAML entry's own lines replaced by the entry with ``entry``'s keys
    (set in place: its comments and quoting kept where its keys are); every other line of
    the file as it was. Only block-style entries are rewritten."""
    from ruamel.yaml import YAML  # only YAML clients need it

    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = 4096  # long lines stay as they are
    data = yaml.load(text)
    container = data
    for key in at:
        container = container[key]
    lines = text.splitlines(keepends=True)
    if _flow(container):
        raise NotEditable(f"its {at[-1]} is written in YAML's flow style")
    if listed:
        index = next(i for i, item in enumerate(container) if item.get("name") == name)
        node = container[index]
        line, col = container.lc.item(index)
        start = lines[line].rindex("-", 0, col)  # the item's dash
        head, first = lines[line][:col], line
    else:
        node = container[name]
        line, start = container.lc.key(name)
        if _flow(node) or node.lc.line == line:
            raise NotEditable("it is written on its key's line (YAML's flow style)")
        head, first = "", line + 1
        col = node.lc.col
    if getattr(node, "merge", None) or node.anchor.value:
        raise NotEditable("it uses YAML anchors or merge keys")
    end = line + 1
    for i in range(line + 1, len(lines)):
        body = lines[i].strip()
        if not body or body.startswith("#"):
            continue
        if len(lines[i]) - len(lines[i].lstrip(" ")) <= start:
            break
        end = i + 1
    mapping, sequence, offset = _indents(node)
    _set_keys(node, entry)
    _shift_comments(node, col)
    yaml.indent(mapping=mapping, sequence=sequence, offset=offset)
    yaml.representer.add_representer(type(None), _null)
    out = io.StringIO()
    yaml.dump(node, out)
    dumped = out.getvalue().splitlines(keepends=True)
    while dumped and (not dumped[-1].strip() or dumped[-1].lstrip().startswith("#")):
        dumped.pop()  # comments after the entry are the next one's: kept where they are
    newline = "\r\n" if lines[line].endswith("\r\n") else "\n"  # as the file has it
    new = "".join(
        (head if i == 0 and head else " " * col) + d.rstrip("\r\n") + newline
        for i, d in enumerate(dumped)
    )
    return "".join(lines[:first]) + new + "".join(lines[end:])


def _shift_comments(node: Any, by: int) -> None:
    """The end-of-line comments of ``node`` moved ``by`` columns left: it is written from
    column 0, then indented back to where it was."""
    pending = [node]
    while pending:
        item = pending.pop()
        comments = getattr(item, "ca", None)
        for slots in comments.items.values() if comments is not None else ():
            for token in slots if isinstance(slots, list) else [slots]:
                if getattr(token, "column", -1) >= by and hasattr(token, "value"):
                    token.column = token.column - by
        if isinstance(item, dict):
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)


def _flow(node: Any) -> bool:
    return bool(getattr(node, "fa", None) and node.fa.flow_style())


def _null(representer: Any, _: Any) -> Any:
    return representer.represent_scalar("tag:yaml.org,2002:null", "null")


def _indents(node: Any) -> tuple[int, int, int]:
    """The mapping and sequence indents and the dash offset the entry is written with
    (ruamel.yaml's defaults for what it does not show)."""
    mapping, sequence, offset = 2, 2, 0
    for key, value in node.items():
        key_col = node.lc.key(key)[1]
        if isinstance(value, list) and value and not _flow(value):
            sequence = cast(Any, value).lc.item(0)[1] - key_col  # to the item, past its "- "
            offset = max(sequence - 2, 0)
        elif isinstance(value, dict) and value and not _flow(value):
            mapping = cast(Any, value).lc.col - key_col
    return mapping, sequence, offset


def _yaml_load(text: str, where: object) -> Any:
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    try:
        data = YAML(typ="rt").load(text)
    except YAMLError as exc:
        raise UsageError(f"{where}: not YAML: {' '.join(str(exc).split())}") from None
    except RecursionError:
        raise UsageError(f"{where}: not YAML a client reads: nested too deeply") from None
    _count(data, [MAX_VALUES], where)
    return {} if data is None else data


def _count(value: Any, left: list[int], where: object, depth: int = 0) -> None:
    left[0] -= 1
    if left[0] < 0:
        raise UsageError(f"{where}: more than {MAX_VALUES} values (aliases followed): not read")
    if depth > 100:
        raise UsageError(f"{where}: nested deeper than 100 levels")
    if isinstance(value, dict):
        for k, v in value.items():
            _count(k, left, where, depth + 1)
            _count(v, left, where, depth + 1)
    elif isinstance(value, list):
        for v in value:
            _count(v, left, where, depth + 1)

"""Git configuration files: read as git reads them, and what in them makes git run a program
or read another file. Used for the sandbox (what to keep read-only) and for the policy
(where git will really work)."""

from __future__ import annotations

import os
import shutil
import stat
import string
from collections.abc import Iterator, Sequence

from sandbox_profiles.regular_file import UNTRUSTED, NotRegular, read_regular

_GIT_KEY_CHARS = frozenset(string.ascii_letters + string.digits + "-")
_GIT_SPACE = " \t\n\r"  # git's isspace(): a form feed or vertical tab is an ordinary byte
ConfigEntry = tuple[str, str | None, str, str | None]


_BOM = "\ufeff"


class GitConfigError(ValueError):
    """A configuration git itself would refuse to read."""


class UnreadableConfig(Exception):
    """A git configuration that is there but cannot be read here as git would read it:
    what it makes git run is unknown, so whoever asked must protect as if it named anything."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


def read_bounded(path: str, limit: int) -> bytes:
    """The bytes of the file at ``path`` (links followed) when it holds at most ``limit``;
    :class:`UnreadableConfig` when it cannot be read or is larger: what it would make a
    tool load is then unknown."""
    try:
        fd = os.open(path, UNTRUSTED)
    except OSError as exc:
        raise UnreadableConfig(path, f"cannot be read ({exc.strerror})") from None
    try:
        return read_regular(fd, limit)[0]
    except NotRegular as exc:
        raise UnreadableConfig(path, f"is {exc.reason}") from None
    except OSError as exc:
        raise UnreadableConfig(path, f"cannot be read ({exc.strerror})") from None
    finally:
        os.close(fd)


def parse_config(text: str) -> list[ConfigEntry]:
    """``(section, subsection, key, value)`` of every variable of a git config file, as git
    reads it: section and key lower-cased, ``[a.b]`` read as section ``a`` subsection ``b``,
    a key without ``=`` has the value None. What git would refuse to read raises
    :class:`GitConfigError`.

    >>> parse_config('[core]\\n\\tWorkTree = "../a b" ; c\\n[includeIf "gitdir:x"] path=y')
    [('core', None, 'worktree', '../a b'), ('includeif', 'gitdir:x', 'path', 'y')]
    """
    if text.startswith(_BOM):
        text = text[1:]  # git skips a UTF-8 byte-order mark (and refuses part of one)
    text = text.replace("\r\n", "\n")
    entries: list[ConfigEntry] = []
    section: tuple[str, str | None] = ("", None)  # keys before any header: git reads them
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in _GIT_SPACE:
            i += 1
        elif c in "#;":
            end = text.find("\n", i)
            i = n if end < 0 else end + 1
        elif c == "[":
            section, i = _header(text, i + 1)
        elif c in _GIT_KEY_CHARS and c.isalpha():
            j = i
            while j < n and text[j] in _GIT_KEY_CHARS:
                j += 1
            key = text[i:j].lower()
            while j < n and text[j] in " \t":
                j += 1
            if j >= n or text[j] == "\n":
                entries.append((*section, key, None))
                i = j
            elif text[j] == "=":
                value, i = _value(text, j + 1)
                entries.append((*section, key, value))
            else:
                raise _bad_config()
        else:
            raise _bad_config()
    return entries


def _bad_config() -> GitConfigError:
    return GitConfigError("has a git config that git cannot read")


def _header(text: str, i: int) -> tuple[tuple[str, str | None], int]:
    """``[name]``, ``[name "sub"]`` or ``[name.sub]`` from just after the ``[``."""
    n = len(text)
    j = i
    while j < n and (text[j] in _GIT_KEY_CHARS or text[j] == "."):
        j += 1
    name = text[i:j].lower()
    if not name or j >= n:
        raise _bad_config()
    subsection: str | None = None
    if text[j] in _GIT_SPACE and text[j] != "\n":
        while j < n and text[j] in _GIT_SPACE and text[j] != "\n":
            j += 1
        if j >= n or text[j] != '"':
            raise _bad_config()
        j += 1
        chars = []
        while True:
            if j >= n or text[j] == "\n":
                raise _bad_config()
            if text[j] == '"':
                break
            if text[j] == "\\":
                j += 1
                if j >= n or text[j] == "\n":
                    raise _bad_config()
            chars.append(text[j])
            j += 1
        subsection = "".join(chars)
        j += 1
    elif "." in name:
        name, subsection = name.split(".", 1)
    if j >= n or text[j] != "]":
        raise _bad_config()
    return (name, subsection), j + 1


_GIT_ESCAPES = {"t": "\t", "b": "\b", "n": "\n", "\\": "\\", '"': '"'}


def _value(text: str, i: int) -> tuple[str, int]:
    """A value from just after the ``=`` to the end of its (possibly continued) line:
    quotes removed, escapes applied, comments and surrounding blanks dropped."""
    n = len(text)
    out: list[str] = []
    keep = 0  # length of ``out`` without its trailing unquoted blanks
    quoted = False
    while i < n:
        c = text[i]
        i += 1
        if c == "\n":
            break
        if c in _GIT_SPACE and not quoted:
            if out:
                out.append(" ")  # as git: each unquoted blank inside a value is a space
            continue
        if c in "#;" and not quoted:
            end = text.find("\n", i)
            i = n if end < 0 else end + 1
            break
        if c == "\\":
            if i >= n:
                raise _bad_config()
            escaped = text[i]
            i += 1
            if escaped == "\n":
                continue
            if escaped not in _GIT_ESCAPES:
                raise _bad_config()
            out.append(_GIT_ESCAPES[escaped])
        elif c == '"':
            quoted = not quoted
        else:
            out.append(c)
        keep = len(out)
    if quoted:
        raise _bad_config()
    return "".join(out[:keep]), i


# Keys whose value is a program git runs, or a file it reads as more configuration.
PROGRAM_KEYS: tuple[str, ...] = (
    "core.fsmonitor",
    "core.hookspath",
    "core.sshcommand",
    "core.editor",
    "core.pager",
    "core.askpass",
    "core.gitproxy",
    "core.worktree",
    "diff.external",
    "sequence.editor",
    "credential.helper",
    "gpg.program",
    "uploadpack.packobjectshook",
    "include.path",
)
PROGRAM_KEY_ENDINGS: tuple[str, ...] = (
    ".command",  # diff.<driver>.command, mergetool.<tool>.cmd is below
    ".cmd",
    ".textconv",
    ".clean",
    ".smudge",
    ".process",
    ".driver",
    ".program",
    ".helper",
    ".uploadpack",
    ".receivepack",
    ".path",  # includeIf.<condition>.path
)


def git_config_entries(text: str) -> Iterator[tuple[str, str]]:
    """(lower-cased ``section[.subsection].key``, value) of each variable, as git reads
    them; a key without a value reads ``true``; a file git would refuse gives nothing (git
    runs nothing from it either).

    >>> list(git_config_entries('[core]\\n\\tfsmonitor = "touch x" ; note\\n[alias]\\n x = !sh'))
    [('core.fsmonitor', 'touch x'), ('alias.x', '!sh')]
    """
    try:
        entries = parse_config(text)
    except GitConfigError:
        return
    for section, subsection, key, value in entries:
        middle = f".{subsection.lower()}" if subsection is not None else ""
        name = f"{section}{middle}.{key}" if section else key  # keys before any header
        # git uses values as C strings: a NUL byte ends one
        yield name, "true" if value is None else value.split("\0", 1)[0]


def program_keys(text: str) -> list[str]:
    """The keys of a git configuration that run a program or read another file."""
    keys: list[str] = []
    for key, value in git_config_entries(text):
        if (
            key in PROGRAM_KEYS
            or key.endswith(PROGRAM_KEY_ENDINGS)
            or (key.startswith("alias.") and value.startswith("!"))
        ):
            keys.append(key)
    return keys


def _resolve(value: str, base: str, home: str) -> str | None:
    """Where a path value of a git configuration lands, as git's interpolation reads it:
    ``~`` and ``~/`` are ``home``, ``~user/`` that user's home, ``%(prefix)/`` git's
    installation prefix; a relative path is relative to ``base``. None when git could not
    expand it (an unknown user: git then refuses the file)."""
    if value == "~" or value.startswith("~/"):
        value = home + value[1:]
    elif value.startswith("~"):
        expanded = os.path.expanduser(value)
        if expanded == value:
            return None
        value = expanded
    elif value.startswith("%(prefix)/"):
        value = os.path.join(git_prefix(), value[len("%(prefix)/") :])
    return os.path.normpath(os.path.join(base, value))


def git_prefix() -> str:
    """The prefix git was installed under (``/usr`` for ``/usr/bin/git``)."""
    found = shutil.which("git")
    if found is None:
        return "/usr"
    return os.path.dirname(os.path.dirname(os.path.realpath(found)))


def git_config_paths(config_file: str, home: str, worktrees: Sequence[str]) -> list[str]:
    """Files and directories a git configuration file makes git read or run from:
    ``include.path`` and ``includeIf.*.path`` (relative to the file's directory);
    ``core.hooksPath`` and programs named by a path (``core.fsmonitor``, filter, diff and
    merge drivers, ``!`` aliases...), relative to each repository's top ``worktrees``
    (git runs them there); ``~`` is ``home``.

    >>> import tempfile, os, pathlib
    >>> d = tempfile.mkdtemp(); c = os.path.join(d, "config")
    >>> _ = pathlib.Path(c).write_text("[core]\\n hooksPath = .githooks\\n fsmonitor = tools/fsm x")
    >>> [p[len(d):] for p in git_config_paths(c, "/h", [d + "/wt"])]
    ['/wt/.githooks', '/wt/tools/fsm']
    """
    found: list[str | None] = []
    for key, value in git_config_entries(read_config(config_file)):
        if not value:
            continue
        if _includes(key):
            found.append(_resolve(value, os.path.dirname(config_file), home))
        elif key == "core.hookspath":
            found += [_resolve(value, top, home) for top in worktrees]
        elif key in PROGRAM_KEYS or key.endswith(PROGRAM_KEY_ENDINGS) or key.startswith("alias."):
            words = value.lstrip("!").split()
            if words and "/" in words[0]:
                found += [_resolve(words[0], top, home) for top in worktrees]
    return [path for path in found if path is not None]


def git_config_includes(config_file: str, home: str) -> list[str]:
    """The files a git configuration file includes (``include.path``, ``includeIf.*.path``,
    whatever the condition), which git reads as configuration in their turn.

    >>> import tempfile, os, pathlib
    >>> d = tempfile.mkdtemp(); c = pathlib.Path(d, "config")
    >>> _ = c.write_text('[include]\\n path = a.cfg\\n[includeIf "gitdir:x"]\\n path = ~/b')
    >>> [p.replace(d, "D") for p in git_config_includes(c, "/h")]
    ['D/a.cfg', '/h/b']
    """
    found = [
        _resolve(value, os.path.dirname(config_file), home)
        for key, value in git_config_entries(read_config(config_file))
        if value and _includes(key)
    ]
    return [path for path in found if path is not None]


def _includes(key: str) -> bool:
    return key == "include.path" or (key.startswith("includeif.") and key.endswith(".path"))


# git reads configurations of any size up to 2 GiB; past this, what one holds is not looked
# at here, and it counts as unreadable (protected as if it named anything).
MAX_CONFIG_BYTES = 64 << 20


def read_config(config_file: str) -> str:
    """A configuration file's text as git reads it: its bytes, every one kept (a path in it
    is the exact bytes git would use: undecodable ones are carried as surrogate escapes, as
    ``os`` functions take them back). Empty when nothing is there to read (git skips a
    missing include, and a directory). :class:`UnreadableConfig` when something is there
    that cannot be read whole here (no permission, not a regular file, too large): git, or
    the user's git later, may well read it.

    >>> import tempfile, os, pathlib
    >>> d = tempfile.mkdtemp(); c = os.path.join(d, "config")
    >>> _ = pathlib.Path(c).write_bytes(b"\\xef\\xbb\\xbf[core]\\n\\thooksPath = h\\xff")
    >>> list(git_config_entries(read_config(c))) == [("core.hookspath", "h\\udcff")]
    True
    """
    try:
        st = os.stat(config_file)
    except (FileNotFoundError, NotADirectoryError):
        return ""
    except OSError as exc:
        raise UnreadableConfig(config_file, f"cannot be looked at: {exc.strerror}") from None
    if stat.S_ISDIR(st.st_mode):
        return ""
    if not stat.S_ISREG(st.st_mode):
        raise UnreadableConfig(config_file, "is not a regular file")
    if st.st_size > MAX_CONFIG_BYTES:
        raise UnreadableConfig(config_file, f"is larger than {MAX_CONFIG_BYTES} bytes")
    try:
        fd = os.open(config_file, UNTRUSTED)
    except (FileNotFoundError, NotADirectoryError):
        return ""
    except OSError as exc:
        raise UnreadableConfig(config_file, f"cannot be read: {exc.strerror}") from None
    try:
        data = read_regular(fd, MAX_CONFIG_BYTES)[0]
    except NotRegular as exc:
        raise UnreadableConfig(config_file, f"is {exc.reason}") from None
    except OSError as exc:
        raise UnreadableConfig(config_file, f"cannot be read: {exc.strerror}") from None
    finally:
        os.close(fd)
    return data.decode("utf-8", "surrogateescape")


def host_git_configs(home: str, xdg_config: str | None) -> list[str]:
    """The user's and the system's git configuration files, where they exist."""
    candidates = [
        "/etc/gitconfig",
        os.path.join(home, ".gitconfig"),
        os.path.join(xdg_config or os.path.join(home, ".config"), "git", "config"),
    ]
    return [p for p in candidates if os.path.isfile(p)]

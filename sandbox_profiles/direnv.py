"""What a present ``.envrc`` makes direnv load, read as direnv's stdlib reads it.

direnv asks the user to allow an ``.envrc``'s exact content once; what the allowed file then
loads, it loads again on every ``cd`` without asking, whatever it has become: a ``.env``
through ``dotenv`` (its ``GIT_CONFIG_*`` or ``LD_PRELOAD`` then run code at the user's next
``git status``), a file through ``source_env``, a directory put first on ``PATH``. So each
such place in a writable root is protected as the ``.envrc`` is.

The ``.envrc`` is a bash script; it is read statement by statement (comments, quotes,
continuation lines, ``;``, ``&&``, ``|``, ``if``/``then``, ``$(...)`` as bash takes them) for
the stdlib's loading commands with their paths relative to the directory they run in
(``source_env`` runs a file in its own directory, as direnv's ``pushd`` does):

- ``dotenv [path]``, ``dotenv_if_exists [path]``: the file (default ``.env``; a directory's
  ``.env``);
- ``source_env``, ``source_env_if_exists``, ``source``, ``.``: the file (a directory's
  ``.envrc``), itself read in turn, ten deep;
- ``source_up``, ``source_up_if_exists [name]``: that name in every directory above;
- ``watch_file``: each file (``watch_dir`` only makes direnv look again);
- ``PATH_add``, ``path_add VAR``, ``load_prefix``, ``layout node`` and ``layout php``, and
  assignments of ``PATH``-like and file-naming variables (``LD_PRELOAD``,
  ``GIT_CONFIG_GLOBAL``...): each directory or file;
- a script it runs by a path, or through an interpreter (``sh x``, ``python3 x``).

What cannot be known from the text (a path built from a variable or a command's output, a
glob, ``eval`` of anything but plain words, a command named by a variable, an unclosed
quote) raises :class:`UnreadableConfig`: whoever asked protects as if it named anything.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator

from sandbox_profiles.gitconfig import UnreadableConfig, read_bounded

MAX_ENVRC_BYTES = 1 << 20
_DEPTH = 10
_SEPARATORS = frozenset({";", "&&", "||", "|", "&", "(", ")", ";;", "|&"})
_KEYWORDS = frozenset(
    {
        "if",
        "then",
        "else",
        "elif",
        "fi",
        "do",
        "done",
        "while",
        "until",
        "!",
        "{",
        "}",
        "time",
        "command",
        "builtin",
        "exec",
        "case",
        "esac",
    }
)
_DOTENV = frozenset({"dotenv", "dotenv_if_exists"})
_SOURCE_ENV = frozenset({"source_env", "source_env_if_exists"})
_SOURCE = frozenset({"source", "."})
_SOURCE_UP = frozenset({"source_up", "source_up_if_exists"})
_INTERPRETERS = re.compile(r"(ba|z|k|da)?sh|python[0-9.]*|node|ruby|perl|bun|deno|tsx")
# Variables whose value is a list of directories code is loaded from, or names a file or
# directory a tool loads.
_PATH_VARS = frozenset(
    {
        "PATH",
        "LD_LIBRARY_PATH",
        "PYTHONPATH",
        "NODE_PATH",
        "RUBYLIB",
        "PERL5LIB",
        "GEM_PATH",
        "KUBECONFIG",
    }
)
_FILE_VARS = frozenset(
    {
        "LD_PRELOAD",
        "BASH_ENV",
        "ENV",
        "PYTHONSTARTUP",
        "GIT_CONFIG_GLOBAL",
        "GIT_CONFIG_SYSTEM",
        "NPM_CONFIG_USERCONFIG",
        "RIPGREP_CONFIG_PATH",
        "AWS_CONFIG_FILE",
        "DOCKER_CONFIG",
        "XDG_CONFIG_HOME",
        "ZDOTDIR",
        # a virtualenv's bin/ goes first on PATH (layout python and pyenv take it)
        "VIRTUAL_ENV",
        "GIT_EXEC_PATH",
        "GIT_TEMPLATE_DIR",
        "PYTHONHOME",
        "PIPENV_PIPFILE",
    }
)
# Variables whose value is a command line a tool runs (git's editor, pager, ssh, askpass;
# node's --require): each word holding a ``/`` is a program or file it loads.
_COMMAND_VARS = frozenset(
    {
        "EDITOR",
        "VISUAL",
        "PAGER",
        "MANPAGER",
        "LESSOPEN",
        "BROWSER",
        "GIT_EDITOR",
        "GIT_SEQUENCE_EDITOR",
        "GIT_PAGER",
        "GIT_SSH",
        "GIT_SSH_COMMAND",
        "GIT_ASKPASS",
        "SSH_ASKPASS",
        "GIT_EXTERNAL_DIFF",
        "NODE_OPTIONS",
        "RUSTC_WRAPPER",
    }
)
# File variables a layout makes absolute from the .envrc's directory (layout python's
# realpath of VIRTUAL_ENV; layout pipenv's test of PIPENV_PIPFILE there).
_MADE_ABSOLUTE = frozenset({"VIRTUAL_ENV", "PIPENV_PIPFILE"})
_DECLARE = frozenset({"export", "local", "declare", "readonly", "typeset"})
_LAYOUT_DIRS = {
    "node": ("node_modules/.bin",),
    "php": ("vendor/bin",),
    # pipenv installs what the Pipfile names when its virtualenv is missing (in .venv with
    # PIPENV_VENV_IN_PROJECT), then puts that virtualenv's bin/ first on PATH
    "pipenv": ("Pipfile", "Pipfile.lock", ".venv"),
}
# Commands that change the directory the rest of the script runs in, or read a command's
# output or standard input as the environment: what they load is not known from the text.
_UNFOLLOWED = frozenset({"cd", "pushd", "popd", "direnv_load", "mapfile", "readarray"})
# Paths that are a stream, not a file: what is read through them comes from elsewhere.
_STREAMS = ("/dev/stdin", "/dev/fd/", "/proc/self/fd/", "/dev/tcp/", "/dev/udp/")
_ASSIGN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", re.S)
_SELF = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?")


def envrc_paths(envrc: str, home: str) -> list[tuple[str, str]]:
    """(path, what loads it) of every place ``envrc`` makes direnv load, absolute and
    normalised; :class:`UnreadableConfig` when that cannot be known for sure."""
    found: list[tuple[str, str]] = []
    _read_script(envrc, os.path.dirname(os.path.abspath(envrc)), home, found, 0, set())
    return list(dict.fromkeys(found))


def _read_script(
    script: str, cwd: str, home: str, found: list[tuple[str, str]], depth: int, seen: set[str]
) -> None:
    if script in seen or depth > _DEPTH:
        return
    seen.add(script)
    for words in statements(_read(script), script):
        for path, how, sourced_in in _loads(words, cwd, home, script):
            found.append((path, f"{how} in {script}"))
            if sourced_in is not None and os.path.isfile(path):
                _read_script(path, sourced_in, home, found, depth + 1, seen)


def _read(path: str) -> str:
    return read_bounded(path, MAX_ENVRC_BYTES).decode("utf-8", "surrogateescape")


def statements(text: str, where: str) -> Iterator[list[str]]:
    """The simple commands of a bash script, as their words (quotes removed), keywords
    (``if``, ``then``...) dropped; the insides of ``$(...)`` and backquotes too.

    >>> list(statements("if has x; then dotenv .e # no\\nfi\\nexport A=\\"$(source_env b)\\"", "f"))
    [['has', 'x'], ['dotenv', '.e'], ['export', 'A=$(source_env b)'], ['source_env', 'b']]
    """
    import shlex  # lazy: only a directory with an .envrc is read as bash

    for line in _logical_lines(text, where):
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()")
        lexer.whitespace_split = True
        lexer.whitespace = " \t"  # bash splits words on blanks only: a CR stays in the word
        lexer.commenters = ""
        try:
            tokens = list(lexer)
        except ValueError as exc:
            raise UnreadableConfig(where, f"cannot be read as bash reads it: {exc}") from None
        words: list[str] = []
        for token in [*tokens, ";"]:
            if token in _SEPARATORS:
                if words:
                    yield words
                words = []
            elif not words and token in _KEYWORDS:
                continue
            else:
                words.append(token)
        for inner in _substitutions(line):
            yield from statements(inner, where)


def _substitutions(line: str) -> list[str]:
    """The text inside each ``$(...)`` (outermost, to its matching parenthesis) and each
    pair of backquotes of a line."""
    found, i = [], line.find("$(")
    while i >= 0:
        depth, j = 0, i + 1
        for j in range(i + 1, len(line)):
            depth += {"(": 1, ")": -1}.get(line[j], 0)
            if depth == 0:
                break
        found.append(line[i + 2 : j])
        i = line.find("$(", j)
    found += line.split("`")[1::2]
    return found


def _logical_lines(text: str, where: str) -> Iterator[str]:
    """Lines as bash reads them: comments cut (a ``#`` starting a word, outside quotes),
    a backslash-newline joined, a quote left open carried to the next line."""
    comment, quote, escaped, line = False, "", False, []
    for char in text + "\n":
        if comment and char != "\n":
            continue
        if escaped:
            escaped = False
            if char != "\n":
                line.append("\\" + char)
            continue
        if char == "\\" and quote != "'":
            escaped = True
        elif quote:
            line.append(char)
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
            line.append(char)
        elif char == "#" and (not line or line[-1] in " \t;&|()"):
            comment = True
        elif char == "\n":
            yield "".join(line)
            comment, line = False, []
        else:
            line.append(char)
    if quote:
        raise UnreadableConfig(where, "a quote is left open")


def _loads(
    words: list[str], cwd: str, home: str, where: str
) -> Iterator[tuple[str, str, str | None]]:
    """(path, what loads it, the directory a sourced script runs in, or None when it is not
    a script read in turn) of one statement."""
    if words[0] in _DECLARE:
        for word in words[1:]:
            if _unknowable(word) and _ASSIGN.fullmatch(word) is None:
                raise UnreadableConfig(where, f"{words[0]} of what is not known: {word!r}")
            yield from ((p, how, None) for p, how in _assigned(word, cwd, home, where))
        return
    lead = 0
    while lead < len(words) and _ASSIGN.fullmatch(words[lead]):
        yield from ((p, how, None) for p, how in _assigned(words[lead], cwd, home, where))
        lead += 1
    command = words[lead:]
    if not command:
        return
    name, args = command[0], command[1:]
    if _unknowable(name):
        raise UnreadableConfig(where, f"runs a command named by a variable: {name}")
    if name in _UNFOLLOWED:
        raise UnreadableConfig(where, f"{name}: what follows is not read for sure")
    if name == "eval":
        for inner in statements(" ".join(_literal(a, where, name) for a in args), where):
            yield from _loads(inner, cwd, home, where)
        return
    yield from _stdlib(name, args, cwd, home, where)


def _stdlib(
    name: str, args: list[str], cwd: str, home: str, where: str
) -> Iterator[tuple[str, str, str | None]]:
    def at(arg: str) -> str:
        return _resolve(_literal(arg, where, name), cwd, home)

    operands = [a for a in args if not a.startswith("-")]
    if name in _DOTENV:
        path = at(operands[0]) if operands else os.path.join(cwd, ".env")
        yield (os.path.join(path, ".env") if os.path.isdir(path) else path), name, None
    elif name in _SOURCE_ENV and operands:
        path = at(operands[0])
        path = os.path.join(path, ".envrc") if os.path.isdir(path) else path
        yield path, name, os.path.dirname(path)
    elif name in _SOURCE and operands:
        yield at(operands[0]), name, cwd
    elif name in _SOURCE_UP:
        wanted = _literal(operands[0], where, name) if operands else ".envrc"
        above = os.path.dirname(cwd)
        while above != os.path.dirname(above):
            path = os.path.join(above, wanted)
            yield path, name, os.path.dirname(path)
            above = os.path.dirname(above)
    elif name in ("watch_file", "PATH_add", "load_prefix"):
        yield from ((at(a), name, None) for a in operands)
    elif name == "path_add" and operands:
        yield from ((at(a), f"path_add {operands[0]}", None) for a in operands[1:])
    elif name == "layout" and operands and operands[0] in _LAYOUT_DIRS:
        for rel in _LAYOUT_DIRS[operands[0]]:
            yield os.path.join(cwd, rel), f"layout {operands[0]}", None
    elif name == "layout" and operands[1:] and operands[0] == "anaconda" and "/" in operands[1]:
        yield at(operands[1]), "layout anaconda", None
    elif name == "use" and operands and operands[0] == "vim":
        yield at(operands[1] if operands[1:] else ".vimrc.local"), "use vim", None
    elif "/" in name:
        yield at(name), "run", None
    elif _INTERPRETERS.fullmatch(name) and operands and not operands[0].startswith("-"):
        yield at(operands[0]), f"run by {name}", None


def _assigned(word: str, cwd: str, home: str, where: str) -> Iterator[tuple[str, str]]:
    """The places an assignment of a variable that loads code names."""
    match = _ASSIGN.fullmatch(word)
    if match is None:
        return
    var, value = match.groups()
    if var not in _PATH_VARS and var not in _FILE_VARS and var not in _COMMAND_VARS:
        return
    value = value.replace("$(pwd)", cwd).replace("${PWD}", cwd).replace("$PWD", cwd)
    value = value.replace("${HOME}", home).replace("$HOME", home)
    if var in _COMMAND_VARS:
        words = re.split(r"[\s=|]", value)
        parts = [w for w in words if "/" in w or w.startswith("~")]
    else:
        parts = re.split(r"[: ]", value) if var == "LD_PRELOAD" else value.split(":")
    for part in parts:
        itself = _SELF.fullmatch(part)
        if itself is not None and itself.group(1) == var:
            continue  # PATH=...:$PATH: what was there before
        if not part and var in _PATH_VARS:
            raise UnreadableConfig(where, f"{var}: an empty entry is whatever directory it runs in")
        if not part:
            continue
        relative = not part.startswith(("/", "~"))
        if relative and var not in _COMMAND_VARS and var not in _MADE_ABSOLUTE:
            # Taken from the directory each program runs in (a subdirectory's tools/), not
            # the .envrc's.
            raise UnreadableConfig(where, f"{var}: {part!r} is relative to wherever it is used")
        yield _resolve(_literal(part, where, var), cwd, home), f"{var}="


def _literal(arg: str, where: str, name: str) -> str:
    if _unknowable(arg) or any(c in arg for c in "*?[<>") or arg.startswith(_STREAMS):
        raise UnreadableConfig(where, f"{name}: {arg!r} is not a plain path")
    if arg.startswith("~") and arg != "~" and not arg.startswith("~/"):
        raise UnreadableConfig(where, f"{name}: {arg!r} is in another user's home")
    return arg


def _unknowable(word: str) -> bool:
    return "$" in word or "`" in word


def _resolve(path: str, cwd: str, home: str) -> str:
    if path == "~" or path.startswith("~/"):
        path = home + path[1:]
    return os.path.normpath(os.path.join(cwd, path))


def dotenv_unasked(home: str, xdg_config: str | None) -> list[tuple[str, str]]:
    """(directory, the configuration saying so) of every place where direnv loads a
    ``.env`` without asking: its configuration sets ``load_dotenv`` and whitelists the
    place (``[whitelist] prefix``, or ``exact``: an ``.envrc`` or its directory). Without a
    whitelist, direnv asks to allow each ``.env``'s content, as an ``.envrc``'s.
    :class:`UnreadableConfig` when the configuration is there but cannot be read."""
    base = os.path.join(xdg_config or os.path.join(home, ".config"), "direnv")
    for name in ("direnv.toml", "config.toml"):
        path = os.path.join(base, name)
        if os.path.isfile(path):
            break
    else:
        return []
    import tomllib  # lazy: only a direnv.toml is read

    try:
        data = tomllib.loads(_read(path))
    except tomllib.TOMLDecodeError as exc:
        raise UnreadableConfig(path, f"cannot be read as TOML: {exc}") from None
    settings, whitelist = data.get("global", {}), data.get("whitelist", {})
    if not isinstance(settings, dict) or settings.get("load_dotenv") is not True:
        return []
    places: list[tuple[str, str]] = []
    for key in ("prefix", "exact"):
        values = whitelist.get(key, []) if isinstance(whitelist, dict) else []
        for value in values if isinstance(values, list) else []:
            if isinstance(value, str):
                place = _resolve(value, home, home)
                if key == "exact" and not os.path.isdir(place):
                    place = os.path.dirname(place)
                places.append((place, path))
    return places

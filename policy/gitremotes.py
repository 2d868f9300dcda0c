"""Where git really sends: a remote argument resolved to every URL git would contact.

A configured remote (``origin``, or even ``https://host/x`` when the config has a remote of
that name, which git then prefers to the URL) is resolved by git itself from the
repository's config: ``git remote get-url --all`` for a fetch, pull or clone (its ``url``
values, rewritten by ``url.<base>.insteadOf``), ``git remote get-url --push --all`` for a
push (its ``pushurl`` values, or its ``url`` values rewritten by
``url.<base>.pushInsteadOf``, else by ``insteadOf``). A value that names no configured
remote is taken by git as a URL or a path, and rewritten the same way: ``git ls-remote
--get-url`` for a fetch, and for a push ``git remote -v`` of a remote given on the command
line with the value as its URL (git's own choice of ``pushInsteadOf``, which it prints
nowhere else without contacting the remote). A clone is resolved outside any repository:
``git clone`` reads only the user's and system config, never that of a repository its
target lies in. A repository whose own config sends the connection elsewhere than the
URL's host (``http.proxy``, ``http.curloptResolve``, ``remote.<name>.proxy``) or has a
program of its choosing make it (``core.sshCommand``, ``core.gitProxy``,
``remote.<name>.vcs``) gets ``("",)`` for every remote: the URL no longer says where git goes.
The user's own and the system's config are the user's choice and are not counted.

git runs here as the trusted process on a repository the agent may have written: with no
shell, a 5 s timeout, never with a value that starts with ``-``, with hooks and fsmonitor
switched off and the caller's ``GIT_*`` variables dropped. These commands only read config
(no hook, fsmonitor, ``core.sshCommand`` or credential helper is reached by them; the
switches are there in case a later git does). When git cannot say, the answer is ``("",)``:
a domain no allowlist matches, so the call is not allowed by its URL.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from typing import Literal

Direction = Literal["push", "fetch", "both"]

_SAFE = ("-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null")
_UNKNOWN = ("",)
_NO_REMOTE = re.compile(r"^(error: No such remote|fatal: not a git repository)", re.MULTILINE)
_FETCH_WORDS = {"fetch", "pull", "clone", "ls", "lsremote"}


def _words(name: str) -> set[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name)
    return {w for w in re.split(r"[^A-Za-z0-9]+", spaced.lower()) if w}


def direction_of(tool: str) -> Direction:
    """Which of a remote's URLs a tool reaches, by its name: a push its push URLs, a
    fetch, pull, clone or ls-remote its fetch URLs, any other tool (or one named for both)
    both.

    >>> direction_of("git_push"), direction_of("gitPull"), direction_of("git_remote")
    ('push', 'fetch', 'both')
    >>> direction_of("fetch_and_push")
    'both'
    """
    parts = _words(tool)
    pushes, fetches = "push" in parts, bool(parts & _FETCH_WORDS)
    if pushes != fetches:
        return "push" if pushes else "fetch"
    return "both"  # neither, or both (``sync``, ``pull_and_push``)


def _git(repo_dir: str, *args: str) -> subprocess.CompletedProcess[str] | None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_TERMINAL_PROMPT="0", LC_ALL="C")
    try:
        return subprocess.run(
            ["git", "-C", repo_dir, *_SAFE, *args],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
            env=env,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError):
        return None


def _lines(done: subprocess.CompletedProcess[str] | None) -> tuple[str, ...] | None:
    if done is None or done.returncode != 0:
        return None
    found = tuple(line for line in done.stdout.splitlines() if line)
    return found or None


def _pushed(repo_dir: str, value: str) -> tuple[str, ...] | None:
    """Where git pushes the URL or path ``value``, asked of git itself: ``value`` given as
    the URL of a remote of an unguessable name on the command line, whose push URL
    ``git remote -v`` prints as git rewrites it (``pushInsteadOf``, even one with an empty
    prefix, chosen as git chooses among equal prefixes; else ``insteadOf``)."""
    import secrets  # lazy: only a push URL asked of git needs a name

    probe = f"ironcurtain-probe-{secrets.token_hex(8)}"
    done = _git(repo_dir, "-c", f"remote.{probe}.url={value}", "remote", "-v")
    if done is None or done.returncode != 0:
        return None
    mine = f"{probe}\t"
    found = tuple(
        line[len(mine) : -len(" (push)")]
        for line in done.stdout.splitlines()
        if line.startswith(mine) and line.endswith(" (push)")
    )
    return found or None


def _literal(repo_dir: str, value: str, direction: Direction) -> tuple[str, ...]:
    fetch = _lines(_git(repo_dir, "ls-remote", "--get-url", value))
    if fetch is None:
        return _UNKNOWN
    urls = dict.fromkeys(fetch if direction != "push" else ())
    if direction != "fetch":
        pushed = _pushed(repo_dir, value)
        if pushed is None:
            return _UNKNOWN
        urls.update(dict.fromkeys(pushed))
    return tuple(urls)


# Repository config that sends git's connection somewhere other than the URL's host (a
# proxy, a pinned address) or has a program of its choosing make it (ssh, git://, a helper).
_REDIRECTS = (
    r"^(http\.(.+\.)?(proxy|curloptresolve)|remote\..+\.(proxy|vcs)"
    r"|core\.(sshcommand|gitproxy))$"
)


def _redirected(repo_dir: str) -> bool:
    """Whether the repository's own config (not the user's or the system's) names a
    :data:`_REDIRECTS` key; True when git cannot say."""
    done = _git(repo_dir, "config", "-z", "--show-scope", "--get-regexp", _REDIRECTS)
    if done is None or done.returncode not in (0, 1):  # 1: no such key
        return True
    scopes = done.stdout.split("\0")[0::2]
    return any(scope not in ("", "global", "system") for scope in scopes)


def _named(repo_dir: str, value: str, direction: Direction) -> tuple[str, ...] | None:
    """The URLs of a configured remote; None when ``value`` names none."""
    found: dict[str, None] = {}
    for push in (False, True):
        if (direction == "push") != push and direction != "both":
            continue
        done = _git(repo_dir, "remote", "get-url", *(["--push"] if push else []), "--all", value)
        if done is not None and done.returncode in (2, 128) and _NO_REMOTE.search(done.stderr):
            return None  # git takes the value for a URL or a path
        urls = _lines(done)
        if urls is None:
            return _UNKNOWN
        found.update(dict.fromkeys(urls))
    return tuple(found)


def _repo_dir(all_args: Mapping[str, object], cwd: str | None) -> str | None:
    """The repository the call names (``repo_path``, else ``path``), else ``cwd``; None
    for a relative path, which the server takes from where it works, not known here."""
    repo = all_args.get("repo_path", all_args.get("path"))
    if isinstance(repo, str):
        return repo if os.path.isabs(repo) else None
    return cwd or "."


def resolve_git_remote(
    value: str, all_args: Mapping[str, object], cwd: str | None = None, tool: str = ""
) -> tuple[str, ...]:
    """Every URL git would contact for the remote argument ``value`` of ``tool`` (see the
    module comment), in the repository named by the ``repo_path`` or ``path`` argument, else
    ``cwd``; ``("",)`` when that cannot be known or ``value`` looks like an option."""
    if not value or value.startswith("-") or not value.isprintable():
        return _UNKNOWN  # an option, or a line break or NUL git's output cannot be read by
    repo_dir = _repo_dir(all_args, cwd)
    if repo_dir is None:
        return _UNKNOWN
    if not os.path.isdir(repo_dir) or "clone" in _words(tool):
        repo_dir = "/"  # a clone reads only the user's and system config
    direction = direction_of(tool)
    # Even a URL may name a configured remote (``[remote "https://host/x"]``): git then
    # sends to that remote's URLs, so the configured remote is asked for first.
    if _redirected(repo_dir):
        return _UNKNOWN
    named = _named(repo_dir, value, direction)
    return named if named is not None else _literal(repo_dir, value, direction)


def _config(repo_dir: str, key: str) -> str | None:
    done = _git(repo_dir, "config", "--get", "--", key)
    value = done.stdout.strip() if done is not None and done.returncode == 0 else ""
    return value or None


def resolve_default_remote(
    all_args: Mapping[str, object], cwd: str | None = None, tool: str = ""
) -> tuple[str, ...]:
    """Every URL git would contact for ``tool`` when the call names no remote: ``origin``
    (the default a server fills in) and the remote git picks itself, ``branch.<current>.
    pushRemote``, ``remote.pushDefault`` (a push only) or ``branch.<current>.remote``."""
    repo_dir = _repo_dir(all_args, cwd)
    if repo_dir is None or not os.path.isdir(repo_dir):
        return _UNKNOWN
    done = _git(repo_dir, "symbolic-ref", "-q", "--short", "HEAD")
    branch = done.stdout.strip() if done is not None and done.returncode == 0 else ""
    keys = [f"branch.{branch}.remote"] if branch else []
    if direction_of(tool) != "fetch":
        keys[:0] = [*([f"branch.{branch}.pushRemote"] if branch else []), "remote.pushDefault"]
    names = dict.fromkeys(["origin"])
    names.update(dict.fromkeys(v for key in keys if (v := _config(repo_dir, key)) is not None))
    found: dict[str, None] = {}
    for name in names:
        found.update(dict.fromkeys(resolve_git_remote(name, all_args, cwd, tool)))
    return tuple(found)

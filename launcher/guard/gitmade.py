"""What git itself lays down in a repository it makes (``git init``, ``git clone``) in a
writable root, told by content from what a sandbox plants there.

git copies its template directory into every repository it makes: a ``hooks`` directory of
``*.sample`` scripts no git runs, ``description``, ``info/exclude``; and it writes a
``config`` of a few settings (the repository's format, the remote it cloned from, the
branch that follows it). The catalogue names ``hooks`` and ``config`` of a repository,
since what is in them is run; here they are admitted when what is in them is exactly that:

- a ``hooks`` directory (a real one, never a symlink) whose every entry is a regular file
  of its own (one link) named as one of the host git's template samples and byte-identical
  to it (a prefix while git is still copying it; whole at the session's sweep). Any other
  entry, made then or later (a hook by an active name, a sample renamed to one, a sample
  that differs from git's, a link, a directory), moves the whole directory out, whatever
  template directory the server pointed git at;
- a ``config`` (a regular file of its own) holding, as git reads it, only settings git
  writes when it makes a repository or adds a remote; a ``core.hooksPath``,
  ``core.fsmonitor``, an include, an alias or any other setting moves it out. For a
  configuration the user had at the start, its other settings may stay as they were.

What is admitted is looked at again at the end of every settle, and strictly at the sweep: a
hook whenever its identity (device, inode, change time) changed, a configuration whenever
its bytes did too. A store through a shared mapping of a page already made writable changes
a file with no inotify event and no new change time; a sample so changed is not run by git
(renaming it is an event), a configuration is read at once.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
from collections.abc import Callable

from launcher.host import nofollow
from launcher.host.nofollow import Parts, open_chain
from launcher.host.oscalls import open_dir
from sandbox_profiles import autorun
from sandbox_profiles.gitconfig import GitConfigError, git_prefix, parse_config
from sandbox_profiles.present import CHANGED_BY_GIT_LIMIT
from sandbox_profiles.regular_file import UNTRUSTED, NotRegular, read_regular

Identity = tuple[int, int, int]
# No sample git ships is near this; no configuration git makes for a clone either.
MAX_SAMPLE_BYTES = 64 * 1024
MAX_CONFIG_BYTES = CHANGED_BY_GIT_LIMIT

# Settings git writes when it makes a repository (init, clone) or adds a remote, by
# section; True: the section takes a subsection (``remote "origin"``).
WRITTEN_BY_GIT: dict[str, tuple[bool, frozenset[str]]] = {
    "core": (
        False,
        frozenset(
            (
                "repositoryformatversion",
                "filemode",
                "bare",
                "logallrefupdates",
                "ignorecase",
                "precomposeunicode",
                "symlinks",
                "sharedrepository",
            )
        ),
    ),
    "extensions": (False, frozenset(("objectformat",))),
    "remote": (
        True,
        frozenset(("url", "pushurl", "fetch", "push", "mirror", "tagopt", "prune", "prunetags")),
    ),
    "branch": (True, frozenset(("remote", "pushremote", "merge", "rebase", "description"))),
}
# Transports that run a command of the URL's choosing.
_COMMAND_TRANSPORTS = ("ext::", "fd::")
# Settings git takes a URL from: a branch's remote (or push remote) that names no remote is
# a URL to git.
_URL_KEYS = frozenset(
    (("remote", "url"), ("remote", "pushurl"), ("branch", "remote"), ("branch", "pushremote"))
)


@functools.cache
def template_hooks(directory: str | None = None) -> dict[str, bytes]:
    """The sample hooks of the host git's own templates (``<prefix>/share/git-core/
    templates/hooks``), by name; empty when there are none."""
    where = directory or os.path.join(git_prefix(), "share", "git-core", "templates", "hooks")
    found: dict[str, bytes] = {}
    try:
        names = os.listdir(where)
    except OSError:
        return found
    for name in names:
        path = os.path.join(where, name)
        if name.endswith(".sample") and os.path.isfile(path) and not os.path.islink(path):
            with open(path, "rb") as handle:
                found[name] = handle.read(MAX_SAMPLE_BYTES + 1)
    return found


# The trusted process short of descriptors or memory: says nothing of the file.
_SHORT = (errno.EMFILE, errno.ENFILE, errno.ENOMEM)


def read_own(
    root: str, parts: Parts, limit: int, short_ok: bool = True
) -> tuple[bytes, Identity] | None:
    """The bytes and identity of ``root/parts`` when it is a regular file with no other name
    (one link), of at most ``limit`` bytes, reached without following a symlink; else None
    (also when the trusted process is short of descriptors, unless ``short_ok`` is false:
    then that OSError is raised). A file git replaced while it was being looked at (renamed
    over: no link left) is looked at again, as what is there now."""
    for _ in range(8):
        try:
            found = _read_once(root, parts, limit)
        except OSError:
            if short_ok:
                return None
            raise
        if not isinstance(found, str):
            return found
    return None


def _read_once(root: str, parts: Parts, limit: int) -> tuple[bytes, Identity] | str | None:
    """As :func:`read_own`, once; an OSError only when the trusted process is short."""
    try:
        parent = open_chain(root, parts[:-1]) if parts[:-1] else open_dir(root)
    except OSError as exc:
        if exc.errno in _SHORT:
            raise
        return None
    try:
        fd = os.open(parts[-1], UNTRUSTED | os.O_NOFOLLOW, dir_fd=parent)
    except OSError as exc:
        if exc.errno in _SHORT:
            raise
        return None
    finally:
        os.close(parent)
    try:
        st = os.fstat(fd)
        if st.st_nlink == 0:
            return "replaced"
        if st.st_nlink != 1:  # a second name: its content is not this tree's alone
            return None
        data, st = read_regular(fd, limit)
        return data, (st.st_dev, st.st_ino, st.st_ctime_ns)
    except (OSError, NotRegular):
        return None
    finally:
        os.close(fd)


def hook_verdict(name: str, data: bytes | None, whole: bool) -> str | None:
    """Why an entry of a hooks directory git made is not git's own (None: it is). ``data``
    is None when it is not a regular file of its own; ``whole``: a prefix (git still
    copying) is not enough.

    >>> sample = next(iter(template_hooks()))
    >>> hook_verdict(sample, template_hooks()[sample][:10], whole=False) is None
    True
    >>> hook_verdict(sample, template_hooks()[sample][:10], whole=True)
    "differs from git's own sample of that name"
    >>> hook_verdict("pre-commit", b"", whole=False)
    'a hook git does not lay down (not one of its own samples)'
    """
    template = template_hooks().get(name)
    if template is None:
        return "a hook git does not lay down (not one of its own samples)"
    if data is None:
        return "not a regular file of its own (a link, a directory, another name of a file)"
    if data == template or (not whole and template.startswith(data)):
        return None
    return "differs from git's own sample of that name"


def config_verdict(text: str, before: str | None = None) -> str | None:
    """Why a repository's configuration is not one git writes (None: it is): a setting
    outside :data:`WRITTEN_BY_GIT`, unless ``before`` (the user's at the start) held the
    very same ones, in the same order; a remote URL that runs a command.

    >>> config_verdict('[core]\\n\\tbare = false\\n[remote "o"]\\n\\turl = /r.git')
    >>> config_verdict("[core]\\n\\tbare = false\\n\\thooksPath = h")
    'core.hookspath: not a setting git writes when it makes a repository'
    >>> config_verdict("[alias]\\n st = !sh\\n[core]\\n bare = 1", "[alias]\\n st = !sh")
    >>> config_verdict('[remote "x"]\\n url = ext::sh -c id')
    'remote.x.url: a URL that runs a command'
    >>> config_verdict('[branch "main"]\\n pushRemote = ext::sh -c id')
    'branch.main.pushremote: a URL that runs a command'
    """
    try:
        entries = parse_config(text)
        theirs = [e for e in parse_config(before) if not _written(e)] if before else []
    except GitConfigError:
        return "a configuration git would refuse to read"
    for section, subsection, key, value in entries:
        if (section, key) in _URL_KEYS and value and _runs_a_command(value):
            return f"{section}.{subsection}.{key}: a URL that runs a command"
    if before:
        redirected = _redirected(entries, parse_config(before))
        if redirected is not None:
            return redirected
    others = [e for e in entries if not _written(e)]
    if others == theirs:
        return None
    at = next(i for i in range(max(len(others), len(theirs))) if _at(others, i) != _at(theirs, i))
    section, subsection, key, _ = _at(others, at) or _at(theirs, at) or ("", None, "", None)
    name = ".".join(p for p in (section, subsection, key) if p is not None)
    if before:
        return f"{name}: not a setting git writes when it makes a repository or adds a remote"
    return f"{name}: not a setting git writes when it makes a repository"


ConfigEntry = tuple[str, str | None, str, str | None]


def _redirected(entries: list[ConfigEntry], before: list[ConfigEntry]) -> str | None:
    """Why a change to the user's own configuration would send the user's own git elsewhere
    (None: it would not). What was there at the start stays as it was: a remote's URL, push
    URL or refspecs, a branch's remote, push remote or merge (a push to the server's
    address, a pull of its commits, a fetch that overwrites the user's branches). Added: a
    remote of a new name, and a branch that follows a remote there at the start (or a local
    branch, ``.``) without a push remote of its own: what ``git remote add`` and ``git push
    -u`` write.

    >>> origin = '[remote "origin"]\\n url = /good.git\\n'
    >>> start = parse_config(origin)
    >>> _redirected(parse_config(origin + " pushurl = /evil"), start)
    'remote.origin: changed from what it was at the start (it would send your git elsewhere)'
    >>> _redirected(parse_config(origin + '[remote "o2"]\\n url = /x'), start)
    >>> _redirected(parse_config(origin + '[branch "f"]\\n remote = origin'), start)
    >>> _redirected(parse_config(origin + '[branch "f"]\\n remote = o2'), start)
    'branch.f.remote: o2 is not a remote there at the start'
    """

    def group(entries: list[ConfigEntry], key: tuple[str, str | None]) -> list[ConfigEntry]:
        return [e for e in entries if (e[0], e[1]) == key and _written(e)]

    had = {(e[0], e[1]) for e in before if _written(e)}
    for place in had:
        if group(entries, place) != group(before, place):
            name = ".".join(p for p in place if p is not None)
            return (
                f"{name}: changed from what it was at the start (it would send your git elsewhere)"
            )
    remotes = {e[1] for e in before if e[0] == "remote" and e[1] is not None} | {"."}
    for section, subsection, key, value in entries:
        if section != "branch" or ("branch", subsection) in had:
            continue
        if key == "pushremote":
            return f"branch.{subsection}.pushremote: a push remote the user did not set"
        if key == "remote" and value not in remotes:
            return f"branch.{subsection}.remote: {value} is not a remote there at the start"
    return None


def _runs_a_command(url: str) -> bool:
    return url.lower().startswith(_COMMAND_TRANSPORTS) or url.startswith("-")


def _written(entry: ConfigEntry) -> bool:
    section, subsection, key, _ = entry
    rule = WRITTEN_BY_GIT.get(section)
    return rule is not None and (subsection is not None) == rule[0] and key in rule[1]


def _at(entries: list[ConfigEntry], i: int) -> ConfigEntry | None:
    return entries[i] if i < len(entries) else None


def kind_of(parts: Parts, entry: autorun.Entry) -> str | None:
    """``hooks`` or ``config`` for the catalogue's entries of a repository git may make."""
    last = autorun.fold(parts[-1])
    if entry.match == ".git/hooks" or (entry is autorun.GIT_DIR_ENTRY and last == "hooks"):
        return "hooks"
    if entry.match == ".git/config" or (entry is autorun.GIT_DIR_ENTRY and last == "config"):
        return "config"
    return None


Quarantine = Callable[[str, Parts, str], None]
# Told when the user's own configuration was changed as git never changes it: the writers
# of that root are to be stopped (root, path, why).
Stop = Callable[[str, str, str], None]


class GitMade:
    """The hooks directories and files of repositories git made during a session, admitted
    by content; what stops being git's own is handed to ``quarantine``."""

    def __init__(self, quarantine: Quarantine, stop: Stop | None = None) -> None:
        self._quarantine = quarantine
        self._stop = stop
        self.hooks_dirs: dict[str, Identity] = {}
        # path -> (root, parts, "hook" or "config", identity when last found git's own)
        self.files: dict[str, tuple[str, Parts, str, Identity]] = {}
        self.before: dict[str, str] = {}  # the configurations there at the start: their text
        self.seen: dict[str, bytes] = {}  # each configuration's bytes, when last found git's
        self.holders: set[str] = set()  # directories holding an admitted configuration

    def note_start(self, root: str, parts: Parts, entry: autorun.Entry) -> bool:
        """``root/parts`` is the user's at the start: a configuration's text is kept, to
        tell what git changes in it (a remote added) from anything else, and to put it back
        when something else changes it. True when its changes in place are to be seen."""
        if kind_of(parts, entry) != "config":
            return False
        path = os.path.join(root, *parts)
        found = read_own(root, parts, MAX_CONFIG_BYTES)
        if found is None:
            return False
        self.before[path] = found[0].decode("utf-8", "surrogateescape")
        self.files[path] = (root, parts, "config", found[1])
        self.seen[path] = found[0]
        self.holders.add(os.path.dirname(path))
        return True

    def in_hooks(self, path: str) -> bool:
        """Whether ``path`` is in a hooks directory admitted as git's."""
        return os.path.dirname(path) in self.hooks_dirs

    def admit(
        self, root: str, parts: Parts, entry: autorun.Entry, is_dir: bool, whole: bool = False
    ) -> bool:
        """Whether ``root/parts`` (a catalogue ``entry``) is what git lays down: a hooks
        directory (its entries that are not git's are moved out) or a configuration."""
        kind = kind_of(parts, entry)
        path = os.path.join(root, *parts)
        if kind == "hooks" and is_dir:
            identity = _identity(root, parts)
            if identity is None or not _is_dir(root, parts):
                return False
            names = _names(root, parts)
            if names is None:
                return False  # what is in it cannot be told: not taken as git's
            self.hooks_dirs[path] = identity
            for name in names:
                if self.check_hook(root, (*parts, name), whole):
                    break  # moved out whole
            return True
        if kind == "config" and not is_dir:
            reason = self._config_reason(root, parts)
            if reason is not None:
                self.refuse(root, parts, reason)
            return True  # admitted, or moved out (and the user's put back)
        return False

    def _config_reason(self, root: str, parts: Parts) -> str | None:
        path = os.path.join(root, *parts)
        found = read_own(root, parts, MAX_CONFIG_BYTES)
        if found is None:
            return "not a regular file of its own (a link, another name of a file, too large)"
        text = found[0].decode("utf-8", "surrogateescape")
        reason = config_verdict(text, self.before.get(path))
        if reason is None:
            self.files[path] = (root, parts, "config", found[1])
            self.seen[path] = found[0]
            self.holders.add(os.path.dirname(path))
        return reason

    def _config_same(self, root: str, parts: Parts, identity: Identity) -> bool:
        """Whether a configuration is, byte for byte, the one last found git's own (its
        identity alone does not tell: see the module's note on shared mappings). When the
        trusted process is short of descriptors it is taken as it was, until the next settle
        (the sweep looks at all of it)."""
        try:
            found = read_own(root, parts, MAX_CONFIG_BYTES, short_ok=False)
        except OSError:
            return True
        path = os.path.join(root, *parts)
        return found is not None and found[1] == identity and found[0] == self.seen.get(path)

    def check_hook(self, root: str, parts: Parts, whole: bool) -> bool:
        """Whether ``root/parts``, in an admitted hooks directory, is not one of git's
        samples: the whole directory is then moved out (a hooks directory is git's only
        when all of it is)."""
        path = os.path.join(root, *parts)
        found = read_own(root, parts, MAX_SAMPLE_BYTES)
        reason = hook_verdict(parts[-1], found and found[0], whole)
        if reason is None and found is not None:
            self.files[path] = (root, parts, "hook", found[1])
            return False
        hooks = os.path.dirname(path)
        self.hooks_dirs.pop(hooks, None)
        for gone in [p for p in self.files if os.path.dirname(p) == hooks]:
            del self.files[gone]
        self._quarantine(root, parts[:-1], f"hooks with {parts[-1]}: {reason}")
        return True

    def recheck(self, whole: bool = False) -> None:
        """Look again at what was admitted and has changed since (all of it, strictly, when
        ``whole``): what is no longer git's own is moved out."""
        for path, (root, parts, kind, identity) in list(self.files.items()):
            now = _identity(root, parts)
            if now is None:
                self.files.pop(path, None)
                if path in self.before:  # the user's, removed: put back
                    self._put_back(root, parts)
            elif kind == "hook":
                if now != identity or whole:
                    self.check_hook(root, parts, whole)
            elif (whole or not self._config_same(root, parts, identity)) and (
                reason := self._config_reason(root, parts)
            ) is not None:
                self.refuse(root, parts, reason)

    def refuse(self, root: str, parts: Parts, reason: str) -> None:
        """Move a configuration out; the user's, as it was at the start, is put back, and
        the writers of its root are stopped: until then it can be changed again as soon as
        it is put back, and the user's git, running meanwhile, may read it so changed."""
        path = os.path.join(root, *parts)
        self.files.pop(path, None)
        self._quarantine(root, parts, f"{parts[-1]} of a repository: {reason}")
        if path in self.before:
            self._put_back(root, parts)
            if self._stop is not None:
                self._stop(root, path, f"the repository's own configuration changed: {reason}")

    def _put_back(self, root: str, parts: Parts) -> None:
        """Write the user's configuration back as it was at the start (a new file renamed
        into place, through the directory's descriptor); nothing when its directory is gone."""
        path = os.path.join(root, *parts)
        try:
            parent = open_chain(root, parts[:-1]) if parts[:-1] else open_dir(root)
        except OSError:
            return
        data = self.before[path].encode("utf-8", "surrogateescape")
        try:
            _write_into(parent, parts[-1], data)
        finally:
            os.close(parent)
        identity = _identity(root, parts)
        if identity is not None:
            self.files[path] = (root, parts, "config", identity)
            self.seen[path] = data


def _write_into(parent: int, name: str, data: bytes) -> None:
    """``data`` as ``name`` in the directory ``parent``: a new file, renamed into place."""
    temporary = f".{name}.ironcurtain-{os.getpid()}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    with contextlib.suppress(FileNotFoundError):
        os.unlink(temporary, dir_fd=parent)
    fd = os.open(temporary, flags, 0o644, dir_fd=parent)
    try:
        os.write(fd, data)
        owner = os.fstat(parent)
        if os.geteuid() == 0:  # the directory's owner owns the file, as git made it
            os.fchown(fd, owner.st_uid, owner.st_gid)
    finally:
        os.close(fd)
    os.rename(temporary, name, src_dir_fd=parent, dst_dir_fd=parent)


def _identity(root: str, parts: Parts) -> Identity | None:
    try:
        return nofollow.identity(root, parts)
    except OSError:
        return None


def _is_dir(root: str, parts: Parts) -> bool:
    try:
        os.close(open_chain(root, parts))
    except OSError:
        return False
    return True


def _names(root: str, parts: Parts) -> list[str] | None:
    try:
        found = nofollow.entries(root, parts)
    except nofollow.Unreadable:
        return None
    return None if found is None else [name for name, _ in found]

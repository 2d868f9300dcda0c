"""Logins to remote servers, kept encrypted at rest.

One file per login (a server of the config, and the caller it is for in gateway mode) in an
owner-only directory of the user's state directory, encrypted with Fernet (AES-128-CBC and
HMAC-SHA256, from ``cryptography``) under a key kept in an owner-only file beside them. The
OS keyring is not used (ironcurtain does not depend on one): whoever can read the user's files
can read the key too, so the encryption keeps tokens out of backups, file listings, greps and
copies of single files, not away from the user's own account. Every file is written whole and
renamed into place, owner-only from its creation. A key or directory that others can read or
write is refused, loudly: the store is not used rather than trusted.

A login is a plain JSON object (:class:`Login` names its keys); nothing of it is ever logged
or printed by this module.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from launcher.host.no_dumps import keep_from_dumps
from launcher.shared import dirs

if TYPE_CHECKING:
    from cryptography.fernet import Fernet

STORE_DIR = "logins"
KEY_FILE = "key"
SUFFIX = ".login"


class Login(TypedDict, total=False):
    """What one login holds: whom it is for, the server it was made with (a login is used
    for that URL only), the authorization server that issued it, and what the OAuth client
    needs to use and refresh it (the tokens, the registered client, both metadata
    documents)."""

    server: str
    caller: str | None
    url: str
    issuer: str | None
    obtained: float
    expires_at: float | None
    tokens: dict[str, Any]
    client: dict[str, Any]
    resource_metadata: dict[str, Any] | None
    server_metadata: dict[str, Any] | None


def caller_key(issuer: str, name: str) -> str:
    """What a caller's logins are kept under: the issuer that vouches for it and its name
    (an issuer is a URL, with no space in it), so the same name from another issuer is
    another caller.

    >>> caller_key("https://idp.example", "alice")
    'https://idp.example alice'
    """
    return f"{issuer} {name}"


def caller_shown(key: str) -> str:
    """A caller's key (:func:`caller_key`) as people read it.

    >>> caller_shown("https://idp.example alice")
    "caller 'alice' of https://idp.example"
    """
    issuer, _, name = key.partition(" ")
    return f"caller {name!r} of {issuer}"


class StoreError(Exception):
    """The store cannot be used safely (or at all): why, in one line, naming the file."""


def store_dir() -> Path:
    return dirs.state_dir() / STORE_DIR


class TokenStore:
    """The logins of one user, in ``root`` (by default the state directory's)."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root if root is not None else store_dir()
        self._fernet: Fernet | None = None

    def path(self, server: str, caller: str | None = None) -> Path:
        """The file of a login: named by a digest, so no name is readable in a listing."""
        digest = hashlib.sha256(f"{caller or ''}\0{server}".encode()).hexdigest()[:32]
        return self.root / f"{digest}{SUFFIX}"

    def load(self, server: str, caller: str | None = None) -> Login | None:
        """The login of ``server`` (for ``caller``), or None when there is none."""
        path = self.path(server, caller)
        try:
            sealed = path.read_bytes()
        except FileNotFoundError:
            return None
        login = self._open(path, sealed)
        if login.get("server") != server or login.get("caller") != caller:
            raise StoreError(f"{path}: holds another login than its name says")
        return login

    def save(self, login: Login) -> None:
        """Write ``login`` whole (owner-only, renamed into place)."""
        self._ready()
        path = self.path(login["server"], login.get("caller"))
        sealed = self._key().encrypt(json.dumps(login).encode())
        _write_private(path, sealed)

    def remove(self, server: str, caller: str | None = None) -> bool:
        """Forget a login; whether there was one."""
        try:
            self.path(server, caller).unlink()
        except FileNotFoundError:
            return False
        return True

    def logins(self) -> list[Login]:
        """Every login kept (for ``auth status``)."""
        if not self.root.is_dir():
            return []
        self._checked_dir()
        found = [self._open(p, p.read_bytes()) for p in sorted(self.root.glob(f"*{SUFFIX}"))]
        return sorted(found, key=lambda login: (login.get("caller") or "", login["server"]))

    def lock_file(self, server: str, caller: str | None = None) -> Path:
        """The file a session locks while it refreshes a login, so two sessions of the user
        that share it refresh it once (a refresh token may be good for one use only)."""
        self._ready()
        return self.path(server, caller).with_suffix(".lock")

    # -- the key and the directory -------------------------------------------------------

    def _open(self, path: Path, sealed: bytes) -> Login:
        from cryptography.fernet import InvalidToken

        try:
            opened = json.loads(self._key().decrypt(sealed))
        except (InvalidToken, ValueError):
            raise StoreError(
                f"{path}: cannot be read with the key in {self.root / KEY_FILE} "
                "(the key was replaced, or the file damaged)"
            ) from None
        if not isinstance(opened, dict) or not isinstance(opened.get("server"), str):
            raise StoreError(f"{path}: not a login")
        login: Login = opened  # type: ignore[assignment]
        return login

    def _ready(self) -> None:
        os.makedirs(self.root, mode=0o700, exist_ok=True)
        self._checked_dir()

    def _checked_dir(self) -> None:
        _owner_only(self.root, os.stat(self.root, follow_symlinks=False), directory=True)

    def _key(self) -> Fernet:
        if self._fernet is None:
            from cryptography.fernet import Fernet

            # A process that can open the logins holds tokens: no core file, no reader.
            keep_from_dumps()
            self._ready()
            self._fernet = Fernet(self._key_bytes())
        return self._fernet

    def _key_bytes(self) -> bytes:
        """The key: read (checked owner-only), or made once (the first writer's wins)."""
        from cryptography.fernet import Fernet

        path = self.root / KEY_FILE
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            made = _write_private(path, Fernet.generate_key(), replace=False)
            if made:
                return path.read_bytes().strip()
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            raise StoreError(f"{path}: cannot be opened: {exc.strerror}") from None
        with os.fdopen(fd, "rb") as key:
            _owner_only(path, os.fstat(key.fileno()), directory=False)
            return key.read().strip()


def _owner_only(path: Path, st: os.stat_result, *, directory: bool) -> None:
    """Refuse ``path`` unless it is this user's own and nobody else may read or write it."""
    kind = stat.S_ISDIR(st.st_mode) if directory else stat.S_ISREG(st.st_mode)
    if not kind:
        raise StoreError(f"{path}: not a {'directory' if directory else 'regular file'}")
    if st.st_uid != os.geteuid():
        raise StoreError(f"{path}: belongs to another user (uid {st.st_uid})")
    if st.st_mode & 0o077:
        raise StoreError(
            f"{path}: others may use it (mode {stat.S_IMODE(st.st_mode):o}); "
            "make it owner-only (chmod go-rwx) or remove it"
        )


def _write_private(path: Path, data: bytes, *, replace: bool = True) -> bool:
    """Write ``data`` to ``path`` whole: an owner-only temporary file, synced, then renamed
    over it (or, with ``replace`` false, linked as it only if there is none yet; whether it
    was)."""
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".new-")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        if replace:
            os.replace(temporary, path)
            return True
        try:
            os.link(temporary, path)
        except FileExistsError:
            return False
        return True
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)

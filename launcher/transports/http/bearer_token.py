"""The bearer token of ``ironcurtain run --http``: stable per user, so a client entry written
once keeps working across restarts.

Where it comes from, first match wins:

1. ``--http-token-file FILE``: the file's content (surrounding white space dropped);
2. the environment variable ``IRONCURTAIN_HTTP_TOKEN``;
3. ``http-token`` in the user state directory, made on first use (32 random bytes, URL-safe
   text) with mode 0600; ``ironcurtain http-token --rotate`` replaces it.

A token file that others may read, or that is not a regular file this user owns, is refused:
whoever reads the token can call every tool the session offers.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from launcher.shared import dirs
from launcher.shared.user_errors import UsageError
from sandbox_profiles.records import frozen

ENV = "IRONCURTAIN_HTTP_TOKEN"
MIN_LENGTH = 16


def bearer(authorization: str) -> str:
    """The token of an ``Authorization`` header of the ``Bearer`` scheme, its name in any
    case (an authentication scheme is case-insensitive); '' when it is of another scheme
    or carries none.

    >>> [bearer(v) for v in ("Bearer abc", "bearer abc", "BEARER  abc ", "Basic abc", "Bearer")]
    ['abc', 'abc', 'abc', '', '']
    """
    scheme, _, token = authorization.strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


@frozen
class Token:
    """The bearer token ``--http`` clients must send, and where it came from."""

    value: str
    source: str  # how it was found, for the start-up report

    def __repr__(self) -> str:  # never in a traceback or a log by accident
        return f"Token(source={self.source!r})"


def default_path() -> Path:
    return dirs.state_dir() / "http-token"


def resolve(token_file: str | None, env: dict[str, str] | None = None) -> Token:
    """The token for this run, or a :class:`UsageError` naming what is wrong with it."""
    environ = os.environ if env is None else env
    if token_file is not None:
        return Token(_read(Path(token_file), "http_token_file"), f"from {token_file}")
    if environ.get(ENV):
        return Token(_check(environ[ENV], f"${ENV}"), f"from ${ENV}")
    path = default_path()
    if not path.exists() and not path.is_symlink():
        return Token(make(path), f"new, kept in {path}")
    return Token(_read(path), f"kept in {path}")


def make(path: Path) -> str:
    """Write a new token to ``path`` (owner-only, replacing one that is there) and return it."""
    value = secrets.token_urlsafe(32)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, (value + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, path)
    return value


def _read(path: Path, option: str | None = None) -> str:
    """The token in the file ``path``; refused (each problem names the file) as the
    setting ``option``'s, when that setting named the file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise UsageError(f"cannot read the token file {path}: {exc.strerror}", option) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UsageError(f"{path} is not a regular file", option)
        if info.st_uid != os.geteuid():
            raise UsageError(
                f"{path} belongs to uid {info.st_uid}, not to this user "
                f"({os.geteuid()}); a token another user controls is not used",
                option,
            )
        if info.st_mode & 0o077:
            raise UsageError(
                f"{path} can be read by others (mode {stat.S_IMODE(info.st_mode):o}); "
                f"make it owner-only: chmod 600 {path}",
                option,
            )
        text = os.read(fd, 4096).decode("utf-8", "replace")
    finally:
        os.close(fd)
    value = text.strip()
    problem = _problem(value)
    if problem is not None:
        raise UsageError(f"the token in {path} {problem}", option)
    return value


def _check(text: str, named: str) -> str:
    value = text.strip()
    problem = _problem(value)
    if problem is not None:
        raise UsageError(f"{named}: the token {problem}")
    return value


def _problem(value: str) -> str | None:
    """What makes ``value`` no token (None: it is one)."""
    if len(value) < MIN_LENGTH:
        return f"is too short (at least {MIN_LENGTH} characters)"
    if not value.isprintable() or any(c.isspace() for c in value):
        return "holds white space or control characters"
    return None


def read_secret(path: Path, option: str) -> str:
    """A secret kept in the file ``path`` as a token is (owner-only, a regular file of this
    user's, one printable word of at least :data:`MIN_LENGTH` characters), given by the
    setting ``option``; a :class:`UsageError` naming what is wrong with it."""
    return _read(path, option)

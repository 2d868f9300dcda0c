"""Reading a file someone else may have put there: opened so that opening it does nothing
(no waiting on a FIFO, no terminal taken over), read only when it is a regular file, and
never more than a limit. One reader for every file of a workspace, a configuration or a
record that ironcurtain reads without trusting: each caller says in its own words what a
refusal means for it (skipped, refused, fail closed).

>>> import tempfile, os
>>> d = tempfile.mkdtemp(); p = os.path.join(d, "f")
>>> fd = os.open(p, os.O_WRONLY | os.O_CREAT, 0o600); _ = os.write(fd, b"abc"); os.close(fd)
>>> fd = os.open(p, UNTRUSTED)
>>> read_regular(fd, 3)[0], os.close(fd)
(b'abc', None)
>>> fd = os.open(p, UNTRUSTED)
>>> try:
...     read_regular(fd, 2)
... except NotRegular as exc:
...     print(exc)
... finally:
...     os.close(fd)
larger than 2 bytes
"""

from __future__ import annotations

import os
import stat

UNTRUSTED = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
"""Open flags for a file another may have made: no wait, no controlling terminal, not
inherited. Add ``os.O_NOFOLLOW`` where a link must not be followed."""

_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symbolic link"))  # fmt: skip


def kind(mode: int) -> str:
    """What a file of ``mode`` is, said as a refusal names it ("a FIFO", ...)."""
    return next((name for test, name in _KINDS if test(mode)), "not a plain file")


class NotRegular(Exception):
    """The file is not read: ``kind`` (what it is, when it is no regular file) or ``size``
    (its size or a lower bound, when it is larger than the limit) says why."""

    def __init__(self, reason: str, kind: str | None = None, size: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.kind = kind
        self.size = size


def read_regular(fd: int, limit: int) -> tuple[bytes, os.stat_result]:
    """The bytes of the open ``fd`` and its ``fstat``, when it is a regular file of at most
    ``limit`` bytes (read to its end, in pieces, never more than ``limit + 1``);
    :class:`NotRegular` when it is anything else or larger. OSError as reading raises it."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        what = kind(st.st_mode)
        raise NotRegular(f"not a regular file ({what})", kind=what)
    if st.st_size > limit:
        raise NotRegular(f"larger than {limit} bytes", size=st.st_size)
    chunks: list[bytes] = []
    size = 0
    while chunk := os.read(fd, min(1 << 20, limit + 1 - size)):
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            raise NotRegular(f"larger than {limit} bytes", size=size)
    return b"".join(chunks), st

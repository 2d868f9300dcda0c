"""The shared state in Redis (``--state redis://...``), with redis-py (imported only here,
and only when a session is given a Redis URL).

Every key is under ``ironcurtain:``, in the database the URL names. Grants are a set per
scope and group, kept ``KEEP_FOR`` seconds after their last use; counts are sorted sets of
times, checked and added in one script (so two instances cannot both take the last place);
the sealing key is set once, by whichever instance comes first.

Losing the store is said once (one line, through ``say``), and so is finding it again; until
then every operation raises :class:`StateLost`. A call waits at most ``TIMEOUT`` seconds for
Redis: a store that stops answering holds a call that long, not for ever."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

from launcher.shared_state.store import KEEP_FOR, LEASE, StateLost

if TYPE_CHECKING:
    import redis

T = TypeVar("T")
PREFIX = "ironcurtain:"
TIMEOUT = 2.0  # seconds a Redis command may take, connecting included

# Count one event of KEYS[1] unless ARGV[1] fell within the last ARGV[2] seconds (by the
# Redis server's clock, the one clock every instance shares); ARGV[3]: this event's name.
_COUNT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[2]))
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], now, ARGV[3])
redis.call('PEXPIRE', KEYS[1], math.ceil(tonumber(ARGV[2]) * 1000))
return 1
"""
# Enter ARGV[1] into KEYS[1] for ARGV[3] seconds unless ARGV[2] are in (lapsed ones out).
_ENTER = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], math.ceil(tonumber(ARGV[3]) * 1000))
return 1
"""


class BadStateURL(ValueError):
    """A ``--state`` value that names no Redis this can use: what is wrong with it."""


def check_url(url: str) -> str:
    """``url`` if it names a Redis (``redis://``, ``rediss://`` or ``unix://``), else
    :class:`BadStateURL` saying what is expected.

    >>> check_url("redis://127.0.0.1:6379/0")
    'redis://127.0.0.1:6379/0'
    >>> check_url("http://127.0.0.1:6379")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    launcher.shared_state.redis_store.BadStateURL: expected redis://HOST[:PORT][/DB], ...
    """
    expected = "expected redis://HOST[:PORT][/DB], rediss://... (TLS) or unix:///PATH"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise BadStateURL(expected) from None
    if parts.scheme in ("redis", "rediss"):
        if not parts.hostname:
            raise BadStateURL(f"names no host; {expected}")
        db = parts.path.strip("/")
        if db and not db.isdigit():
            raise BadStateURL(f"the database {db!r} is not a number; {expected}")
        del port
        return url
    if parts.scheme == "unix" and parts.path.startswith("/") and not parts.netloc:
        return url
    raise BadStateURL(expected)


def shown(url: str) -> str:
    """``url`` as said to the operator: without its password."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    user = f"{parts.username}:***@" if parts.username else "***@"
    return parts._replace(netloc=user + host).geturl()


class RedisState:
    """:class:`~launcher.shared_state.store.SharedState` in Redis."""

    shared = True

    def __init__(self, url: str, say: Callable[[str], None]) -> None:
        import redis  # only for a session given a Redis URL

        self.where = shown(check_url(url))
        self._say = say
        self._errors: tuple[type[Exception], ...] = (redis.RedisError, OSError)
        self._client: redis.Redis = redis.Redis.from_url(
            url,
            socket_timeout=TIMEOUT,
            socket_connect_timeout=TIMEOUT,
            health_check_interval=0,
        )
        self._count = self._client.register_script(_COUNT)
        self._enter = self._client.register_script(_ENTER)
        self.lost = False
        self._key: bytes | None = None

    def _do(self, what: Callable[[], T], quiet: bool = False) -> T:
        """``what``, or :class:`StateLost` when Redis cannot do it; a loss and a recovery
        are said once each (``quiet``: not said, the one who asked says it)."""
        try:
            done = what()
        except self._errors as exc:
            if not self.lost and not quiet:
                self.lost = True
                self._say(
                    f"shared state {self.where} lost ({exc}): escalations are denied and no "
                    "approval is taken until it is back; the breaker and the callers' limits "
                    "count on this instance alone meanwhile"
                )
            raise StateLost(str(exc)) from None
        if self.lost:
            self.lost = False
            self._say(f"shared state {self.where} is back")
        return done

    def reachable(self) -> bool:
        try:
            return bool(self._do(self._client.ping))
        except StateLost:
            return False

    def sealing_key(self, quiet: bool = False) -> bytes:
        """Read once (it never changes), then kept."""
        if self._key is not None:
            return self._key
        name = PREFIX + "sealing-key"

        def made() -> bytes:
            self._client.set(name, secrets.token_bytes(32), nx=True)
            key: Any = self._client.get(name)
            return bytes(key or b"")

        key = self._do(made, quiet)
        if len(key) < 32:
            raise StateLost(f"its {name} is not a key ironcurtain made")
        self._key = key
        return key

    def _grants(self, scope: str, group: str) -> str:
        return f"{PREFIX}grants:{scope}:{group}"

    def granted(self, scope: str, group: str, item: str) -> bool:
        name = self._grants(scope, group)

        def look() -> bool:
            pipe = self._client.pipeline(transaction=False)
            pipe.sismember(name, item)
            pipe.expire(name, int(KEEP_FOR), xx=True)
            found: list[Any] = pipe.execute()
            return bool(found[0])

        return self._do(look)

    def grant(self, scope: str, group: str, item: str) -> None:
        name = self._grants(scope, group)

        def add() -> None:
            pipe = self._client.pipeline(transaction=True)
            pipe.sadd(name, item)
            pipe.expire(name, int(KEEP_FOR))
            pipe.execute()

        self._do(add)

    def revoke(self, scope: str, group: str) -> None:
        self._do(lambda: self._client.delete(self._grants(scope, group)))

    def count(self, key: str, limit: int, window: float) -> bool:
        args: list[str | float] = [limit, window, secrets.token_hex(8)]
        return bool(self._do(lambda: self._count(keys=[f"{PREFIX}count:{key}"], args=args)))

    def enter(self, key: str, token: str, most: int) -> bool:
        args: list[str | float] = [token, most, LEASE]
        return bool(self._do(lambda: self._enter(keys=[f"{PREFIX}in:{key}"], args=args)))

    def leave(self, key: str, token: str) -> None:
        self._do(lambda: self._client.zrem(f"{PREFIX}in:{key}", token))

    def first_use(self, mark: str, ttl: float) -> bool:
        name = f"{PREFIX}used:{mark}"
        return bool(self._do(lambda: self._client.set(name, 1, nx=True, px=int(ttl * 1000) + 1)))

    def close(self) -> None:
        self._client.close()


def connect(url: str, say: Callable[[str], None]) -> RedisState:
    """The shared state in Redis at ``url``, reached once (its sealing key read or made):
    :class:`StateLost` when it cannot be."""
    state = RedisState(url, say)
    try:
        state.sealing_key(quiet=True)
    except StateLost:
        state.close()
        raise
    return state

"""The shared state in Redis (``--state redis://...``), with redis-py (imported only here,
and only when a session is given a Redis URL).

Every key is under ``ironcurtain:<deployment>:``, in the database the URL names
(``<deployment>``: a digest of who may call the gateway, so that two deployments given one
Redis keep apart). Grants are a set per scope and group, kept ``KEEP_FOR`` seconds after
their last use; pattern approvals a hash per scope (id -> record), kept as long after the
scope's last look at them; counts are sorted sets of times, checked and added in one script
(so two instances cannot both take the last place); the sealing key is set once, by whichever
instance comes first, and every single use is marked only while that key is still there: a
Redis emptied (restarted without its data, flushed, its keys evicted) has forgotten which
handles were used, so the instances make a new key and what was sealed before is refused.
Every reply is checked to be one these commands give: anything else is a lost store, never
a yes.

Losing the store is said once (one line, through ``say``), and so is finding it again; until
then every operation raises :class:`StateLost`. A call waits at most ``TIMEOUT`` seconds for
Redis: a store that stops answering holds a call that long, not for ever."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

from launcher.shared_state.store import KEEP_FOR, LEASE, StateLost

if TYPE_CHECKING:
    import redis

T = TypeVar("T")
PREFIX = "ironcurtain:"
TIMEOUT = 2.0  # seconds a Redis command may take, connecting included
KEY_BYTES = 32  # the sealing key's length
# Seconds a Redis that stopped answering is not waited on again: meanwhile every operation
# fails closed at once, instead of holding the event loop ``TIMEOUT`` seconds each.
HUNG_FOR = 10.0

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
# Whether ARGV[1] is in the set KEYS[1] (1 or 0), which is then kept ARGV[2] seconds more.
_GRANTED = """
if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('EXPIRE', KEYS[1], ARGV[2])
return 1
"""
# Mark KEYS[1] used for ARGV[2] ms: 1 when it was not, 0 when it was; -1 when the sealing
# key KEYS[2] is not ARGV[1] (the store was emptied: what was used is not known).
_FIRST_USE = """
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return -1 end
if redis.call('SET', KEYS[1], '1', 'NX', 'PX', ARGV[2]) then return 1 end
return 0
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


class NotRedis(Exception):
    """A reply that is not one Redis gives to what was asked (or a value ironcurtain did
    not write): the store is not to be believed."""


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
    """:class:`~launcher.shared_state.store.SharedState` in Redis; ``deployment``: whose
    keys these are (:func:`~launcher.shared_state.store.deployment_of`)."""

    shared = True

    def __init__(self, url: str, say: Callable[[str], None], deployment: str = "") -> None:
        import redis  # only for a session given a Redis URL

        self.where = shown(check_url(url))
        self._say = say
        self._errors: tuple[type[Exception], ...] = (redis.RedisError, OSError)
        self._timeouts: tuple[type[Exception], ...] = (redis.TimeoutError, TimeoutError)
        self._hung_until = 0.0
        self._hung_why = ""
        self._client: redis.Redis = redis.Redis.from_url(
            url,
            socket_timeout=TIMEOUT,
            socket_connect_timeout=TIMEOUT,
            health_check_interval=0,
        )
        self._prefix = f"{PREFIX}{deployment}:" if deployment else PREFIX
        self._count = self._client.register_script(_COUNT)
        self._enter = self._client.register_script(_ENTER)
        self._granted = self._client.register_script(_GRANTED)
        self._first_use = self._client.register_script(_FIRST_USE)
        self.lost = False
        self._key: bytes | None = None

    def _do(self, what: Callable[[], T], quiet: bool = False) -> T:
        """``what``, or :class:`StateLost` when Redis cannot do it; a loss and a recovery
        are said once each (``quiet``: not said, the one who asked says it). A store that
        timed out is not waited on again for ``HUNG_FOR`` seconds."""
        if time.monotonic() < self._hung_until:
            raise StateLost(self._hung_why)
        try:
            done = what()
        except Exception as exc:  # the client's own failure on a reply it did not expect
            # (a server that is not Redis) is a store not to be believed, as a lost one is
            why = str(exc) if isinstance(exc, self._errors) else _not_redis(exc)
            if isinstance(exc, self._timeouts):
                self._hung_until = time.monotonic() + HUNG_FOR
                self._hung_why = f"{why}; not waited on again for {HUNG_FOR:g} s"
            if not self.lost and not quiet:
                self.lost = True
                self._say(
                    f"shared state {self.where} lost ({why}): escalations are denied and no "
                    "approval is taken until it is back; the breaker and the callers' limits "
                    "count on this instance alone meanwhile"
                )
            raise StateLost(why) from None
        if self.lost:
            self.lost = False
            self._say(f"shared state {self.where} is back")
        return done

    def _reply(self, script: Any, keys: list[str], args: list[Any]) -> int:
        """What ``script`` returned: one of the numbers it returns, or :class:`NotRedis`."""
        found = script(keys=keys, args=args)
        if type(found) is not int or found not in (-1, 0, 1):
            raise NotRedis(f"a reply no Redis gives to this: {found!r:.40}")
        return found

    def reachable(self) -> bool:
        try:
            return self._do(self._client.ping) is True  # PONG, as redis-py reads it
        except StateLost:
            return False

    def sealing_key(self, quiet: bool = False) -> bytes:
        """Read once (it never changes while the store keeps it), then kept."""
        if self._key is not None:
            return self._key
        return self._made_key(quiet)

    def _made_key(self, quiet: bool = False) -> bytes:
        """The sealing key in the store (made there first, when it has none), kept here."""
        name = self._prefix + "sealing-key"

        def made() -> bytes:
            self._client.set(name, secrets.token_bytes(KEY_BYTES), nx=True)
            key: Any = self._client.get(name)
            if not isinstance(key, bytes) or len(key) != KEY_BYTES:
                raise NotRedis(f"its {name} is not a key ironcurtain made")
            return key

        self._key = self._do(made, quiet)
        return self._key

    def _grants(self, scope: str, group: str) -> str:
        return f"{self._prefix}grants:{scope}:{group}"

    def granted(self, scope: str, group: str, item: str) -> bool:
        name, keep = self._grants(scope, group), int(KEEP_FOR)
        return self._do(lambda: self._reply(self._granted, [name], [item, keep])) == 1

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
        name = f"{self._prefix}count:{key}"
        return self._do(lambda: self._reply(self._count, [name], args)) == 1

    def enter(self, key: str, token: str, most: int) -> bool:
        args: list[str | float] = [token, most, LEASE]
        name = f"{self._prefix}in:{key}"
        return self._do(lambda: self._reply(self._enter, [name], args)) == 1

    def leave(self, key: str, token: str) -> None:
        self._do(lambda: self._client.zrem(f"{self._prefix}in:{key}", token))

    def first_use(self, mark: str, ttl: float) -> bool:
        """Marked only while the store still has the sealing key this instance seals with:
        else the store was emptied (which handles were used is forgotten), StateLost, and
        the key is made again (a state sealed before no longer opens anywhere)."""
        sealing = self.sealing_key()
        names = [f"{self._prefix}used:{mark}", self._prefix + "sealing-key"]
        args: list[Any] = [sealing, int(ttl * 1000) + 1]
        first = self._do(lambda: self._reply(self._first_use, names, args))
        if first == -1:
            self._made_key()
            raise StateLost("the store was emptied: which round states were used is not known")
        return first == 1

    def evicting(self) -> str | None:
        """The policy by which Redis evicts keys when full (None: it never does, or it
        does not say)."""
        try:
            found: Any = self._client.config_get("maxmemory*")
        except Exception:  # CONFIG refused (a managed Redis, an ACL): nothing to say
            return None
        policy = str(found.get("maxmemory-policy", "noeviction"))
        if str(found.get("maxmemory", "0")) == "0" or policy == "noeviction":
            return None
        return policy

    def _patterns(self, scope: str) -> str:
        return f"{self._prefix}patterns:{scope}"

    def patterns(self, scope: str) -> dict[str, str]:
        name = self._patterns(scope)

        def look() -> dict[str, str]:
            pipe = self._client.pipeline(transaction=False)
            pipe.hgetall(name)
            pipe.expire(name, int(KEEP_FOR), xx=True)
            found: list[Any] = pipe.execute()
            return _texts(found[0])

        return self._do(look)

    def add_pattern(self, scope: str, pid: str, record: str) -> None:
        name = self._patterns(scope)

        def add() -> None:
            pipe = self._client.pipeline(transaction=True)
            pipe.hset(name, pid, record)
            pipe.expire(name, int(KEEP_FOR))
            pipe.execute()

        self._do(add)

    def drop_pattern(self, scope: str, pid: str) -> bool:
        name = self._patterns(scope)

        def drop() -> bool:
            dropped = self._client.hdel(name, pid)
            if type(dropped) is not int or dropped not in (0, 1):
                raise NotRedis(f"a reply no Redis gives to HDEL: {dropped!r:.40}")
            return dropped == 1

        return self._do(drop)

    def every_pattern(self) -> dict[str, dict[str, str]]:
        head = self._patterns("")

        def every() -> dict[str, dict[str, str]]:
            found: dict[str, dict[str, str]] = {}
            for name in self._client.scan_iter(match=head + "*", count=1000):
                key = name.decode() if isinstance(name, bytes) else str(name)
                records = _texts(self._client.hgetall(key))
                if records:
                    found[key[len(head) :]] = records
            return found

        return self._do(every)

    def close(self) -> None:
        self._client.close()


def _not_redis(exc: Exception) -> str:
    """Why a store whose reply made its client fail is not believed."""
    said = str(exc) if isinstance(exc, NotRedis) else f"{type(exc).__name__}: {exc}"
    return f"it answers as no Redis does: {said}"


def _texts(found: Any) -> dict[str, str]:
    """A Redis hash as text (fields and values that are not UTF-8 are left out); a reply
    that is no hash is :class:`NotRedis`."""
    if not isinstance(found, dict):
        raise NotRedis(f"a reply no Redis gives to HGETALL: {found!r:.40}")
    texts: dict[str, str] = {}
    for field, value in found.items():
        try:
            texts[field.decode() if isinstance(field, bytes) else str(field)] = (
                value.decode() if isinstance(value, bytes) else str(value)
            )
        except UnicodeDecodeError:
            continue
    return texts


def connect(url: str, say: Callable[[str], None], deployment: str = "") -> RedisState:
    """The shared state of ``deployment`` in Redis at ``url``, reached once (its sealing key
    read or made): :class:`StateLost` when it cannot be."""
    state = RedisState(url, say, deployment)
    try:
        state.sealing_key(quiet=True)
    except StateLost:
        state.close()
        raise
    evicts = state.evicting()
    if evicts:
        say(
            f"WARNING: shared state {state.where} evicts keys when full (maxmemory-policy "
            f"{evicts}): a round state whose used mark it evicts can be taken again; set "
            "maxmemory-policy noeviction"
        )
    return state

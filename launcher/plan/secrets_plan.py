"""A server's brokered secrets, planned: each value read from where the config says, a
per-session sentinel the server is handed instead, and the hosts the value may go to.

Every mistake (a source that is missing or unreadable, a host the server may not reach, a
server with no egress proxy to broker through) is a :class:`ConfigError` naming the server
and the secret, never the value."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import field

from launcher.shared.user_errors import ConfigError
from policy.egress import EgressRules, check_host
from policy.urls import parse_ip, split_host_port
from sandbox_profiles.records import frozen

SENTINEL_PREFIX = "ironcurtain-sentinel-"
KEYRING_REFUSED = (
    "the OS keyring is not supported: no keyring library is installed with ironcurtain; "
    "use env:NAME or file:PATH"
)


@frozen
class Brokered:
    """One secret of a server: the variable that holds its sentinel inside the sandbox,
    the sentinel, the value (never printed), where it may go."""

    variable: str
    sentinel: str
    value: str = field(repr=False)
    hosts: tuple[tuple[str, int | None], ...]  # (lower-cased name, port or any)
    body: bool = False

    def goes_to(self, host: str, port: int) -> bool:
        return any(h == host and p in (None, port) for h, p in self.hosts)


def new_sentinel() -> str:
    """A value that is nobody's credential, unguessable, the same length every session."""
    import secrets  # lazy: only a session with brokered secrets makes one

    return SENTINEL_PREFIX + secrets.token_hex(16)


def _value(source: str, env: Mapping[str, str]) -> str:
    """The value ``source`` names; ValueError saying why it cannot be read."""
    kind, _, where = source.partition(":")
    if kind == "keyring":
        raise ValueError(KEYRING_REFUSED)
    if kind == "env":
        if where not in env:
            raise ValueError(f"ironcurtain's environment has no variable {where}")
        value = env[where]
    else:
        path = os.path.expanduser(where)
        try:
            with open(path, encoding="utf-8") as file:
                value = file.read()
        except (OSError, UnicodeDecodeError) as exc:
            why = getattr(exc, "strerror", None) or "not UTF-8 text"
            raise ValueError(f"cannot read the file {where!r}: {why}") from None
        value = value.removesuffix("\n").removesuffix("\r")
    if not value:
        raise ValueError(f"{source} is empty")
    if any(c in value for c in "\r\n\0"):
        raise ValueError(f"{source} holds a line break or NUL: not a credential a header can carry")
    if SENTINEL_PREFIX in value:
        # A sentinel is never swapped for another: such a value could never be sent.
        raise ValueError(
            f"{source} holds an ironcurtain sentinel, not a credential (read inside another "
            "ironcurtain sandbox?)"
        )
    return value


def _hosts(
    texts: list[str], rules: EgressRules | None
) -> tuple[tuple[tuple[str, int | None], ...], str | None]:
    """The secret's hosts parsed, and why one may not be (None: all may)."""
    found: list[tuple[str, int | None]] = []
    for text in texts:
        host, port = split_host_port(text)
        if not host or "*" in host or (port and not port.isdecimal()):
            return (), f"{text!r} is not a host name (a name or name:port, no wildcard)"
        number = int(port) if port else None
        if rules is None:
            return (), "the server has no allowedDomains: its secrets could go nowhere"
        # A name without a port: reachable on 443 or on a port an allowedDomains entry names.
        ports = [number] if number else [443, *(e.port for e in rules.allowed if e.port)]
        reasons = [check_host(rules, host, port).reason for port in ports]
        if None not in reasons:
            return (), f"{text!r} is outside the server's network: {reasons[0]}"
        # An address in any form a resolver reads is kept as the one the proxy is asked for.
        address = parse_ip(host)
        found.append((str(address) if address else host.lower().rstrip("."), number))
    return tuple(found), None


def plan_secrets(
    file: str,
    where: str,
    server_env: Mapping[str, str],
    configured: Mapping[str, object],
    rules: EgressRules | None,
    sandboxed: bool,
    env: Mapping[str, str] | None = None,
) -> tuple[Brokered, ...]:
    """Each of a server's ``secrets`` (``configured``, from its config at JSON path
    ``where``) read and checked, with its sentinel."""
    from launcher.host.no_dumps import keep_from_dumps
    from launcher.plan.config_schema import SecretConfig

    env = os.environ if env is None else env
    if configured:
        # No core file of this process, nor another of its user, ever reads the values.
        keep_from_dumps()
    out: list[Brokered] = []
    for variable, spec in configured.items():
        assert isinstance(spec, SecretConfig)
        at = f"{where}.secrets.{variable}"
        if not sandboxed:
            unsandboxed = "the server runs unsandboxed: no egress proxy can broker its secret"
            raise ConfigError(file, at, unsandboxed)
        if variable in server_env:
            raise ConfigError(file, at, f"{variable} is also in the server's env: give it once")
        if not spec.hosts:
            raise ConfigError(
                file, f"{at}.hosts", "Field required: the hosts the secret may be sent to"
            )
        hosts, problem = _hosts(spec.hosts, rules)
        if problem is not None:
            raise ConfigError(file, f"{at}.hosts", problem)
        try:
            value = _value(spec.from_, env)
        except ValueError as exc:
            raise ConfigError(file, f"{at}.from", str(exc)) from None
        out.append(Brokered(variable, new_sentinel(), value, hosts, spec.body))
    return tuple(out)


def read_secrets(file: str, where: str, configured: Mapping[str, object]) -> tuple[Brokered, ...]:
    """A remote server's ``secrets`` (``configured``, at JSON path ``where``) read now:
    ironcurtain itself sends each to the server's URL, so none has a sentinel or hosts (each
    is still a secret of the config: masked in what servers send, looked for in arguments)."""
    from launcher.host.no_dumps import keep_from_dumps
    from launcher.plan.config_schema import SecretConfig

    if configured:
        keep_from_dumps()
    out: list[Brokered] = []
    for variable, spec in configured.items():
        assert isinstance(spec, SecretConfig)
        try:
            value = _value(spec.from_, os.environ)
        except ValueError as exc:
            raise ConfigError(file, f"{where}.secrets.{variable}.from", str(exc)) from None
        out.append(Brokered(variable, "", value, ()))
    return tuple(out)

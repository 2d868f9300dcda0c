"""The gateway benchmark of scripts/bench.py: per call over ``--http``, a caller
authenticated by its JWT (gateway mode, an identity provider on loopback) against the same
call with the static bearer token, alternating, same run; and, in process, what checking a
token costs when it is first seen (its signature verified with the cached key) and when it
is seen again. Returns its summary line."""

from __future__ import annotations

import asyncio
import statistics
import time

from benchlib import HttpPeer, Scratch, compare

from launcher.transports.http.gateway.gatekeeper import Gatekeeper, verify
from launcher.transports.http.gateway.keys import gateway
from tests.support.idp import AUDIENCE, Key, identity_provider


def bench_gateway(quick: bool) -> str:
    calls, warm = (300, 30) if quick else (2000, 200)
    scratch = Scratch.make()
    env = scratch.env()
    argv = scratch.run_argv("--server", "time")
    args: dict[str, object] = {"timezone": "UTC"}
    print(f"per call over HTTP by how the caller is known, {calls} calls each, alternating")
    with identity_provider() as idp:
        oidc = ["--oidc-issuer", idp.issuer, "--oidc-audience", AUDIENCE]
        static = HttpPeer(argv, env)
        jwt_peer = HttpPeer(
            [*argv, *oidc], env, bearer=idp.token("bench-agent", exp=int(time.time()) + 3600)
        )
        a: list[float] = []
        b: list[float] = []
        try:
            for i in range(warm + calls):
                x = static.call("get_current_time", args)
                y = jwt_peer.call("get_current_time", args)
                if i >= warm:
                    a.append(x)
                    b.append(y)
        finally:
            static.close()
            jwt_peer.close()
            scratch.remove()
        label = "time: get_current_time over --http (direct = the static bearer token)"
        med, p99 = compare(label, a, b, ("static token", "JWT caller"))
        checks = _in_process(idp, 200 if quick else 2000)
    print("  checking a token in process (the key set cached)")
    for name, seconds in checks.items():
        print(f"    {name:34} {seconds * 1e6:8.1f} us")
    return (
        f"{med * 1000:+.3f} ms median, {p99 * 1000:+.3f} ms p99 over the static token; "
        f"first sight RS256 {checks['first sight, RS256'] * 1e6:.0f} us, "
        f"again {checks['seen again (any algorithm)'] * 1e6:.1f} us"
    )


def _in_process(idp: object, rounds: int) -> dict[str, float]:
    """Median seconds per check: each algorithm's token verified (a new token each time is
    what a first sight costs), and a token the gatekeeper has seen before."""
    from tests.support.idp import Provider

    assert isinstance(idp, Provider)
    out: dict[str, float] = {}
    for alg in ("RS256", "ES256", "EdDSA"):
        key = Key(alg)
        idp.keys = [key]
        gw = gateway(idp.issuer, AUDIENCE, None)
        token = idp.token("bench-agent", key=key)
        times = []
        for _ in range(rounds):
            start = time.perf_counter()
            verify(gw, token)
            times.append(time.perf_counter() - start)
        out[f"first sight, {alg}"] = statistics.median(times)
    keeper = Gatekeeper(gw, print)
    token = idp.token("bench-agent", key=idp.keys[0])

    async def again() -> float:
        await keeper.caller(token)
        times = []
        for _ in range(rounds):
            start = time.perf_counter()
            await keeper.caller(token)
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    out["seen again (any algorithm)"] = asyncio.run(again())
    return out

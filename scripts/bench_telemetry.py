"""The telemetry benchmark of scripts/bench.py: per call through ``ironcurtain run`` over
stdio, calls not exported against calls exported (``OTEL_EXPORTER_OTLP_ENDPOINT`` set to an
OTLP/HTTP receiver on loopback, tests/support/otlp.py), alternating, same run; and, in
process, what recording one call's span and counters costs. Returns its summary line."""

from __future__ import annotations

import statistics
import time

from benchlib import Peer, Scratch, compare

from launcher.audit.telemetry import Telemetry
from launcher.audit.telemetry_plan import TelemetryPlan
from tests.support.otlp import Receiver


def bench_telemetry(quick: bool) -> str:
    calls, warm = (300, 30) if quick else (2000, 200)
    scratch = Scratch.make()
    env = scratch.env()
    argv = scratch.run_argv("--server", "time")
    args: dict[str, object] = {"timezone": "UTC"}
    print(f"per call by whether it is exported, {calls} calls each, alternating")
    with Receiver() as receiver:
        off = Peer(argv, env)
        on = Peer(argv, {**env, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint})
        a: list[float] = []
        b: list[float] = []
        try:
            for i in range(warm + calls):
                x, y = off.call("get_current_time", args), on.call("get_current_time", args)
                if i >= warm:
                    a.append(x)
                    b.append(y)
        finally:
            off.close()
            on.close()
            scratch.remove()
        label = "time: get_current_time over stdio (direct = telemetry off)"
        med, p99 = compare(label, a, b, ("not exported", "exported"))
        exported = len(receiver.wait_for_spans(warm + calls, wait=10))
        recorded = _in_process(receiver.endpoint, 500 if quick else 5000)
    print(f"  spans received: {exported} of {warm + calls} calls")
    print(f"  recording one call (span and counters) in process: {recorded * 1e6:.1f} us")
    return (
        f"{med * 1000:+.3f} ms median, {p99 * 1000:+.3f} ms p99 exported; "
        f"ratio {statistics.median(b) / statistics.median(a):.2f}x; "
        f"recording {recorded * 1e6:.0f} us"
    )


def _in_process(endpoint: str, rounds: int) -> float:
    """Median seconds :meth:`Telemetry.call` takes for one call's audit entry."""
    import os

    os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
    telemetry = Telemetry(TelemetryPlan(endpoint), lambda text: None, "bench")
    entry = {
        "requestId": 7,
        "method": "tools/call",
        "server": "time",
        "tool": "get_current_time",
        "policy": {"decision": "allow", "rule": "allow-side-effect-free-tools", "reason": "r"},
        "escalation": None,
    }
    stamped = {"caller": {"name": "bench-agent", "issuer": "static"}}
    params = {"_meta": {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        telemetry.call(entry, "success", 1.234, params, stamped)
        times.append(time.perf_counter() - start)
    telemetry.stop()
    del os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"]
    return statistics.median(times)

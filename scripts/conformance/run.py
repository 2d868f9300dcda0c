"""The official MCP conformance suite's server scenarios, run for each requirement set
(2025-11-25: the handshake era; 2026-07-28: the stateless era) against a reference server
directly (its streamable-HTTP form) and through ``ironcurtain run --http`` (its stdio form,
sandboxed), then compared scenario by scenario. Exit 1 when, in either set, a scenario that
passes directly fails through ironcurtain, or when one that a handshake-era server passes
directly in the handshake era's set fails through ironcurtain in the stateless era's.
Called by scripts/conformance.sh, which installs what it needs.

The policy given to ironcurtain allows every tool and prompt of the server with every
argument opaque: this measures the proxy (transport, relay, server requests), not a policy.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from results import Comparison, Outcome, not_scored, read_results  # noqa: E402

from tests.support.ready import serving_url  # noqa: E402

BIN = Path(sys.executable).parent
REQUIREMENTS = ("2025-11-25", "2026-07-28")  # the handshake era's, the stateless era's


@dataclass
class Reference:
    """A reference server: how to serve it over HTTP directly, how to start its stdio form,
    and the directories its sandbox must be able to read."""

    name: str
    http: list[str]  # PORT in it is replaced by a free port; it serves /mcp
    stdio: list[str]
    reads: list[str]
    env: dict[str, str]


def references(node: str, npm_dir: Path, python_everything: Path | None) -> list[Reference]:
    everything = npm_dir / "node_modules" / "@modelcontextprotocol" / "server-everything"
    found = [
        Reference(
            "server-everything (npm)",
            [node, str(everything / "dist" / "index.js"), "streamableHttp"],
            [node, str(everything / "dist" / "index.js"), "stdio"],
            [str(npm_dir), str(Path(node).resolve().parent.parent)],
            {"PORT": "PORT"},
        )
    ]
    if python_everything is not None:
        package = str(python_everything.resolve())
        found.append(
            Reference(
                "mcp_everything_server (python SDK)",
                [sys.executable, "-m", "mcp_everything_server", "--port", "PORT"],
                [sys.executable, "-c", "from mcp_everything_server.server import mcp; mcp.run()"],
                [package],
                {"PYTHONPATH": package},
            )
        )
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, proc: subprocess.Popen[bytes], seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited ({proc.returncode}) before listening")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on port {port} after {seconds:g} s")


def suite(npm_dir: Path) -> Path:
    return npm_dir / "node_modules" / "@modelcontextprotocol" / "conformance"


def conformance(
    node: str, npm_dir: Path, url: str, requirements: str, out: Path,
    env: dict[str, str] | None = None,
) -> dict[str, Outcome]:  # fmt: skip
    """Run every server scenario of a requirement set against ``url``; scenario -> outcome."""
    argv = [node, str(suite(npm_dir) / "dist" / "index.js"), "server", "--url", url,
            "--requirements", requirements, "-o", str(out)]  # fmt: skip
    subprocess.run(argv, env={**os.environ, **(env or {})}, capture_output=True, timeout=600)
    results = read_results(out)
    if not results:
        raise RuntimeError(f"the conformance suite reported nothing for {url} ({requirements})")
    return results


def direct(
    ref: Reference, node: str, npm_dir: Path, work: Path, sets: Sequence[str]
) -> dict[str, dict[str, Outcome]]:
    """Each requirement set's outcomes against the server's own HTTP form."""
    port = free_port()
    argv = [a.replace("PORT", str(port)) for a in ref.http]
    env = {**os.environ, **{k: v.replace("PORT", str(port)) for k, v in ref.env.items()}}
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, proc)
        url = f"http://localhost:{port}/mcp"
        return {r: conformance(node, npm_dir, url, r, work / f"direct-{r}") for r in sets}
    finally:
        proc.terminate()
        proc.wait(timeout=10)


async def _listing(ref: Reference) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    """The server's tools and prompts, as a client that can sample and elicit sees them."""
    import mcp_types as types
    from mcp import ClientSession, StdioServerParameters, stdio_client

    async def sample(context: object, params: object) -> types.CreateMessageResult:
        text = types.TextContent(type="text", text="")
        return types.CreateMessageResult(role="assistant", content=text, model="none")

    async def elicit(context: object, params: object) -> types.ElicitResult:
        return types.ElicitResult(action="decline")

    env = {**os.environ, **{k: v for k, v in ref.env.items() if v != "PORT"}}
    params = StdioServerParameters(command=ref.stdio[0], args=ref.stdio[1:], env=env)
    async with (
        stdio_client(params, errlog=open(os.devnull, "w")) as (read, write),
        ClientSession(read, write, sampling_callback=sample, elicitation_callback=elicit) as s,
    ):
        await s.initialize()
        tools = [t.model_dump(by_alias=True) for t in (await s.list_tools()).tools]
        prompts = [p.model_dump(by_alias=True) for p in (await s.list_prompts()).prompts]
    return tools, prompts


def write_policy(ref: Reference, directory: Path) -> None:
    """Annotations for every tool and prompt (each argument opaque) and one rule allowing
    every call."""
    tools, prompts = asyncio.run(_listing(ref))
    directory.mkdir(parents=True, exist_ok=True)

    def arguments(schema: object) -> dict[str, list[str]]:
        properties = schema.get("properties", {}) if isinstance(schema, dict) else {}
        return {name: ["none"] for name in properties}

    annotations = {
        "tools": [
            {"toolName": t["name"], "serverName": "everything", "effect": "other",
             "sideEffects": True, "args": arguments(t.get("inputSchema"))}
            for t in tools
        ],
        "prompts": [
            {"promptName": p["name"], "serverName": "everything", "effect": "read",
             "sideEffects": False,
             "args": {str(a["name"]): ["none"] for a in p.get("arguments") or []}}  # type: ignore[attr-defined]
            for p in prompts
        ],
    }  # fmt: skip
    (directory / "tool-annotations.json").write_text(
        json.dumps({"servers": {"everything": annotations}}, indent=1)
    )
    rule = {"name": "allow-everything", "if": {}, "then": "allow", "reason": "conformance"}
    (directory / "compiled-policy.json").write_text(json.dumps({"rules": [rule]}))


def through(
    ref: Reference, node: str, npm_dir: Path, work: Path, sets: Sequence[str]
) -> dict[str, dict[str, Outcome]]:
    """Each requirement set's outcomes through ironcurtain, a fresh instance for each set."""
    config = {
        "mcpServers": {
            "everything": {
                "command": ref.stdio[0],
                "args": ref.stdio[1:],
                "env": {k: v for k, v in ref.env.items() if v != "PORT"},
                "sandbox": {"filesystem": {"allowRead": ref.reads}},
                "clientRequests": {"elicitation": "allow", "sampling": "allow"},
            }
        }
    }
    write_policy(ref, work / "policy")
    return {r: _through_one(node, npm_dir, work, r, config) for r in sets}


def _through_one(
    node: str, npm_dir: Path, work: Path, requirements: str, config: dict[str, Any]
) -> dict[str, Outcome]:
    """One set through ironcurtain, with a config that names no era: ironcurtain speaks to
    a server of both eras in the era of the client whose request it serves."""
    place = work / f"through-{requirements}"
    (place / "ws").mkdir(parents=True)
    (work / "config.json").write_text(json.dumps(config, indent=1))
    token = secrets.token_urlsafe(24)
    env = {**os.environ, "IRONCURTAIN_HTTP_TOKEN": token, "XDG_STATE_HOME": str(place / "state"),
           "XDG_CONFIG_HOME": str(place / "config")}  # fmt: skip
    argv = [str(BIN / "ironcurtain"), "run", "--config", str(work / "config.json"),
            "--policy-dir", str(work / "policy"), "--workspace", str(place / "ws"),
            "--audit-log", str(place / "audit.jsonl"), "--server", "everything",
            "--approval", "deny", "--max-identical-calls", "0", "--http", "0"]  # fmt: skip
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, text=True)  # fmt: skip
    assert proc.stderr is not None
    url, said = serving_url(proc.stderr)
    # What it says from here on goes to a file: a pipe nobody reads would stop it when full.
    log = place / "ironcurtain.log"
    drain = threading.Thread(target=_copy, args=(proc.stderr, log, said), daemon=True)
    drain.start()
    try:
        if not url:
            raise RuntimeError("ironcurtain did not start:\n" + "".join(said))
        preload = {"NODE_OPTIONS": f"--import={HERE / 'preload.mjs'}",
                   "CONFORMANCE_URL": url, "CONFORMANCE_TOKEN": token,
                   "CONFORMANCE_CLI": str(suite(npm_dir) / "dist" / "index.js")}  # fmt: skip
        return conformance(node, npm_dir, url, requirements, place / "results", preload)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            print(f"ironcurtain did not stop within 15 s of SIGTERM (killed); see {log}")
        drain.join()


def _copy(stream: TextIO, log: Path, said: list[str]) -> None:
    with log.open("w") as out:
        out.writelines(said)
        for line in stream:
            out.write(line)


LEGEND = f"""
*            the suite's wire-schema-valid check failed: a message the server sent
             (through ironcurtain: that ironcurtain sent) breaks the revision's JSON schema
REGRESSION   passes directly, not through ironcurtain (same requirement set)
BY DESIGN    fails through ironcurtain only where it differs on purpose (the reason given)
NOT BRIDGED  passes directly in {REQUIREMENTS[0]} (not in {REQUIREMENTS[1]}: a server of the
             handshake era only), not through ironcurtain in {REQUIREMENTS[1]}"""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--node", required=True, help="a Node.js of version 22 or newer")
    parser.add_argument("--npm-dir", required=True, type=Path, help="where the suite is")
    parser.add_argument(
        "--python-everything",
        type=Path,
        help="also run the python SDK's conformance server (a directory holding its "
        "mcp_everything_server package)",
    )
    parser.add_argument(
        "--requirements",
        choices=REQUIREMENTS,
        action="append",
        help="run only this requirement set (default: both)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the results directory")
    opts = parser.parse_args(argv)
    everything = opts.python_everything
    if everything is not None and not (everything / "mcp_everything_server").is_dir():
        parser.error(f"--python-everything: {everything} holds no mcp_everything_server package")
    sets = [r for r in REQUIREMENTS if r in (opts.requirements or REQUIREMENTS)]
    work = Path(tempfile.mkdtemp(prefix="ironcurtain-conformance-"))
    regressions = unbridged = 0
    try:
        for number, ref in enumerate(references(opts.node, opts.npm_dir, opts.python_everything)):
            place = work / str(number)
            place.mkdir()
            started = time.monotonic()
            # Directly and through ironcurtain at once (each its own server and port).
            with ThreadPoolExecutor(2) as pool:
                at_once = [pool.submit(f, ref, opts.node, opts.npm_dir, place, sets)
                           for f in (direct, through)]  # fmt: skip
                a, b = (future.result() for future in at_once)
            took = time.monotonic() - started
            print(f"\n{ref.name}: requirements {' and '.join(sets)}, directly and through "
                  f"ironcurtain ({took:.0f} s)")  # fmt: skip
            for requirements in sets:
                yaml = suite(opts.npm_dir) / "requirements" / f"{requirements}.yaml"
                handshake = a.get(REQUIREMENTS[0], {}) if requirements == REQUIREMENTS[1] else {}
                both = Comparison(requirements, a[requirements], b[requirements],
                                  not_scored(yaml), handshake)  # fmt: skip
                print("\n" + "\n".join(both.table(f"{ref.name}: requirements {requirements}")))
                regressions += len(both.regressions())
                unbridged += len(both.unbridged())
    finally:
        if opts.keep:
            print(f"\nresults: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(LEGEND)
    if regressions or unbridged:
        print(f"\n{regressions} scenario(s) REGRESSION, {unbridged} NOT BRIDGED")
        return 1
    print("\nevery scenario that passes directly passes through ironcurtain")
    return 0


if __name__ == "__main__":
    sys.exit(main())

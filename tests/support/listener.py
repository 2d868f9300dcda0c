"""A plain HTTP listener on loopback, in a thread of the test: what an authorization server a
hostile remote server names would be (or the internal service it aims a login at). It
records every request that reaches it (method, path, headers, body) and answers each path as
told: a JSON document, an endless one, a :class:`Reply`, or what a function of the request
returns (the request as recorded, with ``target``, the path and query); else 404."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

ENDLESS = "endless"  # an answer: a JSON document that never ends


@dataclass
class Reply:
    """An answer of any status, with headers, and a JSON body or none."""

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: Any = None


@dataclass
class Listener:
    """A running listener: its port, what reached it, and what it answers (path -> JSON
    document, or :data:`ENDLESS`)."""

    port: int
    answers: dict[str, Any] = field(default_factory=dict)
    requests: list[dict[str, Any]] = field(default_factory=list)

    @property
    def paths(self) -> list[str]:
        return [r["path"] for r in self.requests]


def _handler(listener: Listener) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self) -> None:
            size = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(size).decode(errors="replace") if size else ""
            path = self.path.split("?", 1)[0]
            listener.requests.append(
                {"method": self.command, "path": path, "headers": dict(self.headers), "body": body}
            )
            answer = listener.answers.get(path)
            if callable(answer):
                answer = answer(listener.requests[-1] | {"target": self.path})
            if isinstance(answer, Reply):
                self._reply(answer)
                return
            if answer is None:
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            if answer == ENDLESS:
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(b'{"issuer": "')
                chunk = b"a" * 65536
                try:
                    while True:
                        self.wfile.write(chunk)
                except OSError:
                    return
            data = json.dumps(answer).encode()
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _reply(self, reply: Reply) -> None:
            data = b"" if reply.body is None else json.dumps(reply.body).encode()
            self.send_response(reply.status)
            for name, value in reply.headers.items():
                self.send_header(name, value)
            if reply.body is not None:
                self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _answer

        def log_message(self, format: str, *args: Any) -> None:
            del format, args

    return Handler


@contextmanager
def listening(answers: dict[str, Any] | None = None) -> Iterator[Listener]:
    """A listener on a free loopback port until the block ends."""
    listener = Listener(0, dict(answers or {}))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(listener))
    server.daemon_threads = True
    listener.port = int(server.server_address[1])
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield listener
    finally:
        server.shutdown()
        server.server_close()

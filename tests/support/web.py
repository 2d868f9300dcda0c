"""A loopback web server standing in for the internet: one page on every path, and the
``Host`` and path of each request it was sent."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

PAGE = b"<html><head><title>t</title></head><body><p>hello egress</p></body></html>"


class _Page(BaseHTTPRequestHandler):
    hits: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        type(self).hits.append(f"{self.headers.get('Host')} {self.path}")
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def serving_pages() -> Iterator[tuple[int, list[str]]]:
    """The server's port on 127.0.0.1 and the list its requests are added to."""
    hits: list[str] = []
    handler = type("Page", (_Page,), {"hits": hits})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1], hits
    finally:
        server.shutdown()
        server.server_close()

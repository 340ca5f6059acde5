"""An HTTP server on a loopback port, served from a daemon thread while it is used as a context
manager: the embeddings endpoint for exports, and the tests' fake OpenAI-compatible server."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class LoopbackServer:
    def __init__(self, handler: type[BaseHTTPRequestHandler], host: str = "127.0.0.1", port: int = 0):
        self.server = ThreadingHTTPServer((host, port), handler)  # port 0: a free one
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

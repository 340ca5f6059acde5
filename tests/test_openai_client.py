"""The OpenAI-compatible client's connections: opened once per client thread and reused by
every later batch (a server that keeps connections alive sees at most `concurrency` of them)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler

from graphwright.config import LLMConfig
from graphwright.engines.llm.interface import LLMRequest
from graphwright.engines.llm.openai_engine import OpenAIEngine
from graphwright.util.loopback import LoopbackServer


class _KeepAlive(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # connections stay open between requests
    connections = 0
    lock = threading.Lock()

    def setup(self):
        super().setup()
        with _KeepAlive.lock:
            _KeepAlive.connections += 1

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        body = json.dumps({"choices": [{"message": {"content": "ok"}}],
                           "usage": {"prompt_tokens": 1, "completion_tokens": 1}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_batches_reuse_the_connections_the_first_batch_opened():
    _KeepAlive.connections = 0
    with LoopbackServer(_KeepAlive) as server:
        engine = OpenAIEngine(LLMConfig(model="m", base_url=server.base_url, api_key_env=None, concurrency=4))
        for batch in range(6):
            replies = engine.complete([LLMRequest(messages=(("user", f"q{batch}-{i}"),)) for i in range(8)])
            assert [r.text for r in replies] == ["ok"] * 8
    assert _KeepAlive.connections <= 4, f"{_KeepAlive.connections} connections for 48 requests over 6 batches"


def test_closing_the_engine_stops_its_threads():
    with LoopbackServer(_KeepAlive) as server:
        engine = OpenAIEngine(LLMConfig(model="m", base_url=server.base_url, api_key_env=None, concurrency=4))
        engine.complete([LLMRequest(messages=(("user", f"q{i}"),)) for i in range(8)])
        assert any(t.name.startswith("llm-http") for t in threading.enumerate())
        engine.close()
        for t in [t for t in threading.enumerate() if t.name.startswith("llm-http")]:
            t.join(timeout=5)
        assert not any(t.name.startswith("llm-http") for t in threading.enumerate())

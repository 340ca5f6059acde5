"""A small OpenAI-compatible server on loopback for tests: /v1/chat/completions answers
graphwright's prompts as graphwright.engines.llm.standin does (an extraction with the nlp rules'
findings, a community report citing every row it was given), and can be told to
misbehave (drop the connection, answer 503 or 400, return malformed JSON) for chunks that contain
a given marker. It also answers global search's map and reduce prompts, keyword extraction and
community report prompts. It counts requests and records request bodies.

It also answers the prompts of the reference engines that read and write our exports (graphrag
3.3, lightrag-hku 1.5), deterministically: tests/fake_reference.py."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler

from graphwright.config import EmbedConfig
from graphwright.engines.embed.hashing_engine import HashingEmbedder
from graphwright.engines.llm import standin
from graphwright.util.loopback import LoopbackServer

from fake_reference import reference_answer  # tests/ is on sys.path (pytest, or run from there)


class FakeOpenAI(LoopbackServer):
    def __init__(self, port: int = 0):
        self.requests: list[dict] = []
        self.faults: dict[str, list[str]] = {}  # marker in the chunk -> behaviours to apply, in order
        self.zero_score_markers: list[str] = []  # global map points on reports whose title has one score 0
        self.reasoning: list[str] = []  # replies to iterative-retrieval (IRCoT) prompts, in order; then "So the answer is: unknown."
        self.lock = threading.Lock()
        self.embedder = HashingEmbedder(EmbedConfig(engine="hashing", dim=32))
        super().__init__(self._handler(), port=port)

    def fault(self, marker: str, *behaviours: str) -> None:
        """Apply `behaviours` ('drop', '503', '400', 'malformed', 'badbody', 'invent'; 'always:X' repeats X)
        to requests whose chunk contains `marker`, one per request, then answer normally."""
        self.faults[marker] = list(behaviours)

    def _next_fault(self, text: str) -> str | None:
        with self.lock:
            for marker, queue in self.faults.items():
                if marker in text and queue:
                    head = queue[0]
                    if head.startswith("always:"):
                        return head.split(":", 1)[1]
                    return queue.pop(0)
        return None

    def _answer(self, body: dict) -> str:
        reference = reference_answer(body["messages"])
        if reference is not None:
            return reference
        system = body["messages"][0]["content"]
        if "one step at a time, from the numbered paragraphs" in system:  # an IRCoT reasoning step
            with self.lock:
                return self.reasoning.pop(0) if self.reasoning else "So the answer is: unknown."
        return standin.answer(body["messages"], tuple(self.zero_score_markers))

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _send(self, status: int, payload: bytes, content_type: str = "application/json"):
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def _stream(self, model: str, content: str):
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                pieces = [content[i:i + 200] for i in range(0, len(content), 200)] or [""]
                deltas = [{"role": "assistant", "content": p} for p in pieces] + [{}]
                for n, delta in enumerate(deltas):
                    chunk = {"id": "fake", "object": "chat.completion.chunk", "model": model,
                             "choices": [{"index": 0, "delta": delta, "finish_reason": "stop" if n == len(pieces) else None}]}
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")
                self.close_connection = True

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with fake.lock:
                    fake.requests.append(body)
                if self.path.endswith("/embeddings"):
                    fault = fake._next_fault(" ".join(body["input"]))
                    if fault in ("503", "400"):
                        return self._send(int(fault), b'{"error": "injected"}')
                    vectors = fake.embedder.encode(body["input"]).tolist()
                    data = [{"object": "embedding", "index": i, "embedding": v} for i, v in reversed(list(enumerate(vectors)))]
                    return self._send(200, json.dumps({"object": "list", "data": data, "model": body["model"]}).encode())
                text = " ".join(m["content"] for m in body["messages"] if m["role"] == "user")
                fault = fake._next_fault(text)
                if fault == "drop":
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                if fault in ("503", "400"):
                    return self._send(int(fault), b'{"error": "injected"}')
                if fault == "badbody":
                    return self._send(200, b"<html>not json</html>", "text/html")
                content = '{"entities": [{"name": ' if fault == "malformed" else fake._answer(body)
                if fault == "invent":  # an otherwise good extraction naming someone the chunk does not
                    data = json.loads(content)
                    data["entities"].append({"name": "Zorblax Quux", "type": "PERSON", "description": "invented"})
                    content = json.dumps(data)
                if body.get("stream"):  # server-sent events, as OpenAI streams (GraphRAG's search streams)
                    return self._stream(body["model"], content)
                self._send(200, json.dumps(standin.completion(body, content)).encode())

        return Handler


if __name__ == "__main__":  # serve on a fixed loopback port until interrupted (for benchmarks)
    import sys
    import time

    with FakeOpenAI(port=int(sys.argv[1]) if len(sys.argv) > 1 else 8090) as fake:
        print(f"fake OpenAI-compatible server on {fake.base_url}", flush=True)
        while True:
            time.sleep(3600)

"""A small OpenAI-compatible server on loopback for tests: /v1/chat/completions answers an
extraction prompt with the deterministic nlp extractor's findings as JSON (a community report prompt
with a report citing every row it was given), and can be told to
misbehave (drop the connection, answer 503 or 400, return malformed JSON) for chunks that contain
a given marker. It also answers global search's map and reduce prompts, keyword extraction and
community report prompts. It counts requests and records request bodies.

It also answers the query prompts of the reference engines that read our exports (GraphRAG's
local and global search, LightRAG's keyword extraction and answers) deterministically: keywords
are the question's words, and an answer quotes the start of the context the engine put in its
prompt, so a test can see which of our data reached the LLM."""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler

from graphwright.config import EmbedConfig, ExtractConfig
from graphwright.engines.embed.hashing_engine import HashingEmbedder
from graphwright.stages.extract.nlp import extract_chunk
from graphwright.util.loopback import LoopbackServer


def _tables(prompt: str) -> dict[str, list[list[str]]]:
    """The data tables of a report prompt: {name: [row fields]}."""
    tables, name = {}, None
    for line in prompt.splitlines():
        if line.startswith("-----") and line.endswith("-----"):
            name = line.strip("-")
            tables[name] = []
        elif name and line[:1].isdigit():
            tables[name].append(line.split("|"))
    return tables


def _report(prompt: str) -> dict:
    """A GraphRAG-shaped report naming the prompt's first row, with one finding per row, each
    citing that row."""
    t = _tables(prompt)
    first = (t.get("Entities") or t.get("Reports") or [["0", "nothing"]])[0][1]
    findings = [{"summary": row[1], "explanation": f"{row[-1]} [Data: {name} ({row[0]})]"}
                for name in ("Entities", "Relationships", "Reports", "Sources") for row in t.get(name, [])]
    return {"title": f"Report on {first}",
            "summary": f"{len(t.get('Entities', []))} entities, {len(t.get('Relationships', []))} relationships, "
                       f"{len(t.get('Reports', []))} sub-community reports, {len(t.get('Sources', []))} sources.",
            "rating": 5, "rating_explanation": "fixed by the fake server", "findings": findings}


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
        """Apply `behaviours` ('drop', '503', '400', 'malformed', 'badbody'; 'always:X' repeats X)
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
        reference = _reference_answer(body["messages"])
        if reference is not None:
            return reference
        user = [m["content"] for m in body["messages"] if m["role"] == "user"]
        system = body["messages"][0]["content"]
        if "one step at a time, from the numbered paragraphs" in system:  # an IRCoT reasoning step
            with self.lock:
                return self.reasoning.pop(0) if self.reasoning else "So the answer is: unknown."
        if "Evidence:" in system:  # an answer request: cite the first evidence
            return f"The evidence says so [1]. (question: {user[-1]})"
        if system.startswith("You write a report about one community"):
            return json.dumps(_report(user[0]))
        if "\nReports:\n" in system:  # a global map request: one point per report
            return json.dumps({"points": [
                {"description": f"Report {n} is about {title.strip()}", "reports": [int(n)],
                 "score": 0 if any(m in title for m in self.zero_score_markers) else 50 + int(n)}
                for n, title in re.findall(r"\[Report (\d+)\] # ([^\n]*)", system)]})
        if "\nPoints:\n" in system:  # a global reduce request: cite every report the points cite
            cited = sorted({int(n) for group in re.findall(r"\[([\d, ]+)\]$", system, re.MULTILINE) for n in group.split(",")})
            return f"{len(system.splitlines()) - system.splitlines().index('Points:') - 1} points " + "".join(f"[{n}]" for n in cited)
        if "high_level_keywords" in system:  # keyword extraction: capitalized words are low-level keys
            return json.dumps({"high_level_keywords": ["travel"], "low_level_keywords": re.findall(r"\b[A-Z][a-z]+(?: [A-Z][a-z]+)*", user[-1])})
        if len(user) > 1:  # a gleaning round: nothing more to add
            return json.dumps({"entities": [], "relationships": []})
        mentions, assertions = extract_chunk(user[0], ExtractConfig())
        return json.dumps({
            "entities": [{"name": m["name"], "type": m["type"] if m["type"] != "ENTITY" else "CONCEPT", "description": m["description"]} for m in mentions],
            "relationships": [{"source": a["source"], "target": a["target"], "description": a["description"] or "co-occur",
                               "strength": min(10, a["weight"] * 2)} for a in assertions],
        })

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
                prompt = sum(len(m["content"]) for m in body["messages"]) // 4
                if body.get("stream"):  # server-sent events, as OpenAI streams (GraphRAG's search streams)
                    return self._stream(body["model"], content)
                payload = {
                    "id": "fake", "object": "chat.completion", "model": body["model"],
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": prompt, "completion_tokens": len(content) // 4, "total_tokens": prompt + len(content) // 4},
                }
                self._send(200, json.dumps(payload).encode())

        return Handler


# where the reference engines put their retrieved context in a prompt
_CONTEXT_MARKERS = ("---Data tables---", "---Analyst Reports---", "---Context---")


def _reference_answer(messages: list[dict]) -> str | None:
    text = "\n".join(m["content"] for m in messages if isinstance(m.get("content"), str))
    if "high_level_keywords" in text and "User Query:" in text:  # LightRAG keyword extraction
        query = text.rsplit("User Query:", 1)[1].strip().splitlines()[0]
        words = re.findall(r"[A-Za-z][\w-]*", query.replace("\u2019s", "").replace("'s", ""))
        low = [w for w in words if w[0].isupper() and w.lower() not in {"who", "what", "where", "when", "why", "how", "which"}]
        high = [w.lower() for w in words if len(w) > 3 and w not in low]
        return json.dumps({"high_level_keywords": high or [query], "low_level_keywords": low or [query]})
    marker = next((m for m in _CONTEXT_MARKERS if m in text), None)
    if marker is None:
        return None
    context = " ".join(text.split(marker, 1)[1].split())
    quote = context[:400]
    if '"points"' in text:  # GraphRAG global search, map step: JSON points with scores
        return json.dumps({"points": [{"description": f"The reports say: {quote} [Data: Reports (0)]", "score": 80}]})
    return f"According to the context: {quote}"


if __name__ == "__main__":  # serve on a fixed loopback port until interrupted (for benchmarks)
    import sys
    import time

    with FakeOpenAI(port=int(sys.argv[1]) if len(sys.argv) > 1 else 8090) as fake:
        print(f"fake OpenAI-compatible server on {fake.base_url}", flush=True)
        while True:
            time.sleep(3600)

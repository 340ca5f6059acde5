"""Hostile LLM replies against the extraction stage: a loopback server answers every extraction
request with one of the malformed shapes below (chosen by the chunk), the run's outcome and the
graph it published are checked, then the same index is rerun against a good server and compared
with a clean index built from scratch.

    python bench/reply_fuzz.py [--chunks 1100]

Prints, per shape: requests, chunks failed / partial / ok after the hostile run; then crashes,
bogus rows (entities whose name is not in their chunks, or is not a name; descriptions over the
bound; relationships whose ends are not entities) and whether the rerun equals the clean run,
table by table.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import tempfile
from collections import Counter
from http.server import BaseHTTPRequestHandler
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def good(messages) -> dict:
    from graphwright.engines.llm import standin

    return json.loads(standin.answer(messages))


def _chat(content) -> dict:
    return {"choices": [{"message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 10}}


def _with(answer: dict, **extra) -> str:
    return json.dumps({**answer, **extra})


# each shape: messages -> (HTTP status, body bytes)
SHAPES = {
    "usage is a list": lambda m: (200, json.dumps({**_chat(json.dumps(good(m))), "usage": [1, 2]})),
    "usage is text": lambda m: (200, json.dumps({**_chat(json.dumps(good(m))), "usage": "lots"})),
    "content is an int": lambda m: (200, json.dumps(_chat(7))),
    "content is a dict": lambda m: (200, json.dumps(_chat(good(m)))),
    "content is null": lambda m: (200, json.dumps(_chat(None))),
    "choices empty": lambda m: (200, json.dumps({"choices": []})),
    "body is a list": lambda m: (200, json.dumps([1, 2, 3])),
    "body is HTML": lambda m: (200, "<html>busy</html>"),
    "nested 100k deep": lambda m: (200, json.dumps(_chat("[" * 100_000 + "]" * 100_000))),
    "lone surrogates": lambda m: (200, json.dumps(_chat(_with(good(m), entities=[
        {**e, "description": e["description"] + " \ud800 \udc00"} for e in good(m)["entities"]])))),
    "10k entities": lambda m: (200, json.dumps(_chat(_with(good(m), entities=[{"name": f"Person {i}", "type": "PERSON",
                                                                                 "description": "x"} for i in range(10_000)])))),
    "numeric names": lambda m: (200, json.dumps(_chat(_with(good(m), entities=[{"name": str(i * 7), "type": "PERSON",
                                                                                  "description": "n"} for i in range(20)])))),
    "punctuation names": lambda m: (200, json.dumps(_chat(_with(good(m), entities=[{"name": p, "type": "PERSON", "description": "p"}
                                                                                      for p in ("--", "...", "!!", "??", "**", "##")])))),
    "1 MB description": lambda m: (200, json.dumps(_chat(_with(good(m), entities=[{"name": e["name"], "type": e["type"],
                                                                                     "description": "d" * 1_000_000}
                                                                                    for e in good(m)["entities"]])))),
    "names not in the chunk": lambda m: (200, json.dumps(_chat(_with(good(m), entities=good(m)["entities"] + [
        {"name": f"Invented Name {i}", "type": "PERSON", "description": "i"} for i in range(6)])))),
    "one invented name": lambda m: (200, json.dumps(_chat(_with(good(m), entities=good(m)["entities"] + [
        {"name": "Zorblax Quux", "type": "PERSON", "description": "i"}])))),
    "names are objects": lambda m: (200, json.dumps(_chat(_with(good(m), entities=[{"name": {"first": "A"}, "type": [1],
                                                                                      "description": {"x": 1}}] * 5)))),
    "entities is a dict": lambda m: (200, json.dumps(_chat(json.dumps({"entities": {"a": 1}, "relationships": []})))),
    "strength NaN and huge": lambda m: (200, json.dumps(_chat(_with(good(m), relationships=[
        {**r, "strength": s} for r, s in zip(good(m)["relationships"], ["NaN", 1e308, -5, "Infinity", None] * 50)])))),
    "relationships to unknown ends": lambda m: (200, json.dumps(_chat(_with(good(m), relationships=good(m)["relationships"] + [
        {"source": "Nobody Here", "target": "Also Nobody", "description": "r", "strength": 1}])))),
    "self loops": lambda m: (200, json.dumps(_chat(_with(good(m), relationships=[
        {"source": e["name"], "target": e["name"], "description": "self", "strength": 3} for e in good(m)["entities"]])))),
    "1000 relationships": lambda m: (200, json.dumps(_chat(_with(good(m), relationships=[
        {"source": "A", "target": "B", "description": "", "strength": 1}] * 1000)))),
    "truncated JSON": lambda m: (200, json.dumps(_chat(json.dumps(good(m))[:40]))),
    "prose, no JSON": lambda m: (200, json.dumps(_chat("I cannot help with that request."))),
    "empty content": lambda m: (200, json.dumps(_chat(""))),
    "top-level list": lambda m: (200, json.dumps(_chat(json.dumps([1, "two", None])))),
    "HTTP 500 text": lambda m: (500, "Internal Server Error"),
    "HTTP 200, 20 MB body": lambda m: (200, json.dumps(_chat("x" * 20_000_000))),
    "duplicated 500 times": lambda m: (200, json.dumps(_chat(_with(good(m), entities=good(m)["entities"] * 500)))),
    "fenced with prose": lambda m: (200, json.dumps(_chat("Sure! Here it is:\n```json\n" + json.dumps(good(m)) + "\n```\nAnything else?"))),
}
NAMES = sorted(SHAPES)


def shape_of(messages) -> str:
    chunk = next(m["content"] for m in messages if m["role"] == "user")
    return NAMES[int(hashlib.sha256(chunk.encode()).hexdigest(), 16) % len(NAMES)]


class Server:
    def __init__(self, hostile: bool):
        from graphwright.util.loopback import LoopbackServer

        self.hostile, self.counts = hostile, Counter()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                messages = body["messages"]
                extraction = messages[0]["content"].startswith("You extract") and len(messages) == 2
                if outer.hostile and extraction:
                    shape = shape_of(messages)
                    outer.counts[shape] += 1
                    status, payload = SHAPES[shape](messages)
                else:
                    from graphwright.engines.llm import standin

                    status, payload = 200, json.dumps(standin.completion(body, standin.answer(messages)))
                data = payload.encode("utf-8", "surrogatepass")
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = LoopbackServer(Handler)

    def __enter__(self):
        self.server.__enter__()
        return self

    def __exit__(self, *exc):
        self.server.__exit__(*exc)


def config(url: str):
    from graphwright.config import load_config

    return load_config(None, {
        "extract": {"engine": "llm", "max_failed_fraction": 1.0},  # publish, so that the graph can be inspected
        "llm": {"engine": "openai", "model": "fuzz", "base_url": url, "api_key_env": None, "concurrency": 8,
                "max_attempts": 2, "backoff_s": 0.01, "max_backoff_s": 0.02, "timeout_s": 30},
        "embed": {"engine": "hashing", "dim": 32}, "execution": {"executor": "local", "commit_every": 256}})


def index(corpus: Path, where: Path, url: str) -> tuple[dict | None, str | None]:
    from graphwright.pipeline.runner import run_index

    try:
        return run_index([str(corpus)], where, config(url), show_progress=False, log=lambda m: None), None
    except Exception as exc:  # noqa: BLE001 - a crash is what this counts
        return None, f"{type(exc).__name__}: {exc}"


def bogus_rows(where: Path) -> dict:
    from graphwright.config import ExtractConfig
    from graphwright.stages.extract.validate import is_name
    from graphwright.storage.delta import IndexStore

    store, bounds = IndexStore(where), ExtractConfig()
    text = dict(zip(*(store.read("chunks", columns=["chunk_id", "text"]).column(c).to_pylist() for c in ("chunk_id", "text"))))
    entities = store.read("entities", columns=["entity_id", "name", "description", "chunk_ids"]).to_pylist()
    bad = [e for e in entities if not is_name(e["name"], bounds.max_name_chars) or len(e["description"]) > 2 * bounds.max_description_chars
           or not any(e["name"].casefold() in " ".join(text.get(c, "").split()).casefold() for c in e["chunk_ids"])]
    ids = {e["entity_id"] for e in entities}
    rels = store.read("relationships", columns=["source_id", "target_id"]).to_pylist()
    return {"entities": len(bad), "relationships": sum(1 for r in rels if r["source_id"] not in ids or r["target_id"] not in ids),
            "examples": [e["name"][:40] for e in bad[:5]]}


def digest(where: Path, name: str, drop: tuple[str, ...] = ("run_id",)) -> str:
    from graphwright.storage.delta import IndexStore

    table = IndexStore(where).read(name)
    rows = sorted(json.dumps({k: v for k, v in r.items() if k not in drop}, sort_keys=True, default=str) for r in table.to_pylist())
    return hashlib.sha256("\n".join(rows).encode()).hexdigest()[:12]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--chunks", type=int, default=1100)
    a = p.parse_args()
    from pipeline_scale import generate

    work = Path(tempfile.mkdtemp(prefix="gw-fuzz-"))
    corpus = work / "corpus"
    generate(corpus, max(1, a.chunks // 10), 1800)
    with Server(hostile=False) as clean:
        clean_summary, _ = index(corpus, work / "clean", clean.server.base_url)
    with Server(hostile=True) as hostile:
        fuzzed, crash = index(corpus, work / "fuzzed", hostile.server.base_url)
    from graphwright.storage.delta import IndexStore

    markers = IndexStore(work / "fuzzed").read("extractions", columns=["chunk_id", "status", "error"]).to_pylist()
    status = Counter(m["status"] for m in markers)
    print(f"{sum(hostile.counts.values())} hostile replies over {len(hostile.counts)} shapes to {len(markers)} chunks")
    print(f"{'shape':<32} {'replies':>8}")
    for name in NAMES:
        print(f"{name:<32} {hostile.counts[name]:>8}")
    print(f"crash: {crash or 'none'}; chunks failed {status['failed']}, partial {status['partial']}, ok {status['ok']} "
          f"(published: {bool(fuzzed)})")
    print(f"bogus rows in the published graph: {bogus_rows(work / 'fuzzed')}")
    reasons = Counter((m["error"] or "").split(":")[0] for m in markers if m["status"] == "failed")
    print("failure reasons:", dict(reasons.most_common(8)))
    with Server(hostile=False) as clean:
        for attempt in (1, 2):  # a partial chunk is asked once more, then trusted
            again, crash2 = index(corpus, work / "fuzzed", clean.server.base_url)
    same = {t: digest(work / "fuzzed", t) == digest(work / "clean", t)
            for t in ("documents", "chunks", "mentions", "assertions", "entities", "entity_aliases", "relationships", "communities")}
    print(f"after rerunning against a good server: crash {crash2 or 'none'}; equal to a clean run: {same}")
    shutil.rmtree(work)
    assert clean_summary is not None


if __name__ == "__main__":
    main()

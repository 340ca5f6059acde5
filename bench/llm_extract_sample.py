"""LLM extraction on a few chunks of the sample, with a real local model on the CPU.

    python bench/llm_extract_sample.py --engine llamacpp [--words 1200]
    python bench/llm_extract_sample.py --engine openai --base-url http://127.0.0.1:8089/v1 --response-format json_object

Indexes the opening of Stave One (after the Gutenberg header), prints seconds, LLM calls and
tokens, and every extracted entity and relationship per chunk, for a person to judge. Then
deletes the document and indexes it again: its chunks are extracted again, answered from the
request cache (0 new LLM requests).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from _carol import write_opening

from graphwright.config import load_config
from graphwright.pipeline.runner import run_delete, run_index
from graphwright.storage.delta import IndexStore


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--engine", default="llamacpp")
    parser.add_argument("--model", default="pypi:qwen2.5-coder-0.5b-instruct")
    parser.add_argument("--base-url", default=None)
    parser.add_argument("--response-format", default="json_object")
    parser.add_argument("--words", type=int, default=1200)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gw-llm-"))
    src = write_opening(work / "src", "stave-one.txt", args.words)
    llm = {"engine": args.engine, "model": args.model, "response_format": args.response_format, "max_tokens": 700,
           "api_key_env": None, "concurrency": 1}
    if args.base_url:
        llm["base_url"] = args.base_url
    config = load_config(overrides={"extract": {"engine": "llm", "max_failed_fraction": 1.0},
                                    "llm": llm, "embed": {"engine": "hashing"}, "execution": {"executor": "local"}})
    quiet = lambda m: None  # noqa: E731
    t = time.perf_counter()
    s = run_index([str(src)], work / "index", config, show_progress=False, log=quiet)
    seconds = time.perf_counter() - t
    print(f"engine {args.engine} ({args.model}): {s['chunks']} chunks, {s['chunks_failed']} failed, {seconds:.0f} s")
    print(f"LLM: {json.dumps(s['llm'])}")
    print(f"graph: {s['entities']} entities, {s['relationships']} relationships")
    store = IndexStore(work / "index")
    chunks = {r["chunk_id"]: r for r in store.read("chunks").to_pylist()}
    mentions = store.read("mentions").to_pylist()
    assertions = store.read("assertions").to_pylist()
    for cid, chunk in sorted(chunks.items(), key=lambda kv: kv[1]["chunk_index"]):
        print(f"\n--- chunk {chunk['chunk_index']}: {chunk['text'][:160]}...")
        print("entities:", "; ".join(f"{m['name']} ({m['type']})" for m in mentions if m["chunk_id"] == cid))
        for a in assertions:
            if a["chunk_id"] == cid:
                print(f"  {a['source']} -> {a['target']} [{a['weight']:g}]: {a['description']}")
    run_delete(work / "index", doc_ids=["stave-one.txt"], show_progress=False, log=quiet)
    t = time.perf_counter()
    again = run_index([str(src)], work / "index", config, show_progress=False, log=quiet)
    print(f"\nre-added after deletion: {again['chunks_extracted']} chunks extracted in {time.perf_counter() - t:.1f} s; LLM {json.dumps(again['llm'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

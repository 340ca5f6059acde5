"""Eager LLM reports against lazy ones on the same corpus, with an OpenAI-compatible server
(a llama.cpp server with a small local model, or tests/fake_openai.py to measure the pipeline's
own overhead and token counts).

    python -m llama_cpp.server --model ~/.cache/graphwright/models/qwen2.5-coder-0.5b-instruct.gguf --port 8091 --n_ctx 8192
    python bench/lazy_reports.py --base-url http://127.0.0.1:8091/v1 --words 1500
    python tests/fake_openai.py 8090 &  python bench/lazy_reports.py --base-url http://127.0.0.1:8090/v1 --words 0

Indexes the opening `--words` words of the sample's Stave One (0: the whole book) three times,
with the nlp extractor and the hashing embedder (so the LLM writes reports only): with
`report.mode: extractive` (baseline), `llm` and `lazy`. Prints index seconds and report calls/tokens
for both, then the lazy index's first and second query (same question) and a different
question: seconds, calls and tokens each. Ends with one LLM report verbatim, for a person to judge.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from _carol import story_words, write_opening

from graphwright.config import load_config
from graphwright.pipeline.runner import run_index
from graphwright.query import query
from graphwright.storage.delta import IndexStore


def report_calls(store: IndexStore, where: str = "") -> dict:
    rows = store.read("llm_calls", where="stage = 'report'" + (f" AND {where}" if where else "")).to_pylist()
    paid = [r for r in rows if not r["cache_hit"]]
    return {"calls": len(rows), "cache_hits": len(rows) - len(paid), "failed": sum(r["status"] == "failed" for r in rows),
            "prompt_tokens": sum(r["prompt_tokens"] for r in paid), "completion_tokens": sum(r["completion_tokens"] for r in paid)}


def timed_query(index: Path, question: str) -> dict:
    store = IndexStore(index)
    seen = {r["run_id"] for r in store.read("llm_calls", columns=["run_id"]).to_pylist()}
    t = time.perf_counter()
    result = query(str(index), question, answer=False)
    seconds = time.perf_counter() - t
    new = [r for r in {r["run_id"] for r in store.read("llm_calls", columns=["run_id"]).to_pylist()} if r not in seen]
    calls = report_calls(store, f"run_id IN ({', '.join(repr(r) for r in new)})") if new else report_calls(store, "false")
    return {"seconds": round(seconds, 2), "reports_returned": len(result["reports"]), **calls,
            "reports_stored": store.count("community_reports")}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--model", default="qwen2.5-coder-0.5b-instruct")
    parser.add_argument("--response-format", default="json_object")
    parser.add_argument("--words", type=int, default=1500, help="0: the whole book")
    parser.add_argument("--context-tokens", type=int, default=1500)
    parser.add_argument("--max-tokens", type=int, default=700)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--question", default="What did Scrooge say to his nephew about Christmas?")
    parser.add_argument("--other-question", default="Who was Marley and what happened to him?")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gw-reports-"))
    src = write_opening(work / "src", "carol.txt", args.words or None)
    llm = {"engine": "openai", "model": args.model, "base_url": args.base_url, "response_format": args.response_format,
           "max_tokens": args.max_tokens, "api_key_env": None, "concurrency": args.concurrency, "timeout_s": 900, "max_attempts": 2}
    out = {"words": args.words or len(story_words())}
    quiet = lambda m: None
    # extractive first: the baseline, and it pays the process's one-time costs (loading the
    # sentence splitter, the tokenizer) that would otherwise land on whichever mode ran first
    for mode in ("extractive", "llm", "lazy"):
        config = load_config(overrides={"llm": llm, "embed": {"engine": "hashing"}, "execution": {"executor": "local"},
                                        "report": {"mode": mode, "context_tokens": args.context_tokens, "max_failed_fraction": 1.0}})
        index = work / f"index-{mode}"
        t = time.perf_counter()
        s = run_index([str(src)], index, config, show_progress=False, log=quiet)
        out[mode] = {"index_seconds": round(time.perf_counter() - t, 2), "report_stage_seconds": s["seconds"]["report"],
                     "communities": s["communities"], "reports_stored": s["reports"], **report_calls(IndexStore(index))}
        print(mode, json.dumps(out[mode]), flush=True)
    lazy = work / "index-lazy"
    for label, question in (("first_query", args.question), ("second_query", args.question), ("other_query", args.other_question)):
        out[label] = timed_query(lazy, question)
        print(label, json.dumps(out[label]), flush=True)
    reports = IndexStore(work / "index-llm").read("community_reports").to_pylist()
    good = sorted((r for r in reports if r["generator"].startswith("llm:")), key=lambda r: (-len(r["full_content"]), r["community_id"]))
    print(f"\nreports: {len(good)} by the LLM, {len(reports) - len(good)} fell back to extractive")
    for r in good[:1]:
        print(f"\n--- level {r['level']} report {r['community_id']} (rating {r['rating']}: {r['rating_explanation']})")
        print(r["full_content"])
        print("cites:", json.dumps({k: len(r[k]) for k in ("entity_ids", "relationship_ids", "chunk_ids", "sub_community_ids")}))
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())

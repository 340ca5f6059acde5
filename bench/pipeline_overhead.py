"""Pipeline overhead with an LLM that answers at once: index hotpotqa-dev (500 paragraphs) with
the `openai` engines (chat completions for extraction, /v1/embeddings for vectors) pointed at a
local OpenAI-compatible server that answers immediately (tests/fake_openai.py: its extraction
answers come from the nlp rules, its embeddings from feature hashing).

    python bench/pipeline_overhead.py [--data ../shared/data/hotpotqa-dev/corpus.jsonl] [--executor ray|local]

Prints the wall time per stage and in total, then reruns to show the no-op cost. Reference
points from the scale issue, same setup on this machine: LightRAG 1.5.7 took 12 min 06 s and
Microsoft GraphRAG 3.3 took 26 min 17 s (each on one core).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from _ports import free_port, wait_listening

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data" / "hotpotqa-dev" / "corpus.jsonl"



def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, default=DATA)
    p.add_argument("--executor", default="ray", choices=("ray", "local"))
    p.add_argument("--concurrency", type=int, default=16)
    a = p.parse_args()
    if not a.data.exists():
        print(f"skipped: {a.data} not found")
        return
    from graphwright.config import load_config
    from graphwright.pipeline.runner import run_index

    port = free_port()
    server = subprocess.Popen([sys.executable, str(REPO / "tests" / "fake_openai.py"), str(port)], stdout=subprocess.DEVNULL)
    work = Path(tempfile.mkdtemp(prefix="gw-overhead-"))
    try:
        wait_listening(port)
        url = f"http://127.0.0.1:{port}/v1"
        config = load_config(None, {
            "extract": {"engine": "llm"},
            "llm": {"engine": "openai", "model": "instant", "base_url": url, "api_key_env": None,
                    "response_format": "json_object", "concurrency": a.concurrency},
            "embed": {"engine": "openai", "model": "instant-embed", "base_url": url, "api_key_env": None, "concurrency": 4},
            "execution": {"executor": a.executor},
        })
        for label in ("first run", "rerun"):
            t = time.perf_counter()
            s = run_index([str(a.data)], work / "index", config, show_progress=False, log=lambda m: None)
            wall = time.perf_counter() - t
            stages = "  ".join(f"{k} {v:.1f}" for k, v in s["seconds"].items())
            print(f"{label:<10} {wall:6.1f} s wall | {s['documents']} documents, {s['chunks']} chunks, {s['entities']} entities, "
                  f"{s['relationships']} relationships, {s['llm']['calls']} LLM calls | {stages}", flush=True)
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

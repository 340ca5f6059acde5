"""Query latency of every retrieval mode on large indexes: in-process (one loaded searcher), through
`graphwright serve` (HTTP, one request at a time), and a cold CLI query.

    python bench/query_latency.py --index /work/bench-indexes/issue-23/index-120000 [--index ...]
        [--questions 200] [--modes naive,fusion,local,graph] [--no-serve] [--no-cold]

The questions are made from each index's own entity names (a fixed seed): half ask how two
entities are connected, half what is known about one; no LLM is called (retrieval only, as
`graphwright query --no-answer`). Each mode answers 5 warm-up questions first (what a searcher
builds once, on first use, is not a query's cost), then every question once; p50 and p95 are
over those. The serve figures are measured by the client, so they include HTTP and JSON; the
server runs with --workers 1. Build the indexes with bench/pipeline_scale.py (nlp extractor,
hashing embedder). Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from _ports import free_port

WARM_UP = 5


def make_questions(index: Path, n: int, seed: int = 23) -> list[str]:
    from graphwright.storage.delta import IndexStore
    from graphwright.storage.manifest import PublishedIndex

    names = PublishedIndex(IndexStore(index)).read("entities", columns=["name"]).column("name").to_pylist()
    rng = random.Random(seed)
    out = []
    for i in range(n):
        if i % 2:
            out.append(f"What is known about {rng.choice(names)}?")
        else:
            a, b = rng.sample(names, 2)
            out.append(f"How are {a} and {b} connected?")
    return out


def percentiles(seconds: list[float]) -> dict:
    ms = np.asarray(seconds) * 1000
    return {"p50_ms": float(np.percentile(ms, 50)), "p95_ms": float(np.percentile(ms, 95)), "mean_ms": float(ms.mean()), "n": len(ms)}


def in_process(index: Path, questions: list[str], modes: list[str]) -> dict:
    from graphwright.query import query
    from graphwright.query.searcher import Searcher

    started = time.perf_counter()
    searcher = Searcher(str(index))
    out = {"load_s": time.perf_counter() - started}
    for mode in modes:
        for q in questions[:WARM_UP]:
            query(str(index), q, mode=mode, answer=False, searcher=searcher)
        seconds = []
        for q in questions:
            t = time.perf_counter()
            query(str(index), q, mode=mode, answer=False, searcher=searcher)
            seconds.append(time.perf_counter() - t)
        out[mode] = percentiles(seconds)
    return out



def through_serve(index: Path, questions: list[str], modes: list[str]) -> dict:
    import requests

    port = free_port()
    cli = str(Path(sys.executable).parent / "graphwright")
    # the index's parent is the served root; only this index is warmed and queried
    server = subprocess.Popen([cli, "serve", "--index-root", str(index.parent), "--no-auth", "--port", str(port), "--workers", "1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        started = time.perf_counter()
        while True:
            if server.poll() is not None:
                raise SystemExit(f"graphwright serve exited: {server.stderr.read()[-2000:]}")
            try:
                if requests.get(f"{base}/health", timeout=2).ok:
                    break
            except requests.ConnectionError:
                pass
            time.sleep(0.5)
        out = {"ready_s": time.perf_counter() - started}
        session = requests.Session()
        url = f"{base}/v1/indexes/{index.name}/query"
        for mode in modes:
            for q in questions[:WARM_UP]:
                session.post(url, json={"question": q, "mode": mode, "answer": False}, timeout=600).raise_for_status()
            seconds = []
            for q in questions:
                t = time.perf_counter()
                session.post(url, json={"question": q, "mode": mode, "answer": False}, timeout=600).raise_for_status()
                seconds.append(time.perf_counter() - t)
            out[mode] = percentiles(seconds)
        return out
    finally:
        server.terminate()
        server.wait(timeout=60)


def cold_cli(index: Path, question: str, modes: list[str]) -> dict:
    cli = str(Path(sys.executable).parent / "graphwright")
    out = {}
    for mode in modes:
        t = time.perf_counter()
        subprocess.run([cli, "query", question, "--index", str(index), "--mode", mode, "--no-answer", "--json"],
                       check=True, stdout=subprocess.DEVNULL)
        out[mode] = time.perf_counter() - t
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--index", type=Path, action="append", required=True)
    p.add_argument("--questions", type=int, default=200)
    p.add_argument("--modes", default="naive,fusion,local,graph")
    p.add_argument("--no-serve", action="store_true")
    p.add_argument("--no-cold", action="store_true")
    p.add_argument("--json", type=Path)
    a = p.parse_args()
    modes = a.modes.split(",")
    figures = {}
    for index in a.index:
        if not (index / "tables" / "index_manifest").exists():
            print(f"skipped: {index} is not an index (build it with bench/pipeline_scale.py)")
            continue
        from graphwright.storage.delta import IndexStore
        from graphwright.storage.manifest import load_manifest

        counts = load_manifest(IndexStore(index))["counts"]
        questions = make_questions(index, a.questions)
        row = {"counts": {k: counts.get(k) for k in ("chunks", "entities", "relationships")}}
        row["in_process"] = in_process(index, questions, modes)
        if not a.no_serve:
            row["serve"] = through_serve(index, questions, modes)
        if not a.no_cold:
            row["cold_cli_s"] = cold_cli(index, questions[0], modes)
        figures[str(index)] = row
        print_row(index, row, modes)
    if a.json:
        a.json.write_text(json.dumps(figures, indent=1))
    return 0


def print_row(index: Path, row: dict, modes: list[str]) -> None:
    c = row["counts"]
    print(f"\n## {index.name}: {c['chunks']:,} chunks, {c['entities']:,} entities, {c['relationships']:,} relationships "
          f"(searcher loaded in {row['in_process']['load_s']:.1f} s"
          + (f", server ready in {row['serve']['ready_s']:.1f} s)" if "serve" in row else ")"))
    print(f"{'mode':<8}{'in-process p50':>16}{'p95':>10}{'serve p50':>12}{'p95':>10}{'serve adds (p50)':>18}{'cold CLI':>10}")
    for mode in modes:
        ip = row["in_process"][mode]
        sv = row.get("serve", {}).get(mode)
        cold = row.get("cold_cli_s", {}).get(mode)
        print(f"{mode:<8}{ip['p50_ms']:>14.1f}ms{ip['p95_ms']:>8.1f}ms"
              + (f"{sv['p50_ms']:>10.1f}ms{sv['p95_ms']:>8.1f}ms{sv['p50_ms'] - ip['p50_ms']:>16.1f}ms" if sv else f"{'-':>12}{'-':>10}{'-':>18}")
              + (f"{cold:>9.1f}s" if cold is not None else f"{'-':>10}"))


if __name__ == "__main__":
    sys.exit(main())

"""Two published versions of one index, side by side: the same questions alternate between a
searcher of each, per mode, so the machine's noise falls on both alike; prints p50/p95 of each
and how many questions got different evidence. For a change to how a version's search files are
built (a rerun publishes the new files as a new version, the old one stays readable).

    python bench/version_latency.py --index /work/bench-indexes/issue-18/index-1000000 --versions 1,2 --modes graph
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from query_latency import WARM_UP, make_questions, percentiles


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--index", type=Path, required=True)
    p.add_argument("--versions", required=True, help="two published versions, e.g. 1,2")
    p.add_argument("--modes", default="graph")
    p.add_argument("--questions", type=int, default=200)
    a = p.parse_args()
    from graphwright.query import query
    from graphwright.query.searcher import Searcher

    versions = [int(v) for v in a.versions.split(",")]
    searchers = {v: Searcher(str(a.index), v) for v in versions}
    questions = make_questions(a.index, a.questions)
    for mode in a.modes.split(","):
        seconds = {v: [] for v in versions}
        differ = 0
        for i, q in enumerate(questions[:WARM_UP] + questions):
            evidence = {}
            for v in (versions if i % 2 else versions[::-1]):
                t = time.perf_counter()
                out = query(str(a.index), q, mode=mode, version=v, answer=False, searcher=searchers[v])
                if i >= WARM_UP:
                    seconds[v].append(time.perf_counter() - t)
                evidence[v] = ([(e.get("kind"), e.get("chunk_id")) for e in out.get("evidence", [])],
                               [r.get("relationship_id") for r in out.get("relationships", [])])
            differ += i >= WARM_UP and evidence[versions[0]] != evidence[versions[1]]
        figures = "  ".join(f"v{v} p50 {percentiles(s)['p50_ms']:.1f} ms p95 {percentiles(s)['p95_ms']:.1f} ms" for v, s in seconds.items())
        print(f"{mode:<8} {figures}  | {differ} of {len(questions)} questions with different evidence", flush=True)


if __name__ == "__main__":
    main()

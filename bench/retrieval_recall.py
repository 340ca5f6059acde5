"""Evidence recall of `graphwright query` against a question set with gold document ids.

    python bench/retrieval_recall.py --index DIR --questions ../shared/data/hotpotqa-dev/questions.jsonl [--k 10]

For each mode, prints: the share of questions whose gold documents all appear in the top-k
evidence ("all gold in top-k"), and mean per-question gold recall@k. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from graphwright.ids import doc_id
from graphwright.query import Searcher


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--index", required=True)
    parser.add_argument("--questions", required=True)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--modes", default="naive,local")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    path = Path(args.questions)
    if not path.exists():
        print(f"skipped: {path} not found (the development data lives in ../shared/data)")
        return 0
    questions = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    searcher = Searcher(args.index)
    results = {}
    for mode in args.modes.split(","):
        all_found, recall_sum, started = 0, 0.0, time.perf_counter()
        for q in questions:
            gold = {doc_id(g) for g in q["gold_doc_ids"]}
            got = {e["doc_id"] for e in searcher.search(q["question"], mode, args.k)["evidence"][: args.k]}
            hit = len(gold & got)
            all_found += hit == len(gold)
            recall_sum += hit / len(gold)
        n = len(questions)
        results[mode] = {
            "questions": n,
            f"all_gold_in_top{args.k}": round(all_found / n, 3),
            f"recall@{args.k}": round(recall_sum / n, 3),
            "seconds_per_query": round((time.perf_counter() - started) / n, 3),
        }
    if args.json:
        print(json.dumps(results))
    else:
        print(f"{'mode':<8} {'questions':>9} {'all gold in top' + str(args.k):>18} {'recall@' + str(args.k):>10} {'s/query':>8}")
        for mode, r in results.items():
            print(f"{mode:<8} {r['questions']:>9} {r[f'all_gold_in_top{args.k}']:>18.3f} {r[f'recall@{args.k}']:>10.3f} {r['seconds_per_query']:>8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

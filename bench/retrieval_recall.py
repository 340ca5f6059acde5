"""Evidence recall of `graphwright query` modes side by side on a question set with gold doc ids.

    python bench/retrieval_recall.py --index DIR --questions ../shared/data/hotpotqa-dev/questions.jsonl [--k 10]
        [--modes naive,graph] [--set graph_dense_weight=0.5 ...]

Prints, per mode, the share of questions whose gold documents all appear in the top-k evidence,
the mean gold recall@k, and the share of short-answer questions whose answer text occurs in the
top-k evidence (graphwright.evaluate). Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

from graphwright.query.evaluate import evaluate, load_questions
from graphwright.query.searcher import MODES, Searcher


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--index", required=True)
    parser.add_argument("--questions", required=True)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a query setting of the published index, e.g. --set graph_dense_weight=0.5")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not Path(args.questions).exists():
        print(f"skipped: {args.questions} not found (the development data lives in ../shared/data)")
        return 0
    questions = load_questions(args.questions)
    searcher = Searcher(args.index)
    if args.set:
        overrides = {k: yaml.safe_load(v) for k, v in (item.split("=", 1) for item in args.set)}
        searcher.config = searcher.config.model_copy(update={"query": searcher.config.query.model_validate({**searcher.config.query.model_dump(), **overrides})})
        print("query settings:", ", ".join(f"{k}={v}" for k, v in overrides.items()))
    results = {m: evaluate(args.index, questions, m, args.k, searcher=searcher) for m in args.modes.split(",")}
    if args.json:
        print(json.dumps({m: {k: v for k, v in r.items() if k != "per_question"} for m, r in results.items()}))
        return 0
    k = args.k
    print(f"{'mode':<8} {'questions':>9} {'all gold in top' + str(k):>18} {'recall@' + str(k):>10} {'answer in top' + str(k):>16} {'s/query':>8}")
    for mode, r in results.items():
        found = r[f"answer_in_evidence@{k}"]
        found = f"{found:.3f} of {r['short_answer_questions']}" if found is not None else "-"
        print(f"{mode:<8} {r['questions']:>9} {r[f'all_gold@{k}']:>18.3f} {r[f'recall@{k}']:>10.3f} {found:>16} {r['seconds_per_query']:>8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

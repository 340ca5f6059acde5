"""The "before" rows of bench/retrieval_recall.py: run with PYTHONPATH set to another checkout's
src/, it queries an index with that code's modes and prints, per mode, per question, the gold and
retrieved document ids (one JSON object, last line).

    PYTHONPATH=/tmp/base/src python bench/_recall_baseline.py INDEX QUESTIONS naive,graph

An index published by newer code has configuration keys older code does not know; they are
ignored here (they only add search files the older modes do not read).
"""

from __future__ import annotations

import json
import sys
import time


def tolerate_new_settings() -> None:
    import graphwright.config as config

    sections = [c for c in vars(config).values() if isinstance(c, type) and issubclass(c, config._Section)]
    for cls in sections:
        cls.model_config["extra"] = "ignore"
    for cls in sections:
        cls.model_rebuild(force=True)


def main() -> None:
    index, questions, modes = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
    tolerate_new_settings()
    from graphwright.ids import doc_id
    from graphwright.query.evaluate import _normal, load_questions, short_answer
    from graphwright.query.searcher import Searcher

    rows = load_questions(questions)
    searcher = Searcher(index)
    out = {}
    for mode in modes:
        per, started = [], time.perf_counter()
        for q in rows:
            evidence = searcher.search(q["question"], mode, 10, use_llm=False)["evidence"][:10]

            def found(items):
                return (_normal(q["answer"]) in _normal(" ".join(e["text"] for e in items))) if short_answer(q) else None
            per.append({"gold": sorted(doc_id(g) for g in q["gold_doc_ids"]), "docs": [e["doc_id"] for e in evidence],
                        "answer5": found(evidence[:5]), "answer10": found(evidence)})
        out[mode] = {"per_question": per, "seconds_per_query": (time.perf_counter() - started) / max(len(rows), 1)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()

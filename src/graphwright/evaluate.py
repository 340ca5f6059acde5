"""Evidence recall of a query mode against a question set with gold document ids (JSONL with
`question` and `gold_doc_ids`, as in the development data)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from graphwright.ids import doc_id
from graphwright.query import Searcher


def load_questions(path: str | Path) -> list[dict]:
    rows = []
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        row = json.loads(line)
        if "question" not in row or not row.get("gold_doc_ids"):
            raise ValueError(f"{path}:{n}: a question needs 'question' and 'gold_doc_ids'")
        rows.append(row)
    return rows


def evaluate(index_dir: str, questions: list[dict], mode: str, k: int, version: int | None = None,
             searcher: Searcher | None = None, **options) -> dict:
    """`recall@k`: mean share of a question's gold documents in the top-k evidence;
    `all_gold@k`: share of questions with every gold document there; `answer_in_evidence@k`:
    share of questions with a short gold `answer` whose text occurs in the top-k evidence text
    (where every question has one gold document among few, as in novel-dev, recall@k says
    little). Gold ids are source keys.
    `options` go to Searcher.search (e.g. `level` for global)."""
    searcher = searcher or Searcher(index_dir, version)
    per_question, started = [], time.perf_counter()
    for q in questions:
        t = time.perf_counter()
        gold = {doc_id(g) for g in q["gold_doc_ids"]}
        # retrieval only: no LLM (global ranks its reports, the lightrag modes take keywords from the question)
        evidence = searcher.search(q["question"], mode, k, use_llm=False, **options)["evidence"][:k]
        hit = len(gold & {e["doc_id"] for e in evidence})
        row = {"qid": q.get("qid"), "recall": hit / len(gold), "all_gold": hit == len(gold)}
        if short_answer(q):
            row["answer_found"] = _normal(q["answer"]) in _normal(" ".join(e["text"] for e in evidence))
        per_question.append({**row, "seconds": round(time.perf_counter() - t, 4)})
    n = len(per_question) or 1
    answered = [p["answer_found"] for p in per_question if "answer_found" in p]
    return {
        "mode": mode,
        "k": k,
        "questions": len(per_question),
        f"recall@{k}": round(sum(p["recall"] for p in per_question) / n, 4),
        f"all_gold@{k}": round(sum(p["all_gold"] for p in per_question) / n, 4),
        # the gold answer's text occurs in the top-k evidence (questions with a short answer other than yes/no)
        f"answer_in_evidence@{k}": round(sum(answered) / len(answered), 4) if answered else None,
        "short_answer_questions": len(answered),
        "seconds_per_query": round((time.perf_counter() - started) / n, 4),
        "per_question": per_question,
    }


def short_answer(question: dict, max_words: int = 6) -> bool:
    answer = str(question.get("answer") or "").strip()
    return bool(answer) and len(answer.split()) <= max_words and _normal(answer) not in ("yes", "no")


def _normal(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.casefold()))

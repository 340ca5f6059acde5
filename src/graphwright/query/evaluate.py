"""Evidence recall of a query mode against a question set with gold document ids (JSONL with
`question` and `gold_doc_ids`, as in the development data)."""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from pathlib import Path

from graphwright.ids import doc_id
from graphwright.query.searcher import Searcher


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


def _answer_tokens(text: str) -> list[str]:
    """SQuAD-style normalization: lower case, no punctuation, no articles, single spaces; citation
    marks like [2] are not part of an answer."""
    text = re.sub(r"[^\w\s]", " ", re.sub(r"\[\d+\]", " ", text.casefold()))
    return [w for w in text.split() if w not in ("a", "an", "the")]


def answer_scores(prediction: str, gold: str) -> tuple[float, float]:
    """(exact match, token F1) of an answer against the gold answer. A prediction that contains
    the gold answer as a whole phrase counts as exact (LLM answers are sentences, not spans)."""
    pred, ref = _answer_tokens(prediction or ""), _answer_tokens(gold)
    if not ref:
        return float(not pred), float(not pred)
    exact = pred == ref or f" {' '.join(ref)} " in f" {' '.join(pred)} "
    common = Counter(pred) & Counter(ref)
    overlap = sum(common.values())
    if not overlap:
        return float(exact), 0.0
    precision, recall = overlap / len(pred), overlap / len(ref)
    return float(exact), 2 * precision * recall / (precision + recall)


def evaluate(index_dir: str, questions: list[dict], mode: str, k: int, version: int | None = None,
             searcher: Searcher | None = None, answer: bool | None = False, **options) -> dict:
    """`recall@k`: mean share of a question's gold documents in the top-k evidence;
    `all_gold@k`: share of questions with every gold document there; `answer_in_evidence@k`:
    share of questions with a short gold `answer` whose text occurs in the top-k evidence text
    (where every question has one gold document among few, as in novel-dev, recall@k says
    little); `answer_words@k`: mean share of such an answer's content words in that text. Gold
    ids are source keys. `options` go to the search (e.g. `level` for global).

    Without `answer`, retrieval only (global ranks its reports, the lightrag modes take keywords
    from the question). With `answer` (None: when an LLM is configured), the mode runs as a
    query does, with its LLM steps, and each answer is scored by exact match and token F1
    against the question's `answer`, with the tokens it cost."""
    from graphwright.query import query

    searcher = searcher or Searcher(index_dir, version)
    per_question, started = [], time.perf_counter()
    for q in questions:
        t = time.perf_counter()
        gold = {doc_id(g) for g in q["gold_doc_ids"]}
        if answer is False:
            result = searcher.search(q["question"], mode, k, use_llm=False, **options)
        else:
            result = query(index_dir, q["question"], mode, k, version, answer=answer, searcher=searcher, **options)
        evidence = result["evidence"][:k]
        hit = len(gold & {e["doc_id"] for e in evidence})
        row = {"qid": q.get("qid"), "recall": hit / len(gold), "all_gold": hit == len(gold)}
        found = answer_in_evidence(q, evidence)
        if found is not None:
            row["answer_found"] = found
        if (words := answer_word_recall(q, evidence)) is not None:
            row["answer_words"] = round(words, 4)
        steps = result.get("ircot") or {}
        if steps:
            row |= {"steps": len(steps["steps"]), "prompt_tokens": steps["prompt_tokens"], "completion_tokens": steps["completion_tokens"]}
        if "answer" in result:
            usage = result.get("llm") or {}
            row |= {"answer": result["answer"], "prompt_tokens": row.get("prompt_tokens", 0) + usage.get("prompt_tokens", 0),
                    "completion_tokens": row.get("completion_tokens", 0) + usage.get("completion_tokens", 0), "cache_hit": usage.get("cache_hit")}
            if q.get("answer") is not None:
                row["exact_match"], row["f1"] = answer_scores(result["answer"] or "", str(q["answer"]))
        per_question.append({**row, "seconds": round(time.perf_counter() - t, 4)})
    n = len(per_question) or 1
    found = [p["answer_found"] for p in per_question if "answer_found" in p]
    words = [p["answer_words"] for p in per_question if "answer_words" in p]
    seconds = sorted(p["seconds"] for p in per_question) or [0.0]
    summary = {
        "mode": mode,
        "k": k,
        "questions": len(per_question),
        f"recall@{k}": round(sum(p["recall"] for p in per_question) / n, 4),
        f"all_gold@{k}": round(sum(p["all_gold"] for p in per_question) / n, 4),
        # the gold answer's text occurs in the top-k evidence (questions with a short answer other than yes/no)
        f"answer_in_evidence@{k}": round(sum(found) / len(found), 4) if found else None,
        "short_answer_questions": len(found),
        # share of the short answer's content words in the top-k evidence text, mean over those questions
        f"answer_words@{k}": round(sum(words) / len(words), 4) if words else None,
        "seconds_per_query": round((time.perf_counter() - started) / n, 4),
        "latency_p50_s": seconds[len(seconds) // 2],
        "latency_max_s": seconds[-1],
    }
    if any("steps" in p for p in per_question):
        summary |= {"reasoning_steps": sum(p.get("steps", 0) for p in per_question),
                    "prompt_tokens": sum(p.get("prompt_tokens", 0) for p in per_question),
                    "completion_tokens": sum(p.get("completion_tokens", 0) for p in per_question)}
    answered = [p for p in per_question if "answer" in p]
    if answered:
        scored = [p for p in answered if "f1" in p]
        summary |= {
            "answered": len(answered),
            "exact_match": round(sum(p["exact_match"] for p in scored) / len(scored), 4) if scored else None,
            "f1": round(sum(p["f1"] for p in scored) / len(scored), 4) if scored else None,
            "prompt_tokens": sum(p["prompt_tokens"] for p in answered),
            "completion_tokens": sum(p["completion_tokens"] for p in answered),
        }
    return summary | {"per_question": per_question}


def answer_in_evidence(question: dict, evidence: list[dict]) -> bool | None:
    """Whether a question's short gold answer occurs in the evidence text (None: no short answer)."""
    if not short_answer(question):
        return None
    return _normal(question["answer"]) in _normal(" ".join(e["text"] for e in evidence))


# Lucene's English stopwords: words a gold answer shares with almost any text
_STOPWORDS = frozenset("a an and are as at be but by for if in into is it no not of on or such that the their then "
                       "there these they this to was will with".split())


def answer_word_recall(question: dict, evidence: list[dict]) -> float | None:
    """Share of the short gold answer's content words that occur in the evidence text (None: no
    short answer). answer_in_evidence needs the answer verbatim; where answers were written by an
    LLM rather than quoted (novel-dev: 7 of its 69 short answers occur in its books), this
    credits the evidence that holds their words."""
    if not short_answer(question):
        return None
    words = set(_answer_tokens(str(question["answer"]))) - _STOPWORDS
    if not words:
        return None
    return len(words & set(_answer_tokens(" ".join(e["text"] for e in evidence)))) / len(words)


def short_answer(question: dict, max_words: int = 6) -> bool:
    answer = str(question.get("answer") or "").strip()
    return bool(answer) and len(answer.split()) <= max_words and _normal(answer) not in ("yes", "no")


def _normal(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.casefold()))

"""GraphRAG-style global search: map-reduce over the community reports of one level.

Reports covering the graph at `level` (that level's communities, plus coarser communities that do
not split further) are ranked by similarity to the question; the best `query.global_max_reports`
are packed into map prompts of at most `query.global_map_tokens` tokens. Each map answer is a JSON
list of points with a helpfulness score 0-100; points scored 0 are dropped; the rest, best first,
fill the reduce prompt, whose answer cites reports by their evidence number.

Without an LLM the ranked reports are the result: evidence with the community's chunk that is
nearest the question as provenance (and all its chunks and documents), no answer.
"""

from __future__ import annotations

import json
import re

import numpy as np

from graphwright.engines.llm.interface import LLMRequest
from graphwright.query.budget import take_within
from graphwright.query.llm_calls import complete
from graphwright.stages.extract.parse import ParseError, loads_lenient
from graphwright.text.tokens import count_tokens

MAP_VERSION = "global-map-v1"
REDUCE_VERSION = "global-reduce-v1"
NO_DATA = "I do not know: none of the community reports helps answer this question."

MAP_SYSTEM = """You are given community reports from a knowledge graph, each with a number.
Answer the user's question with a list of key points drawn only from these reports.
Give each point a helpfulness score from 0 to 100 for answering the question: 0 if it does not help.
If the reports do not help at all, return a single point with score 0.
Cite the reports each point comes from by number.
Reply with JSON only: {"points": [{"description": "...", "score": 0-100, "reports": [1, 2]}]}

Reports:
"""

REDUCE_SYSTEM = """You are given key points from several analysts, ranked by helpfulness, each
citing community reports by number. Write a concise answer to the user's question using only
these points. Keep the report citations in square brackets, like [3] or [2, 5].
If the points do not answer the question, say so.

Points:
"""

MAP_SCHEMA = {
    "type": "object",
    "properties": {"points": {"type": "array", "items": {
        "type": "object",
        "properties": {"description": {"type": "string"}, "score": {"type": "integer"},
                       "reports": {"type": "array", "items": {"type": "integer"}}},
        "required": ["description", "score"]}}},
    "required": ["points"],
}


def default_level(searcher) -> int:
    """The coarsest level with at least `query.global_min_reports` reports (or the finest level)."""
    levels = sorted({c["level"] for c in searcher.communities})
    if not levels:
        return 0
    for level in levels:
        if len(covering_communities(searcher, level)) >= searcher.config.query.global_min_reports:
            return level
    return levels[-1]


def covering_communities(searcher, level: int) -> list[str]:
    """Communities at `level`, plus coarser ones with no children (their part of the graph does
    not split further), so every clustered entity is covered once."""
    return sorted(c["community_id"] for c in searcher.communities
                  if c["level"] == level or (c["level"] < level and not c["children_ids"]))


def rank_reports(searcher, q: np.ndarray, level: int, limit: int) -> list[dict]:
    reports = searcher.reports(covering_communities(searcher, level))
    sims = searcher.similarity("report", q, sorted(reports)) if searcher.has_vectors("report") else {}
    ranked = sorted(reports.values(), key=lambda r: (-sims.get(r["community_id"], -1.0), -r["rating"], r["community_id"]))[:limit]
    # provenance: the community's chunk nearest the question, and all its chunks and documents
    by_id = {c["community_id"]: c for c in searcher.communities}
    chunk_ids = {r["community_id"]: searcher.community_chunks(by_id[r["community_id"]]) for r in ranked}
    every = sorted({c for cs in chunk_ids.values() for c in cs})
    chunk_sims = searcher.similarity("chunk", q, every)
    doc_of = searcher.chunk_docs(every)
    out = []
    for r in ranked:
        cid, cs = r["community_id"], [c for c in chunk_ids[r["community_id"]] if c in doc_of]
        if not cs:
            continue
        best = max(cs, key=lambda c: (chunk_sims.get(c, -1.0), c))
        out.append({"kind": "report", "community_id": cid, "level": r["level"], "report_title": r["title"],
                    "score": round(sims.get(cid, 0.0), 4), "rating": r["rating"], "text": r["full_content"],
                    "doc_id": doc_of[best], "chunk_id": best,
                    "doc_ids": sorted({doc_of[c] for c in cs}), "chunk_ids": cs})
    return out


def search(searcher, question: str, q: np.ndarray, top_k: int, level: int | None = None,
           use_llm: bool | None = None, **_) -> dict:
    qc = searcher.config.query
    level = default_level(searcher) if level is None else level
    llm = searcher.llm
    use_llm = bool(llm.model) if use_llm is None else use_llm
    reports = rank_reports(searcher, q, level, qc.global_max_reports if use_llm else top_k)
    result = {"level": level, "evidence": reports}
    if not use_llm:
        return result
    llm.require("global map-reduce")
    batches = map_batches(reports, qc.global_map_tokens)
    calls = complete(searcher, [map_request(question, reports, batch, llm) for batch in batches])
    points, failed = [], 0
    for (_, response, _), batch in zip(calls, batches):
        if not response.ok:
            failed += 1
            continue
        points += parse_points(response.text, batch)
    kept = sorted((p for p in points if p["score"] > 0), key=lambda p: (-p["score"], p["description"]))
    dropped = len(points) - len(kept)
    kept = _unique(kept)  # a small model repeats itself; a point said twice is one point
    result.update(points=kept, dropped_points=dropped, failed_maps=failed)
    if not kept:
        result.update(answer=NO_DATA, citations=[], llm=usage(llm, calls))
        return result
    lines = [f"- (score {p['score']}) {p['description']} [{', '.join(map(str, p['reports']))}]" for p in kept]
    used, _ = take_within(lines, lines, qc.global_reduce_tokens, at_least=1)
    reduce_request = LLMRequest(messages=(("system", REDUCE_SYSTEM + "\n".join(used)), ("user", question)),
                                max_tokens=min(llm.max_tokens, 800), temperature=llm.temperature, prompt_version=REDUCE_VERSION)
    ((_, response, _),) = final = complete(searcher, [reduce_request])
    result["llm"] = usage(llm, calls + final)
    if not response.ok:
        result.update(answer=None, answer_error=response.error)
        return result
    cited = sorted({int(n) for group in re.findall(r"\[([\d,\s]+)\]", response.text) for n in re.findall(r"\d+", group)
                    if 0 < int(n) <= len(reports)})
    result["answer"] = response.text.strip()
    result["citations"] = [{"n": n, "community_id": reports[n - 1]["community_id"], "doc_ids": reports[n - 1]["doc_ids"]} for n in cited]
    return result


def _unique(points: list[dict]) -> list[dict]:
    """Points with the same description (case and spacing aside) merged: best score, all citations."""
    merged: dict[str, dict] = {}
    for p in points:
        key = " ".join(p["description"].casefold().split())
        if key in merged:
            merged[key]["reports"] = sorted(set(merged[key]["reports"]) | set(p["reports"]))
        else:
            merged[key] = {**p}
    return list(merged.values())


def map_batches(reports: list[dict], budget: int) -> list[list[int]]:
    """Evidence numbers (1-based) per map prompt, each batch within `budget` tokens."""
    batches, current, used = [], [], 0
    for n, tokens in enumerate(count_tokens([report_block(i + 1, r) for i, r in enumerate(reports)]), 1):
        if current and used + tokens > budget:
            batches.append(current)
            current, used = [], 0
        current.append(n)
        used += tokens
    return batches + ([current] if current else [])


def report_block(n: int, report: dict) -> str:
    return f"[Report {n}] {report['text']}"


def map_request(question: str, reports: list[dict], batch: list[int], llm) -> LLMRequest:
    blocks = "\n\n".join(report_block(n, reports[n - 1]) for n in batch)
    return LLMRequest(messages=(("system", MAP_SYSTEM + blocks), ("user", question)), json_schema=MAP_SCHEMA,
                      max_tokens=min(llm.max_tokens, 800), temperature=llm.temperature, prompt_version=MAP_VERSION)


def parse_points(text: str, batch: list[int]) -> list[dict]:
    """Points from a map answer; scores clamped to 0-100, citations limited to the batch's reports.
    An answer that is not JSON yields no points."""
    try:
        data = loads_lenient(text)
    except ParseError:
        return []
    items = data.get("points", []) if isinstance(data, dict) else data if isinstance(data, list) else []
    points = []
    for item in items:
        if not isinstance(item, dict) or not str(item.get("description", "")).strip():
            continue
        try:
            score = max(0, min(100, int(float(item.get("score", 0)))))
        except (TypeError, ValueError):
            score = 0
        cited = [int(n) for n in re.findall(r"\d+", json.dumps(item.get("reports", []))) if int(n) in batch]
        points.append({"description": str(item["description"]).strip(), "score": score, "reports": cited or list(batch)})
    return points


def usage(llm, calls) -> dict:
    return {"model": llm.model, "calls": len(calls), "cache_hits": sum(hit for _, _, hit in calls),
            "prompt_tokens": sum(r.prompt_tokens for _, r, hit in calls if not hit),
            "completion_tokens": sum(r.completion_tokens for _, r, hit in calls if not hit)}

"""Hybrid lexical + dense retrieval (mode `fusion`): BM25 over chunks (the document's title and
the chunk's text; engines.lexical) and vector search over chunks, each `query.fusion_candidates`
deep, merged by reciprocal rank fusion (Cormack et al. 2009): a chunk scores the sum over the
lists of weight / (60 + its rank). With `query.fusion_method: convex` the lists' scores are
merged instead (Bruch et al. 2023, "An Analysis of Fusion Functions for Hybrid Retrieval"):
each list's scores min-max normalised over the list, a chunk a list misses scoring 0 there, and
the weighted mean taken. The graph mode seeds its passages from the same ranking.
"""

from __future__ import annotations

import numpy as np

RRF_K = 60


def reciprocal_rank_fusion(lists: list[list[str]], weights: list[float] | None = None, k: int = RRF_K) -> list[tuple[str, float]]:
    """Items of ranked lists by fused score, best first (ties by id)."""
    weights = weights or [1.0] * len(lists)
    scores: dict[str, float] = {}
    for ranked, weight in zip(lists, weights):
        if weight <= 0:
            continue
        for rank, item in enumerate(dict.fromkeys(ranked), 1):
            scores[item] = scores.get(item, 0.0) + weight / (k + rank)
    return sorted(scores.items(), key=lambda t: (-t[1], t[0]))


def convex_fusion(lists: list[list[tuple[str, float]]], weights: list[float] | None = None) -> list[tuple[str, float]]:
    """Items of scored lists by the weighted mean of their min-max normalised scores, best first
    (ties by id); an item a list does not hold scores 0 there."""
    weights = weights or [1.0] * len(lists)
    total = sum(w for w in weights if w > 0) or 1.0
    scores: dict[str, float] = {}
    for scored, weight in zip(lists, weights):
        if weight <= 0 or not scored:
            continue
        best = dict(scored[::-1])  # an id listed twice keeps its first (best) score
        lo, hi = min(best.values()), max(best.values())
        for item, s in best.items():
            norm = 1.0 if hi - lo <= 1e-12 else (s - lo) / (hi - lo)
            scores[item] = scores.get(item, 0.0) + weight / total * norm
    return sorted(scores.items(), key=lambda t: (-t[1], t[0]))


def ranked_chunks(searcher, question: str, q: np.ndarray, depth: int) -> list[tuple[str, float]]:
    """Chunks by fused dense and BM25 results, each list `depth` deep (query.fusion_method)."""
    qc = searcher.config.query
    lists, weights = [], []
    if qc.fusion_dense_weight > 0:
        lists.append(searcher.nearest("chunk", q, depth))
        weights.append(qc.fusion_dense_weight)
    if qc.fusion_lexical_weight > 0:
        lists.append(searcher.lexical_search("chunk", question, depth))
        weights.append(qc.fusion_lexical_weight)
    if qc.fusion_method == "convex":
        return convex_fusion(lists, weights)
    return reciprocal_rank_fusion([[c for c, _ in scored] for scored in lists], weights)


def search(searcher, question: str, q: np.ndarray, top_k: int) -> dict:
    depth = max(top_k, searcher.config.query.fusion_candidates)
    return {"evidence": searcher.chunk_evidence(ranked_chunks(searcher, question, q, depth)[:top_k])}

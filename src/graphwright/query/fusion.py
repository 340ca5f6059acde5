"""Hybrid lexical + dense retrieval (mode `fusion`): BM25 over chunks (the document's title and
the chunk's text; engines.lexical) and vector search over chunks, each `query.fusion_candidates`
deep, merged by reciprocal rank fusion (Cormack et al. 2009): a chunk scores the sum over the
lists of weight / (60 + its rank). The graph mode seeds its passages from the same ranking.
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


def ranked_chunks(searcher, question: str, q: np.ndarray, depth: int) -> list[tuple[str, float]]:
    """Chunks by fused dense and BM25 rank, each list `depth` deep."""
    qc = searcher.config.query
    lists, weights = [], []
    if qc.fusion_dense_weight > 0:
        lists.append([c for c, _ in searcher.nearest("chunk", q, depth)])
        weights.append(qc.fusion_dense_weight)
    if qc.fusion_lexical_weight > 0:
        lists.append([c for c, _ in searcher.lexical_search("chunk", question, depth)])
        weights.append(qc.fusion_lexical_weight)
    return reciprocal_rank_fusion(lists, weights)


def search(searcher, question: str, q: np.ndarray, top_k: int) -> dict:
    depth = max(top_k, searcher.config.query.fusion_candidates)
    return {"evidence": searcher.chunk_evidence(ranked_chunks(searcher, question, q, depth)[:top_k])}

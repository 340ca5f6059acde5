"""Where the graph mode's walk restarts (HippoRAG 2): entity seeds from the facts the question
matches and from the names it links, and passage seeds from the fused dense + BM25 ranking.

- Facts: relationships ranked by BM25 over their description and, where the version has
  relationship vectors (embed.relationships), by vector similarity; a fact scores its score over
  the best one's, averaged over the two lists; the best `graph_facts` are kept (with
  `graph_fact_filter: linked`, the best of those with an end the question links). With the
  LLM extractor a relationship's description states the fact; with the `nlp` extractor it is
  the sentence the two names share, so fact matching there is matching the question to
  sentences that name two entities.
- Links: the entities named in the question (names and aliases as word n-grams) score 1; each
  name-like key of the question (keywords.question_keywords) links to those of its
  `graph_seeds_per_key` nearest entity names (embed.entity_names; else entity vectors) that it
  would be a synonym of (similarity at least search_index.synonym_threshold), by similarity;
  the `graph_name_matches` entity names (and aliases) BM25 ranks best for the question score
  their BM25 score over the best one's, times NAME_MATCH_CAP.
- Node specificity: an entity's score is divided by the number of chunks it is mentioned in and
  averaged over the facts it occurs in; the `graph_link_top` best entities are kept.
- Passages: every chunk of the fused ranking (`graph_passage_candidates` deep) scores its
  min-max normalised fused score times `graph_passage_weight`.
"""

from __future__ import annotations

import numpy as np

from graphwright.query.fusion import ranked_chunks
from graphwright.query.keywords import question_keywords


NAME_MATCH_CAP = 0.9  # a name BM25 matches in part links with less than a name the question contains


def minmax(scores: list[float]) -> list[float]:
    """Scores rescaled to [0, 1] (all 1 when they are equal)."""
    if not scores:
        return []
    lo, hi = min(scores), max(scores)
    return [1.0] * len(scores) if hi - lo <= 1e-12 else [(s - lo) / (hi - lo) for s in scores]


def matched_facts(searcher, question: str, q: np.ndarray) -> list[tuple[dict, float]]:
    """(relationship row, score) of the `graph_facts` best-matching relationships: each list's
    scores over its best, averaged over the lists (a fact one list misses scores 0 there)."""
    qc = searcher.config.query
    if qc.graph_facts < 1:
        return []
    lists = []
    if searcher.lexical("relationship") is not None:
        lists.append(searcher.lexical_search("relationship", question, qc.fusion_candidates))
    if searcher.has_vectors("relationship"):
        lists.append(searcher.nearest("relationship", q, qc.fusion_candidates))
    combined: dict[str, float] = {}
    for ranked in lists:
        best = max((s for _, s in ranked), default=0.0)
        for r, s in ranked:
            if best > 0 and s > 0:
                combined[r] = combined.get(r, 0.0) + s / best / len(lists)
    top = sorted(combined.items(), key=lambda t: (-t[1], t[0]))[: qc.graph_facts if qc.graph_fact_filter == "none" else None]
    rows = searcher.relationships([r for r, _ in top])
    return [(rows[r], s) for r, s in top if r in rows]


def linked_entities(searcher, question: str, q: np.ndarray) -> dict[str, float]:
    """Entity id -> link score: 1 for an entity the question names; else the larger of its
    nearest-name similarity and, for the `graph_name_matches` names BM25 ranks best for the
    question, NAME_MATCH_CAP x its BM25 score over the best one's. (A link score; node
    specificity divides it by the entity's chunks afterwards, in entity_seeds.)"""
    qc = searcher.config.query
    kind = "entity_name" if searcher.has_vectors("entity_name") else "entity"
    scores: dict[str, float] = {}
    keys = question_keywords(searcher, question)["low"]
    floor = searcher.config.search_index.synonym_threshold
    if keys:
        for key, v in zip(keys, searcher.embedder.encode(keys)):
            for e, s in searcher.nearest(kind, v, qc.graph_seeds_per_key):
                if s >= floor:
                    scores[e] = max(scores.get(e, 0.0), s)
    if qc.graph_name_matches and searcher.lexical("entity") is not None:
        ranked = searcher.lexical_search("entity", question, qc.graph_name_matches)
        best = max((s for _, s in ranked), default=0.0)
        for e, s in ranked:
            if best > 0 and s > 0:
                scores[e] = max(scores.get(e, 0.0), NAME_MATCH_CAP * s / best)
    for e in searcher.named_entities(question):
        scores[e] = 1.0
    return scores


def entity_seeds(searcher, question: str, q: np.ndarray) -> tuple[dict[int, float], list[dict]]:
    """(entity node -> reset weight, the facts used)."""
    qc = searcher.config.query
    graph = searcher.graph
    facts = matched_facts(searcher, question, q)
    linked = linked_entities(searcher, question, q) if qc.graph_links or qc.graph_fact_filter == "linked" else {}
    if qc.graph_fact_filter == "linked":  # a fact fits the question when it involves an entity the question links
        facts = [(r, s) for r, s in facts if r["source_id"] in linked or r["target_id"] in linked][: qc.graph_facts]
    sums: dict[str, list[float]] = {}
    for row, score in facts:
        for e in (row["source_id"], row["target_id"]):
            sums.setdefault(e, []).append(score)
    if qc.graph_links:
        for e, score in linked.items():
            sums.setdefault(e, []).append(score)
    if not sums:
        return {}, []
    ids = sorted(sums)
    nodes = graph.entity_nodes(ids)
    counts = graph.chunk_count(nodes)
    weights = {}
    for e, node, n in zip(ids, nodes.tolist(), counts.tolist()):
        if node >= 0:
            weights[node] = (sum(sums[e]) / len(sums[e])) / max(n, 1)
    top = sorted(weights.items(), key=lambda t: (-t[1], t[0]))[: qc.graph_link_top]
    return dict(top), [{"relationship_id": r["relationship_id"], "source": r["source"], "target": r["target"],
                        "description": r["description"], "score": round(s, 4)} for r, s in facts]


def passage_seeds(searcher, question: str, q: np.ndarray) -> tuple[dict[int, float], list[tuple[str, float]]]:
    """(chunk node -> reset weight, the fused ranking)."""
    qc = searcher.config.query
    ranked = ranked_chunks(searcher, question, q, qc.graph_passage_candidates)
    if not ranked or qc.graph_passage_weight <= 0:
        return {}, ranked
    nodes = searcher.graph.chunk_nodes([c for c, _ in ranked])
    return ({n: s * qc.graph_passage_weight for n, s in zip(nodes.tolist(), minmax([s for _, s in ranked])) if n >= 0}, ranked)

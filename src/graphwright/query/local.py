"""GraphRAG-style local search.

The question selects entities (vector similarity of name + description, plus a bonus when an
entity's name or alias occurs in the question); the chunks that support those entities join the
chunks nearest to the question; each chunk scores its own similarity plus `entity_weight` times the
best rarity-weighted score of the selected entities it mentions. The answer's context is assembled
within `query.local_context_tokens` in proportions: text units (the ranked chunks), community
reports, entities and relationships (the rest, shared), as GraphRAG's local search does.
"""

from __future__ import annotations

import math

import numpy as np

from graphwright.query.budget import take_within


def select_entities(searcher, question: str, q: np.ndarray, top: int, bonus: float) -> dict[str, float]:
    """Entity id -> score: vector neighbours of the question, and entities named in it (+ bonus)."""
    scores = dict(searcher.nearest("entity", q, top))
    named = searcher.named_entities(question)
    for e, s in searcher.similarity("entity", q, sorted(named)).items():
        scores[e] = max(scores.get(e, -1.0), s) + bonus
    return scores


def search(searcher, question: str, q: np.ndarray, top_k: int) -> dict:
    qc = searcher.config.query
    entity_scores = select_entities(searcher, question, q, qc.top_entities, qc.name_match_bonus)
    entities = sorted(searcher.entities(entity_scores).values(), key=lambda e: (-entity_scores[e["entity_id"]], e["entity_id"]))

    # an entity found in most chunks says little about which chunk answers: weight by rarity
    n = searcher.n_chunks
    boost = {e["entity_id"]: entity_scores[e["entity_id"]] * math.sqrt(math.log1p(n / max(e["n_chunks"], 1)) / math.log1p(n))
             for e in entities}
    chunk_boost, chunk_entities = entity_chunks(searcher, entities, boost, qc.local_entity_chunks)
    candidates = dict(searcher.nearest("chunk", q, qc.candidate_chunks))
    candidates.update(searcher.similarity("chunk", q, [c for c in chunk_boost if c not in candidates]))
    scored = sorted(((c, s + qc.entity_weight * chunk_boost.get(c, 0.0)) for c, s in candidates.items()),
                    key=lambda cs: (-cs[1], cs[0]))[:top_k]
    name_of = {e["entity_id"]: e["name"] for e in entities}
    evidence = searcher.chunk_evidence(scored, {c: [name_of[e] for e in chunk_entities(c)] for c, _ in scored})

    selected = [e["entity_id"] for e in entities]
    relationships = searcher.relationships_among(selected)
    reports = searcher.reports_of_entities(selected, limit=20)

    budget = qc.local_context_tokens
    text_budget = int(budget * qc.local_text_unit_prop)
    report_budget = int(budget * qc.local_community_prop)
    graph_budget = (budget - text_budget - report_budget) // 2
    evidence, text_used = take_within(evidence, [e["text"] for e in evidence], text_budget, at_least=1,
                                      counts=[e.get("n_tokens") for e in evidence])
    reports, report_used = take_within(reports, [r["full_content"] for r in reports], report_budget)
    entities, entity_used = take_within(entities, [entity_line(e) for e in entities], graph_budget)
    relationships, rel_used = take_within(relationships, [relationship_line(r) for r in relationships], graph_budget)
    return {
        "evidence": evidence,
        "entities": [
            {"entity_id": e["entity_id"], "name": e["name"], "type": e["type"], "score": round(entity_scores[e["entity_id"]], 4),
             "description": e["description"], "doc_ids": e["doc_ids"][:10], "chunk_ids": e["chunk_ids"][:10]}
            for e in entities
        ],
        "relationships": [trim_relationship(r) for r in relationships],
        "reports": [{k: r[k] for k in ("community_id", "level", "title", "summary", "rating")} for r in reports],
        "context_tokens": {"text_units": text_used, "reports": report_used, "entities": entity_used,
                           "relationships": rel_used, "budget": budget},
    }


def entity_chunks(searcher, entities: list[dict], boost: dict[str, float], limit: int):
    """(chunk id -> the best boost among the `entities` that mention it, for at most `limit`
    chunks: highest boost first, then those mentioning more of the entities; a function from a
    chunk id to the entity ids among `entities` it mentions, in their order)."""
    if not searcher.has_graph:
        lists = [(e["entity_id"], e["chunk_ids"]) for e in entities]
        mentions: dict[str, list[str]] = {}
        for e, chunk_ids in lists:
            for c in chunk_ids:
                mentions.setdefault(c, []).append(e)
        ranked = sorted(mentions, key=lambda c: (-max(boost[e] for e in mentions[c]), -len(mentions[c]), c))[:limit]
        return {c: max(boost[e] for e in mentions[c]) for c in ranked}, lambda c: mentions.get(c, [])
    graph = searcher.graph
    nodes = graph.entity_nodes([e["entity_id"] for e in entities])
    parts = [(graph.chunks_of(int(node)), boost[e["entity_id"]]) for e, node in zip(entities, nodes.tolist()) if node >= 0]
    if not parts:
        return {}, lambda c: []
    chunks = np.concatenate([p for p, _ in parts])
    weights = np.concatenate([np.full(len(p), w) for p, w in parts])
    # counted over the node range, not sorted: a hub entity lists most of the corpus's chunks
    counts = np.bincount(chunks, minlength=graph.n_entities + graph.n_chunks)
    best = np.full(len(counts), -np.inf)
    np.maximum.at(best, chunks, weights)
    candidates = np.flatnonzero(counts)  # in node order, which is chunk id order
    levels = np.unique([w for _, w in parts])  # one boost per entity: few distinct values
    key = np.searchsorted(levels, best[candidates]) * (len(parts) + 1) + counts[candidates]
    top = _top(key, candidates, limit)
    unique, best = candidates, best[candidates]
    selected = {n: i for i, n in enumerate(nodes.tolist()) if n >= 0}

    def mentioned_by(chunk_id: str) -> list[str]:
        node = graph.chunk_nodes([chunk_id])[0]
        found = [selected[e] for e in graph.entities_of(int(node)).tolist() if e in selected] if node >= 0 else []
        return [entities[i]["entity_id"] for i in sorted(found)]

    return dict(zip(graph.ids(unique[top]), best[top].tolist())), mentioned_by


def _top(key: np.ndarray, ids: np.ndarray, limit: int) -> np.ndarray:
    """Positions of the `limit` largest keys, ties by id, in that order, without sorting them all."""
    if len(key) > limit:
        kth = np.partition(key, len(key) - limit)[len(key) - limit]
        above = np.flatnonzero(key > kth)
        chosen = np.concatenate([above, np.flatnonzero(key == kth)[: limit - len(above)]])  # ids ascend
    else:
        chosen = np.arange(len(key))
    return chosen[np.lexsort((ids[chosen], -key[chosen]))]


def entity_line(e: dict) -> str:
    return f"{e['name']} ({e['type']}): {e['description']}"


def relationship_line(r: dict) -> str:
    return f"{r['source']} - {r['target']}: {r['description']}"


def trim_relationship(r: dict) -> dict:
    return {**{k: v for k, v in r.items() if k not in ("chunk_ids", "doc_ids")}, "chunk_ids": r["chunk_ids"][:10], "doc_ids": r["doc_ids"][:10]}

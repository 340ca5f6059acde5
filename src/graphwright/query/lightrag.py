"""LightRAG's query modes over the published graph.

- `low`: the low-level keywords, joined, search the entity vectors; the chunks come from those
  entities (in entity rank order), their relationships are context.
- `high`: the high-level keywords search the relationship vectors; the chunks come from those
  relationships, their endpoint entities are context.
- `hybrid`: both, chunk lists merged round-robin; `mix`: hybrid plus plain vector search over
  chunks, merged round-robin (vector chunks first).

Each entity or relationship contributes at most `query.lightrag_chunks_per_item` of its chunks,
the ones nearest the question (LightRAG's vector pick of related chunks).
"""

from __future__ import annotations

import numpy as np

from graphwright.query.keywords import extract_keywords
from graphwright.query.local import trim_relationship


def search(searcher, question: str, q: np.ndarray, top_k: int, mode: str, use_llm: bool | None = None, **_) -> dict:
    qc = searcher.config.query
    keywords = extract_keywords(searcher, question, use_llm)
    lists, via, entities, relationships = [], {}, {}, {}
    if mode == "mix":
        lists.append([c for c, _ in searcher.nearest("chunk", q, top_k)])
    if mode in ("low", "hybrid", "mix"):
        v = searcher.encode(", ".join(keywords["low"])) if keywords["low"] else q
        hits = searcher.nearest("entity", v, qc.lightrag_top_entities)
        rows = searcher.entities([e for e, _ in hits])
        ranked = [(rows[e], s) for e, s in hits if e in rows]
        entities.update({e["entity_id"]: {**e, "score": s} for e, s in ranked})
        for r in searcher.relationships_among([e["entity_id"] for e, _ in ranked], touching=True, limit=qc.lightrag_top_relationships):
            relationships.setdefault(r["relationship_id"], r)
        lists.append(_chunks_of(searcher, q, [(e["name"], searcher.entity_chunks(e)) for e, _ in ranked], via))
    if mode in ("high", "hybrid", "mix"):
        v = searcher.encode(", ".join(keywords["high"])) if keywords["high"] else q
        hits = searcher.nearest("relationship", v, qc.lightrag_top_relationships)
        rows = searcher.relationships([r for r, _ in hits])
        ranked = [(rows[r], s) for r, s in hits if r in rows]
        for r, s in ranked:
            relationships.setdefault(r["relationship_id"], {**r, "score": s})
        ends = searcher.entities({x for r, _ in ranked for x in (r["source_id"], r["target_id"])})
        for e in ends.values():
            entities.setdefault(e["entity_id"], {**e, "score": None})
        supports = searcher.relationship_chunks([r for r, _ in ranked])
        lists.append(_chunks_of(searcher, q, [(f"{r['source']} - {r['target']}", supports.get(r["relationship_id"], [])) for r, _ in ranked], via))
    order = _round_robin(lists)[:top_k]
    sims = searcher.similarity("chunk", q, order)
    evidence = searcher.chunk_evidence([(c, sims.get(c, 0.0)) for c in order], via)
    return {
        "keywords": keywords,
        "evidence": evidence,
        "entities": [{"entity_id": e["entity_id"], "name": e["name"], "type": e["type"], "score": e["score"] and round(e["score"], 4),
                      "description": e["description"], "doc_ids": e["doc_ids"][:10], "chunk_ids": e["chunk_ids"][:10]}
                     for e in entities.values()],
        "relationships": [trim_relationship(r) for r in relationships.values()],
    }


def _chunks_of(searcher, q: np.ndarray, items: list[tuple[str, list[str]]], via: dict[str, list[str]]) -> list[str]:
    """Chunks of ranked items (label, chunk ids): each item's nearest chunks to the question, in item order."""
    per_item = searcher.config.query.lightrag_chunks_per_item
    sims = searcher.similarity("chunk", q, sorted({c for _, cs in items for c in cs}))
    out, seen = [], set()
    for label, chunk_ids in items:
        for c in sorted(chunk_ids, key=lambda c: (-sims.get(c, -1.0), c))[:per_item]:
            via.setdefault(c, [])
            if label not in via[c]:
                via[c].append(label)
            if c not in seen:
                seen.add(c)
                out.append(c)
    return out


def _round_robin(lists: list[list[str]]) -> list[str]:
    out, seen = [], set()
    for row in range(max((len(x) for x in lists), default=0)):
        for x in lists:
            if row < len(x) and x[row] not in seen:
                seen.add(x[row])
                out.append(x[row])
    return out

"""What each chunk contributed to the published graph: its mentions and assertions mapped onto
the resolved entities and relationships. LightRAG's delete rebuilds an entity or relationship
that keeps other chunks from what each remaining chunk's extraction said about it, so its export
writes these as LightRAG's per-chunk extraction records."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from graphwright.exports.graph import PublishedGraph
from graphwright.exports.names import UNTYPED


@dataclass
class ChunkEntity:
    types: Counter = field(default_factory=Counter)  # mention type -> occurrences in the chunk
    descriptions: list[str] = field(default_factory=list)  # distinct, in name order

    @property
    def type(self) -> str:
        """The chunk's most frequent type for the entity, a typed one before UNTYPED (as resolve
        chooses an entity's type from its mentions)."""
        ranked = sorted(self.types.items(), key=lambda kv: (kv[0] == UNTYPED, -kv[1], kv[0]))
        return ranked[0][0] if ranked else UNTYPED


@dataclass
class ChunkExtraction:
    entities: dict[str, ChunkEntity] = field(default_factory=dict)  # entity_id ->
    relationships: dict[str, list[str]] = field(default_factory=dict)  # relationship_id -> distinct descriptions


def by_chunk(graph: PublishedGraph) -> dict[str, ChunkExtraction]:
    """chunk_id -> its extraction, restricted to what the published rows say the chunk supports
    (an entity or relationship whose chunk_ids hold the chunk), in a fixed order."""
    mentions, assertions, entity_of = graph.extractions()
    supports = {(c, e["entity_id"]) for e in graph.entities for c in e["chunk_ids"]}
    relationship_of = {(min(r["source_id"], r["target_id"]), max(r["source_id"], r["target_id"])): r["relationship_id"]
                       for r in graph.relationships}
    supported = {(c, r["relationship_id"]) for r in graph.relationships for c in r["chunk_ids"]}
    out: dict[str, ChunkExtraction] = defaultdict(ChunkExtraction)
    for m in sorted(mentions, key=lambda m: (m["chunk_id"], m["name"])):
        entity_id = entity_of.get(m["name"])
        if entity_id is None or (m["chunk_id"], entity_id) not in supports:
            continue
        entry = out[m["chunk_id"]].entities.setdefault(entity_id, ChunkEntity())
        entry.types[m["type"]] += m["count"]
        if m["description"] and m["description"] not in entry.descriptions:
            entry.descriptions.append(m["description"])
    for a in sorted(assertions, key=lambda a: (a["chunk_id"], a["source"], a["target"])):
        ends = entity_of.get(a["source"]), entity_of.get(a["target"])
        if None in ends or ends[0] == ends[1]:
            continue
        relationship_id = relationship_of.get((min(ends), max(ends)))
        if (a["chunk_id"], relationship_id) not in supported:
            continue
        descriptions = out[a["chunk_id"]].relationships.setdefault(relationship_id, [])
        if a["description"] and a["description"] not in descriptions:
            descriptions.append(a["description"])
    return dict(out)

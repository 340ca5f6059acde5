"""LightRAG's per-chunk extraction records, written from our mentions and assertions.

When LightRAG deletes a document, every entity and relationship that keeps chunks of other
documents is rebuilt from what those chunks' extractions said about it: it reads the keys in
each chunk's `llm_cache_list` from `kv_store_llm_response_cache.json` and parses each record's
`return` as an extraction answer (its JSON form: {"entities": [{name, type, description}],
"relationships": [{source, target, keywords, description}]}). Without them it keeps the deleted
chunks' descriptions and references ("Extraction cache missing").

One record per chunk, with the names and types the export gives the graph (LightRAG matches the
parsed names against its nodes) and, per entity and relationship, what that chunk said about
it; no record names an entity or relationship the published rows do not tie to the chunk. The
key is LightRAG's form ("default:extract:" + md5) over the chunk id and the record, so it can
never equal a key LightRAG computes from a prompt of its own.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

from graphwright.exports import relations
from graphwright.exports.chunk_extractions import by_chunk
from graphwright.exports.graph import PublishedGraph
from graphwright.exports.names import lightrag_type


@dataclass
class Records:
    cache: dict[str, dict] = field(default_factory=dict)  # kv_store_llm_response_cache.json
    key_of: dict[str, str] = field(default_factory=dict)  # chunk_id -> its record's key


def extraction_records(graph: PublishedGraph, name: dict[str, str], entity_type: dict[str, str],
                       ends: dict[str, tuple[str, str]], created: int) -> Records:
    """`name`/`entity_type`: entity_id -> as exported; `ends`: relationship_id -> (src, tgt) names."""
    extractions = by_chunk(graph)
    ends_ids = {r["relationship_id"]: (r["source_id"], r["target_id"]) for r in graph.relationships}
    out = Records()
    for chunk in graph.chunks:
        found = extractions.get(chunk["chunk_id"])
        entities, relationships = [], []
        for entity_id, said in sorted(found.entities.items(), key=lambda kv: name[kv[0]]) if found else ():
            entities.append({"name": name[entity_id], "type": lightrag_type(said.type),
                             "description": " ".join(said.descriptions) or f"{name[entity_id]} is named in this passage."})
        for relationship_id, said in sorted(found.relationships.items(), key=lambda kv: ends[kv[0]]) if found else ():
            src, tgt = ends[relationship_id]
            types = tuple(entity_type[e] for e in ends_ids[relationship_id])
            relationships.append({"source": src, "target": tgt, "keywords": relations.keywords(said, (src, tgt), types),
                                  "description": relations.description(" ".join(said), (src, tgt), 1)})
        answer = json.dumps({"entities": entities, "relationships": relationships}, ensure_ascii=False)
        key = "default:extract:" + hashlib.md5(f"{chunk['chunk_id']}\n{answer}".encode()).hexdigest()
        out.cache[key] = {"return": answer, "cache_type": "extract", "chunk_id": chunk["chunk_id"],
                          "original_prompt": f"graphwright export: what the index's extractor found in chunk {chunk['chunk_id']}",
                          "queryparam": None, "create_time": created, "update_time": created}
        out.key_of[chunk["chunk_id"]] = key
    return out

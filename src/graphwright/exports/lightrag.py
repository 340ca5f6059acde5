"""LightRAG 1.5 working directory for one published version (default JSON/NanoVectorDB/NetworkX
storages, no workspace):

    kv_store_full_docs.json, kv_store_text_chunks.json, kv_store_doc_status.json,
    kv_store_full_entities.json, kv_store_full_relations.json, kv_store_entity_chunks.json,
    kv_store_relation_chunks.json, kv_store_llm_response_cache.json,
    vdb_entities.json, vdb_relationships.json, vdb_chunks.json, graph_chunk_entity_relation.graphml

    .env                                 lightrag-server's settings (graphwright.exports.endpoints)

LightRAG's conventions, applied to our rows: graph nodes are named by entity name, as LightRAG
normalises names, and typed in lowercase (graphwright.exports.names); a node's and an edge's
`source_id` lists chunk ids joined by "<SEP>"; vector rows of entities and relationships are
keyed "ent-"/"rel-" + md5 of the name(s) (LightRAG recomputes these keys when it edits or
deletes); relationships carry keywords and a description (graphwright.exports.relations).
Every document has its `full_entities` and `full_relations` rows (empty ones included), and
every chunk its extraction record (graphwright.exports.lightrag_records): what LightRAG's delete
needs to rebuild what the remaining documents support. Documents and chunks keep our
content-derived ids. Entity and chunk vectors are our stored embeddings; relationships have none
stored, so they are embedded here with the index's own embedder (from LightRAG's relationship
text: keywords, ends, description).
"""

from __future__ import annotations

import base64
import hashlib
import json
import zlib
from pathlib import Path

import networkx as nx
import numpy as np

from graphwright.exports import relations
from graphwright.exports.endpoints import endpoints, lightrag_env
from graphwright.exports.graph import PublishedGraph
from graphwright.exports.lightrag_records import extraction_records
from graphwright.exports.names import lightrag_name, lightrag_type, unique_names

SEP = "<SEP>"  # lightrag.constants.GRAPH_FIELD_SEP


def mdhash_id(text: str, prefix: str) -> str:
    """LightRAG's id for entity and relationship vector rows (lightrag.utils.compute_mdhash_id)."""
    return prefix + hashlib.md5(text.encode()).hexdigest()


def _vdb(rows: list[dict], vectors: np.ndarray, dim: int, created: int) -> dict:
    """A NanoVectorDB file: metadata rows, each with its float16+zlib+base64 vector as LightRAG
    stores it, and the float32 matrix (base64) whose row i belongs to rows[i]."""
    vectors = vectors.reshape(-1, dim).astype(np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    vectors = vectors / np.where(norms == 0, 1, norms)
    data = [{"__id__": r.pop("__id__"), "__created_at__": created, **r,
             "vector": base64.b64encode(zlib.compress(v.astype(np.float16).tobytes())).decode()}
            for r, v in zip(rows, vectors)]
    return {"embedding_dim": dim, "data": data, "matrix": base64.b64encode(vectors.tobytes()).decode()}


def _stack(ids: list[str], vectors: dict[str, np.ndarray], dim: int, what: str) -> np.ndarray:
    missing = [i for i in ids if i not in vectors]
    if missing:
        raise ValueError(f"{len(missing)} {what} rows have no stored vector")
    return np.vstack([vectors[i] for i in ids]) if ids else np.zeros((0, dim), np.float32)


def files(graph: PublishedGraph) -> dict[str, object]:
    """File name -> JSON document or networkx graph."""
    created = int(graph.published_at.timestamp())
    created_iso = graph.published_at.isoformat()
    file_path = {d["doc_id"]: d["source_key"] for d in graph.documents}
    name = unique_names(graph.entities, lightrag_name)
    entity_type = {e["entity_id"]: lightrag_type(e["type"]) for e in graph.entities}

    def paths(doc_ids: list[str]) -> str:
        return SEP.join(file_path[d] for d in doc_ids if d in file_path)

    chunk_vectors, entity_vectors = graph.vectors("chunk"), graph.vectors("entity")
    dim = next((len(v) for v in (*chunk_vectors.values(), *entity_vectors.values())), 0)

    relationships = []  # (relationship id, src name, tgt name, edge attributes)
    for r in graph.relationships:
        src, tgt = sorted((name[r["source_id"]], name[r["target_id"]]))
        ends, types = (name[r["source_id"]], name[r["target_id"]]), (entity_type[r["source_id"]], entity_type[r["target_id"]])
        edge = {"weight": float(r["weight"]), "description": relations.description(r["description"], ends, len(r["chunk_ids"])),
                "keywords": relations.keywords([r["description"]], ends, types),
                "source_id": SEP.join(r["chunk_ids"]), "file_path": paths(r["doc_ids"]), "created_at": created}
        relationships.append((r["relationship_id"], src, tgt, edge))

    records = extraction_records(graph, name, entity_type, {rid: (src, tgt) for rid, src, tgt, _ in relationships}, created)
    chunks = {c["chunk_id"]: {"content": c["text"], "full_doc_id": c["doc_id"], "tokens": c["n_tokens"], "chunk_order_index": c["chunk_index"],
                              "file_path": file_path.get(c["doc_id"], ""), "llm_cache_list": [k for k in [records.key_of.get(c["chunk_id"])] if k],
                              "create_time": created, "update_time": created}
              for c in graph.chunks}
    chunks_of_doc: dict[str, list[str]] = {}
    for c in graph.chunks:
        chunks_of_doc.setdefault(c["doc_id"], []).append(c["chunk_id"])
    # every document needs both rows, even empty: LightRAG's delete refuses (409) without them
    entities_of_doc: dict[str, set[str]] = {d["doc_id"]: set() for d in graph.documents}
    for e in graph.entities:
        for d in e["doc_ids"]:
            entities_of_doc.setdefault(d, set()).add(name[e["entity_id"]])
    pairs_of_doc: dict[str, set[tuple[str, str]]] = {d["doc_id"]: set() for d in graph.documents}
    for r, (_, src, tgt, _) in zip(graph.relationships, relationships):
        for d in r["doc_ids"]:
            pairs_of_doc.setdefault(d, set()).add((src, tgt))

    kg = nx.Graph()
    for e in graph.entities:
        kg.add_node(name[e["entity_id"]], entity_id=name[e["entity_id"]], entity_type=entity_type[e["entity_id"]],
                    description=e["description"], source_id=SEP.join(e["chunk_ids"]), file_path=paths(e["doc_ids"]), created_at=created)
    for _, src, tgt, edge in relationships:
        kg.add_edge(src, tgt, **edge)

    relation_text = [f"{edge['keywords']}\t{src}\n{tgt}\n{edge['description']}" for _, src, tgt, edge in relationships]
    relation_vectors = graph.embedder().encode(relation_text) if relation_text else np.zeros((0, dim), np.float32)
    if relation_text and relation_vectors.shape[1] != dim:
        raise ValueError(f"the index's embedder gives {relation_vectors.shape[1]} dimensions, its stored vectors {dim}")

    return {
        "kv_store_full_docs.json": {d["doc_id"]: {"content": d["text"], "file_path": d["source_key"]} for d in graph.documents},
        "kv_store_text_chunks.json": chunks,
        "kv_store_doc_status.json": {
            d["doc_id"]: {"status": "processed", "content_summary": d["text"][:100], "content_length": len(d["text"]),
                          "file_path": d["source_key"], "created_at": created_iso, "updated_at": created_iso,
                          "chunks_count": len(chunks_of_doc.get(d["doc_id"], [])), "chunks_list": chunks_of_doc.get(d["doc_id"], []),
                          "metadata": {}, "content_hash": hashlib.md5(d["text"].encode()).hexdigest()}
            for d in graph.documents
        },
        "kv_store_full_entities.json": {d: {"entity_names": sorted(n), "count": len(n)} for d, n in sorted(entities_of_doc.items())},
        "kv_store_full_relations.json": {d: {"relation_pairs": [list(p) for p in sorted(ps)], "count": len(ps)} for d, ps in sorted(pairs_of_doc.items())},
        "kv_store_entity_chunks.json": {name[e["entity_id"]]: {"chunk_ids": e["chunk_ids"], "count": len(e["chunk_ids"])} for e in graph.entities},
        "kv_store_relation_chunks.json": {f"{src}{SEP}{tgt}": {"chunk_ids": edge["source_id"].split(SEP), "count": len(edge["source_id"].split(SEP))}
                                          for _, src, tgt, edge in relationships},
        "kv_store_llm_response_cache.json": records.cache,
        "vdb_chunks.json": _vdb(
            [{"__id__": c["chunk_id"], "full_doc_id": c["doc_id"], "content": c["text"], "file_path": file_path.get(c["doc_id"], "")}
             for c in graph.chunks],
            _stack([c["chunk_id"] for c in graph.chunks], chunk_vectors, dim, "chunk"), dim, created),
        "vdb_entities.json": _vdb(
            [{"__id__": mdhash_id(name[e["entity_id"]], "ent-"), "entity_name": name[e["entity_id"]], "source_id": SEP.join(e["chunk_ids"]),
              "content": f"{name[e['entity_id']]}\n{e['description']}", "file_path": paths(e["doc_ids"])} for e in graph.entities],
            _stack([e["entity_id"] for e in graph.entities], entity_vectors, dim, "entity"), dim, created),
        "vdb_relationships.json": _vdb(
            [{"__id__": mdhash_id(src + tgt, "rel-"), "src_id": src, "tgt_id": tgt, "source_id": edge["source_id"], "content": text,
              "file_path": edge["file_path"]} for (_, src, tgt, edge), text in zip(relationships, relation_text)],
            relation_vectors, dim, created),
        "graph_chunk_entity_relation.graphml": kg,
    }


def write(graph: PublishedGraph, out: Path) -> dict:
    """Write the LightRAG working directory `out` (which must not exist yet)."""
    out.mkdir(parents=True)
    counts = {}
    for file_name, content in files(graph).items():
        if isinstance(content, nx.Graph):
            nx.write_graphml(content, out / file_name)
            counts[file_name] = {"nodes": content.number_of_nodes(), "edges": content.number_of_edges()}
        else:
            (out / file_name).write_text(json.dumps(content, ensure_ascii=False, sort_keys=False))
            counts[file_name] = len(content["data"]) if file_name.startswith("vdb_") else len(content)
    dim = json.loads((out / "vdb_entities.json").read_text())["embedding_dim"]
    (out / ".env").write_text(lightrag_env(endpoints(graph.index.config, graph.embedding_model, dim)))
    return {"format": "lightrag", "version": graph.version, "rows": counts, "embedding_dim": dim, "embedding_model": graph.embedding_model}

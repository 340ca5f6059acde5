"""Microsoft GraphRAG 3.3 output layout for one published version.

    <out>/settings.yaml, <out>/.env      graphrag config: output/ tables, output/lancedb vectors, endpoints
    <out>/input/                         empty: new documents for `graphrag update`
    <out>/output/{entities,relationships,communities,community_reports,text_units,documents}.parquet
    <out>/output/lancedb/{entity_description,text_unit_text,community_full_content}.lance

Column names and types follow graphrag 3.3's final tables (graphrag.data_model.schemas). Its
conventions that its readers and its `update` depend on, applied to our rows: titles and types
as its extractor writes them (uppercase, cleaned: graphwright.exports.names), since `update`
merges entities by exact title; `frequency` is the number of text units; relationships name their
ends by title, in title order; a document's title is its file name with the extension (what
`update` compares with input/), and `creation_date` is graphrag's format. Kept as ours, since
nothing of graphrag's derives them: `id` is our content-derived id (graphrag uses uuid4);
`human_readable_id` numbers rows in id order; a community's `community` number is our
`human_id`, `parent` is -1 at the top level; a report's `id` is its community's id (graphrag
hashes the report text; the community_full_content vectors, which DRIFT joins by id, use the
same key); `n_tokens` counts our chunker's (MiniLM) tokens, which graphrag only reads as a size.
The vector tables hold our stored embeddings (one row per id), so questions must be embedded
with the same model (see graphwright.exports.embed_server). `.env` names the endpoints
(graphwright.exports.endpoints); `input/` is where `graphrag update` looks for new documents.
"""

from __future__ import annotations

import json
import os
from pathlib import Path, PurePosixPath

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from graphwright.exports import relations
from graphwright.exports.endpoints import endpoints, graphrag_env
from graphwright.exports.graph import PublishedGraph
from graphwright.exports.names import graphrag_title, graphrag_type, unique_names

TABLES = ("entities", "relationships", "communities", "community_reports", "text_units", "documents")
# graphrag's embedding names (graphrag.config.embeddings) -> our stored embedding kind
VECTOR_TABLES = {"entity_description": "entity", "text_unit_text": "chunk", "community_full_content": "report"}

CREATION_DATE = "%Y-%m-%d %H:%M:%S %z"  # graphrag_storage's format for a file's creation date
_STRS = pa.list_(pa.string())
_INTS = pa.list_(pa.int64())
_FINDINGS = pa.list_(pa.struct([("explanation", pa.string()), ("summary", pa.string())]))

SCHEMAS = {
    "entities": pa.schema([("id", pa.string()), ("human_readable_id", pa.int64()), ("title", pa.string()), ("type", pa.string()),
                           ("description", pa.string()), ("text_unit_ids", _STRS), ("frequency", pa.int64()), ("degree", pa.int64())]),
    "relationships": pa.schema([("id", pa.string()), ("human_readable_id", pa.int64()), ("source", pa.string()), ("target", pa.string()),
                                ("description", pa.string()), ("weight", pa.float64()), ("combined_degree", pa.int64()),
                                ("text_unit_ids", _STRS)]),
    "communities": pa.schema([("id", pa.string()), ("human_readable_id", pa.int64()), ("community", pa.int64()), ("level", pa.int64()),
                              ("parent", pa.int64()), ("children", _INTS), ("title", pa.string()), ("entity_ids", _STRS),
                              ("relationship_ids", _STRS), ("text_unit_ids", _STRS), ("period", pa.string()), ("size", pa.int64())]),
    "community_reports": pa.schema([("id", pa.string()), ("human_readable_id", pa.int64()), ("community", pa.int64()), ("level", pa.int64()),
                                    ("parent", pa.int64()), ("children", _INTS), ("title", pa.string()), ("summary", pa.string()),
                                    ("full_content", pa.string()), ("rank", pa.float64()), ("rating_explanation", pa.string()),
                                    ("findings", _FINDINGS), ("full_content_json", pa.string()), ("period", pa.string()), ("size", pa.int64())]),
    "text_units": pa.schema([("id", pa.string()), ("human_readable_id", pa.int64()), ("text", pa.string()), ("n_tokens", pa.int64()),
                             ("document_id", pa.string()), ("entity_ids", _STRS), ("relationship_ids", _STRS), ("covariate_ids", _STRS)]),
    "documents": pa.schema([("id", pa.string()), ("human_readable_id", pa.int64()), ("title", pa.string()), ("text", pa.string()),
                            ("text_unit_ids", _STRS), ("creation_date", pa.string()), ("raw_data", pa.string())]),
}


def tables(graph: PublishedGraph) -> dict[str, pa.Table]:
    """The six graphrag tables of a published version."""
    period = graph.published_at.date().isoformat()
    degree = {e["entity_id"]: e["degree"] for e in graph.entities}
    title = unique_names(graph.entities, graphrag_title)
    entity_type = {e["entity_id"]: graphrag_type(e["type"]) for e in graph.entities}
    created = graph.published_at.strftime(CREATION_DATE)
    number = {c["community_id"]: c["human_id"] for c in graph.communities}
    entities_of_chunk: dict[str, list[str]] = {}
    for e in graph.entities:
        for c in e["chunk_ids"]:
            entities_of_chunk.setdefault(c, []).append(e["entity_id"])
    relationships_of_chunk: dict[str, list[str]] = {}
    for r in graph.relationships:
        for c in r["chunk_ids"]:
            relationships_of_chunk.setdefault(c, []).append(r["relationship_id"])
    chunks_of_entity = {e["entity_id"]: e["chunk_ids"] for e in graph.entities}  # a community's are its members'
    chunks_of_doc: dict[str, list[str]] = {}
    for c in graph.chunks:
        chunks_of_doc.setdefault(c["doc_id"], []).append(c["chunk_id"])

    def community_row(c: dict) -> dict:
        return {"id": c["community_id"], "human_readable_id": c["human_id"], "community": c["human_id"], "level": c["level"],
                "parent": number.get(c["parent_id"], -1), "children": sorted(number[k] for k in c["children_ids"] if k in number),
                "period": period, "size": c["size"]}

    communities = {c["community_id"]: c for c in graph.communities}
    # graphrag's update merges a relationship it extracts with ours by exact (source, target):
    # written in title order, as LightRAG writes its pairs
    ends = [tuple(sorted((title[r["source_id"]], title[r["target_id"]]))) for r in graph.relationships]
    rows = {
        "entities": [
            {"id": e["entity_id"], "human_readable_id": n, "title": title[e["entity_id"]], "type": entity_type[e["entity_id"]],
             "description": e["description"], "text_unit_ids": e["chunk_ids"], "frequency": len(e["chunk_ids"]), "degree": e["degree"]}
            for n, e in enumerate(graph.entities)
        ],
        "relationships": [
            {"id": r["relationship_id"], "human_readable_id": n, "source": source, "target": target,
             "description": relations.description(r["description"], (source, target), len(r["chunk_ids"])), "weight": r["weight"],
             "combined_degree": degree[r["source_id"]] + degree[r["target_id"]], "text_unit_ids": r["chunk_ids"]}
            for n, (r, (source, target)) in enumerate(zip(graph.relationships, ends))
        ],
        "communities": [
            {**community_row(c), "title": f"Community {c['human_id']}", "entity_ids": c["entity_ids"],
             "relationship_ids": c["relationship_ids"],
             "text_unit_ids": sorted({x for e in c["entity_ids"] for x in chunks_of_entity.get(e, ())})}
            for c in graph.communities
        ],
        "community_reports": [
            {**community_row(communities[r["community_id"]]), "title": r["title"], "summary": r["summary"],
             "full_content": r["full_content"], "rank": r["rating"], "rating_explanation": r["rating_explanation"],
             "findings": graph.findings(r),
             "full_content_json": json.dumps({"title": r["title"], "summary": r["summary"], "findings": graph.findings(r),
                                              "rating": r["rating"], "rating_explanation": r["rating_explanation"]}, ensure_ascii=False)}
            for r in sorted((r for r in graph.reports if r["community_id"] in communities), key=lambda r: number[r["community_id"]])
        ],
        "text_units": [
            {"id": c["chunk_id"], "human_readable_id": n, "text": c["text"], "n_tokens": c["n_tokens"], "document_id": c["doc_id"],
             "entity_ids": entities_of_chunk.get(c["chunk_id"], []), "relationship_ids": relationships_of_chunk.get(c["chunk_id"], []),
             "covariate_ids": []}
            for n, c in enumerate(graph.chunks)
        ],
        "documents": [
            {"id": d["doc_id"], "human_readable_id": n, "title": document_title(d), "text": d["text"],
             "text_unit_ids": chunks_of_doc.get(d["doc_id"], []), "creation_date": created,
             "raw_data": json.dumps({"source_key": d["source_key"], "title": d["title"],
                                     "metadata": json.loads(d["metadata"]) if d["metadata"] else None}, ensure_ascii=False)}
            for n, d in enumerate(graph.documents)
        ],
    }
    return {name: pa.Table.from_pylist(rows[name], schema=SCHEMAS[name]) for name in TABLES}


def document_title(document: dict) -> str:
    """graphrag's title for a document, which its update compares with the files in input/ to
    find the new ones: a file's name with its extension (graphrag_input's text reader); a
    record's id (its JSON/CSV readers with `title_column: id`)."""
    name = PurePosixPath(document["source_key"]).name
    return name if name == Path(document["source"]).name else document["source_key"]


def _vector_table(ids: list[str], vectors: dict, dim: int, created: str) -> pa.Table:
    """One LanceDB table as graphrag's LanceDBVectorStore writes it: id, vector, the two dates
    and their exploded parts (graphrag_vectors.timestamp)."""
    from datetime import datetime

    flat = pa.array(np.vstack([vectors[i] for i in ids]).reshape(-1) if ids else np.zeros(0, np.float32), pa.float32())
    when = datetime.fromisoformat(created)
    parts = {"year": when.year, "month": when.month, "month_name": when.strftime("%B"), "day": when.day,
             "day_of_week": when.strftime("%A"), "hour": when.hour, "quarter": (when.month - 1) // 3 + 1}
    n = len(ids)
    columns = {"id": pa.array(ids, pa.string()), "vector": pa.FixedSizeListArray.from_arrays(flat, dim),
               "create_date": pa.array([created] * n, pa.string()), "update_date": pa.array([None] * n, pa.string())}
    for prefix in ("create_date", "update_date"):
        for key, value in parts.items():
            kind = pa.string() if isinstance(value, str) else pa.int64()
            columns[f"{prefix}_{key}"] = pa.array([value if prefix == "create_date" else None] * n, kind)
    return pa.table(columns)


def settings_yaml(dim: int, model: str, chunk_tokens: int, overlap_tokens: int) -> str:
    """graphrag's settings for the export: the endpoints come from `.env` (graphwright.exports.
    endpoints); documents added to input/ for `graphrag update` are cut to our chunk size (in
    graphrag's tokens). graphrag substitutes ${VAR} in the file, so a dollar sign is written $$."""
    return f"""\
# graphrag 3.3 settings for this export (written by graphwright). Tables are in output/, vectors
# (our stored embeddings, model {model}, {dim} dimensions) in output/lancedb; the endpoints are in .env.
#   graphrag query --root . --method local "question"     (local | global | drift | basic)
#   graphrag update --root .                              (after adding documents to input/)
completion_models:
  default_completion_model:
    model_provider: openai
    model: ${{GRAPHRAG_COMPLETION_MODEL}}
    api_base: ${{GRAPHRAG_API_BASE}}
    auth_method: api_key
    api_key: ${{GRAPHRAG_API_KEY}}
embedding_models:
  default_embedding_model:
    model_provider: openai
    model: ${{GRAPHRAG_EMBEDDING_MODEL}}
    api_base: ${{GRAPHRAG_EMBEDDING_API_BASE}}
    auth_method: api_key
    api_key: ${{GRAPHRAG_EMBEDDING_API_KEY}}
input:
  type: text
  file_pattern: ".*\\\\.(txt|md)$$"
input_storage:
  type: file
  base_dir: input
output_storage:
  type: file
  base_dir: output
chunking:
  type: tokens
  size: {chunk_tokens}
  overlap: {overlap_tokens}
vector_store:
  type: lancedb
  db_uri: output/lancedb
  vector_size: {dim}
"""


def write(graph: PublishedGraph, out: Path) -> dict:
    """Write the graphrag layout under `out` (which must not exist yet). Needs lancedb."""
    os.environ.setdefault("LANCE_LOG", "error")  # lance warns on stderr that each new table "will be created"
    try:
        import lancedb
    except ImportError as exc:
        raise RuntimeError("the graphrag export writes LanceDB tables: pip install 'graphwright[exports]' (lancedb)") from exc
    output = out / "output"
    output.mkdir(parents=True)
    counts = {}
    for name, table in tables(graph).items():
        pq.write_table(table, output / f"{name}.parquet")
        counts[name] = table.num_rows
    db = lancedb.connect(str(output / "lancedb"))
    created = graph.published_at.isoformat()
    order = {"entity": [e["entity_id"] for e in graph.entities], "chunk": [c["chunk_id"] for c in graph.chunks],
             "report": [r["community_id"] for r in graph.reports]}
    stored = {kind: graph.vectors(kind) for kind in VECTOR_TABLES.values()}
    dim = next((len(v) for vectors in stored.values() for v in vectors.values()), 0)
    for table_name, kind in VECTOR_TABLES.items():
        vectors = stored[kind]
        missing = [i for i in order[kind] if i not in vectors]
        if missing:
            raise ValueError(f"version {graph.version}: {len(missing)} {kind} rows have no stored {graph.embedding_model} vector")
        db.create_table(table_name, data=_vector_table(order[kind], vectors, dim, created), mode="overwrite")
        counts[f"lancedb/{table_name}"] = len(order[kind])
    chunking = graph.index.config.chunk
    (out / "settings.yaml").write_text(settings_yaml(dim, graph.embedding_model, chunking.size_tokens, chunking.overlap_tokens))
    (out / ".env").write_text(graphrag_env(endpoints(graph.index.config, graph.embedding_model, dim)))
    (out / "input").mkdir()  # where `graphrag update` looks for new documents
    return {"format": "graphrag", "version": graph.version, "rows": counts, "vector_size": dim, "embedding_model": graph.embedding_model}

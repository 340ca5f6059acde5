"""Exports of a published version: GraphRAG's output tables, a LightRAG working directory, the
publish hook and the CLI. The reference engines' own packages reading and writing them:
tests/test_export_roundtrip.py."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import re
import zlib
from datetime import datetime
from pathlib import Path

import networkx as nx
import numpy as np
import pyarrow.parquet as pq
import pytest
from _helpers import make_config, run
from typer.testing import CliRunner

from graphwright.cli import app
from graphwright.exports import export, export_dir
from graphwright.exports import graphrag as graphrag_export
from graphwright.exports.graph import PublishedGraph
from graphwright.storage.manifest import PublishedIndex, manifests

needs_lancedb = pytest.mark.skipif(importlib.util.find_spec("lancedb") is None,
                                   reason="the graphrag export needs lancedb (pip install 'graphwright[exports]')")

# graphrag 3.3's final column lists (graphrag.data_model.schemas *_FINAL_COLUMNS)
GRAPHRAG_COLUMNS = {
    "entities": ["id", "human_readable_id", "title", "type", "description", "text_unit_ids", "frequency", "degree"],
    "relationships": ["id", "human_readable_id", "source", "target", "description", "weight", "combined_degree", "text_unit_ids"],
    "communities": ["id", "human_readable_id", "community", "level", "parent", "children", "title", "entity_ids", "relationship_ids",
                    "text_unit_ids", "period", "size"],
    "community_reports": ["id", "human_readable_id", "community", "level", "parent", "children", "title", "summary", "full_content", "rank",
                          "rating_explanation", "findings", "full_content_json", "period", "size"],
    "text_units": ["id", "human_readable_id", "text", "n_tokens", "document_id", "entity_ids", "relationship_ids", "covariate_ids"],
    "documents": ["id", "human_readable_id", "title", "text", "text_unit_ids", "creation_date", "raw_data"],
}


@pytest.fixture(scope="module")
def published(indexed):
    return PublishedIndex(indexed.store)


def test_graphrag_tables_follow_graphrag_columns_and_our_ids(published):
    graph = PublishedGraph.read(published)
    tables = {name: t.to_pylist() for name, t in graphrag_export.tables(graph).items()}
    for name, columns in GRAPHRAG_COLUMNS.items():
        assert graphrag_export.SCHEMAS[name].names == columns

    entities = {e["entity_id"]: e for e in published.read("entities").to_pylist()}
    assert {e["id"] for e in tables["entities"]} == set(entities)
    assert [e["human_readable_id"] for e in tables["entities"]] == list(range(len(entities)))
    titles = {e["id"]: e["title"] for e in tables["entities"]}
    assert len(set(titles.values())) == len(titles)  # graphrag joins relationships to entities by title
    for e in tables["entities"]:
        # graphrag's extractor uppercases titles and types, and its update merges by exact title
        assert e["title"] == entities[e["id"]]["name"].upper() and e["type"] == entities[e["id"]]["type"].upper()
        assert e["text_unit_ids"] == entities[e["id"]]["chunk_ids"] and e["frequency"] == len(e["text_unit_ids"])

    relationships = {r["relationship_id"]: r for r in published.read("relationships").to_pylist()}
    assert {r["id"] for r in tables["relationships"]} == set(relationships)
    for r in tables["relationships"]:
        ours = relationships[r["id"]]
        assert (r["source"], r["target"]) == tuple(sorted((titles[ours["source_id"]], titles[ours["target_id"]])))
        assert r["description"].strip()
        assert r["combined_degree"] == entities[ours["source_id"]]["degree"] + entities[ours["target_id"]]["degree"]

    chunks = {c["chunk_id"]: c for c in published.read("chunks").to_pylist()}
    assert {t["id"] for t in tables["text_units"]} == set(chunks)
    for t in tables["text_units"]:
        assert t["text"] == chunks[t["id"]]["text"] and t["document_id"] == chunks[t["id"]]["doc_id"]
        assert all(t["id"] in entities[e]["chunk_ids"] for e in t["entity_ids"])
    docs = {d["doc_id"]: d for d in published.read("documents", columns=["doc_id", "source_key"]).to_pylist()}
    assert {d["id"] for d in tables["documents"]} == set(docs)
    for d in tables["documents"]:  # graphrag's update finds new files by name: a file's keeps its extension
        key = docs[d["id"]]["source_key"]
        assert d["title"] == (Path(key).name if key.endswith((".txt", ".md")) else key)
        datetime.strptime(d["creation_date"], "%Y-%m-%d %H:%M:%S %z")
    assert sorted(c for d in tables["documents"] for c in d["text_unit_ids"]) == sorted(chunks)

    by_number = {c["community"]: c for c in tables["communities"]}
    assert len(by_number) == len(tables["communities"])
    for c in tables["communities"]:
        assert c["parent"] == -1 if c["level"] == 0 else by_number[c["parent"]]["level"] == c["level"] - 1
        assert all(by_number[k]["parent"] == c["community"] for k in c["children"])
        assert set(c["entity_ids"]) <= set(entities)
        assert c["text_unit_ids"] == sorted({t for e in c["entity_ids"] for t in entities[e]["chunk_ids"]})  # assembled here
    reports = published.read("community_reports").to_pylist()
    assert len(tables["community_reports"]) == len(reports) > 0
    for r in tables["community_reports"]:
        assert r["community"] in by_number and r["id"] == by_number[r["community"]]["id"]
        assert json.loads(r["full_content_json"])["title"] == r["title"]
        assert all(set(f) == {"summary", "explanation"} for f in r["findings"])


def _decode_vdb(path: Path) -> tuple[dict, np.ndarray]:
    vdb = json.loads(path.read_text())
    matrix = np.frombuffer(base64.b64decode(vdb["matrix"]), np.float32).reshape(-1, vdb["embedding_dim"])
    return vdb, matrix


def test_lightrag_working_directory(published, tmp_path):
    out = tmp_path / "lightrag"
    summary = export(published.store.root, "lightrag", out=out)
    assert summary["written"] and summary["version"] == published.version
    graph = PublishedGraph.read(published)
    dim = published.config.embed.dim
    entities = published.read("entities").to_pylist()
    chunks = json.loads((out / "kv_store_text_chunks.json").read_text())
    assert set(chunks) == {c["chunk_id"] for c in graph.chunks}

    kg = nx.read_graphml(out / "graph_chunk_entity_relation.graphml")
    assert set(kg.nodes) == {e["name"] for e in entities}
    assert kg.number_of_edges() == len(graph.relationships)
    for name, node in kg.nodes(data=True):
        assert node["entity_id"] == name and set(node["source_id"].split("<SEP>")) <= set(chunks)

    vdb, matrix = _decode_vdb(out / "vdb_entities.json")
    assert vdb["embedding_dim"] == dim and matrix.shape == (len(entities), dim)
    stored = graph.vectors("entity")
    by_name = {e["name"]: e["entity_id"] for e in entities}
    for row, vector in zip(vdb["data"], matrix):
        assert row["__id__"] == "ent-" + hashlib.md5(row["entity_name"].encode()).hexdigest()
        np.testing.assert_allclose(vector, stored[by_name[row["entity_name"]]], atol=1e-6)
        packed = np.frombuffer(zlib.decompress(base64.b64decode(row["vector"])), np.float16)
        np.testing.assert_allclose(packed, vector, atol=2e-3)
    rel_vdb, rel_matrix = _decode_vdb(out / "vdb_relationships.json")
    assert rel_matrix.shape == (len(graph.relationships), dim)
    assert all(r["src_id"] < r["tgt_id"] and kg.has_edge(r["src_id"], r["tgt_id"]) for r in rel_vdb["data"])
    chunk_vdb, _ = _decode_vdb(out / "vdb_chunks.json")
    assert [r["__id__"] for r in chunk_vdb["data"]] == [c["chunk_id"] for c in graph.chunks]
    status = json.loads((out / "kv_store_doc_status.json").read_text())
    assert {s["status"] for s in status.values()} == {"processed"}
    assert sum(s["chunks_count"] for s in status.values()) == len(chunks)
    # LightRAG's delete refuses (409) a document without both rows, empty ones included
    for name in ("kv_store_full_entities.json", "kv_store_full_relations.json"):
        assert set(json.loads((out / name).read_text())) == set(status)
    assert {a["entity_type"] for _, a in kg.nodes(data=True)} <= {"person", "organization", "geo", "event", "other"}
    for _, _, edge in kg.edges(data=True):
        assert edge["keywords"].strip() and edge["description"].strip()


def test_lightrag_extraction_records_rebuild_what_each_chunk_supports(published, tmp_path):
    """Every chunk lists one extraction record, in the JSON form LightRAG's rebuild parses, naming
    only graph nodes and edges that cite that chunk, with what the chunk said about them."""
    out = tmp_path / "lightrag"
    export(published.store.root, "lightrag", out=out)
    kg = nx.read_graphml(out / "graph_chunk_entity_relation.graphml")
    chunks = json.loads((out / "kv_store_text_chunks.json").read_text())
    cache = json.loads((out / "kv_store_llm_response_cache.json").read_text())
    assert sorted(k for c in chunks.values() for k in c["llm_cache_list"]) == sorted(cache)
    named = 0
    for chunk_id, chunk in chunks.items():
        (key,) = chunk["llm_cache_list"]
        record = cache[key]
        assert key.startswith("default:extract:") and record["cache_type"] == "extract" and record["chunk_id"] == chunk_id
        answer = json.loads(record["return"])
        for e in answer["entities"]:
            node = kg.nodes[e["name"]]
            assert chunk_id in node["source_id"].split("<SEP>") and e["type"] == e["type"].lower() and e["description"]
            text = " ".join(chunk["content"].split())  # the nlp extractor describes a name by its sentences
            assert all(text.find(sentence.strip(" …")) >= 0 for sentence in re.split(r"(?<=[.!?…])\s+", e["description"])), e
        for r in answer["relationships"]:
            edge = kg.edges[r["source"], r["target"]]
            assert chunk_id in edge["source_id"].split("<SEP>") and r["keywords"] and r["description"]
        named += len(answer["entities"])
    # every node is named by the records of all the chunks it cites, so a rebuild finds each one
    assert named == sum(len(a["source_id"].split("<SEP>")) for _, a in kg.nodes(data=True))


def test_exports_are_deterministic(published, tmp_path):
    def files(root: Path) -> dict[str, bytes]:
        return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file() and p.name != "export.json"}

    a, b = export(published.store.root, "lightrag", out=tmp_path / "a"), export(published.store.root, "lightrag", out=tmp_path / "b")
    assert a["written"] and b["written"]
    assert files(tmp_path / "a") == files(tmp_path / "b")
    graph = PublishedGraph.read(published)
    for name, table in graphrag_export.tables(graph).items():
        assert table.equals(graphrag_export.tables(PublishedGraph.read(published))[name])


def test_export_of_a_version_is_written_once(published, tmp_path):
    out = tmp_path / "once"
    first = export(published.store.root, "lightrag", out=out)
    before = (out / "vdb_entities.json").stat().st_mtime_ns
    again = export(published.store.root, "lightrag", out=out)
    assert first["written"] and not again["written"] and (out / "vdb_entities.json").stat().st_mtime_ns == before
    with pytest.raises(ValueError, match="unknown export format"):
        export(published.store.root, "neo4j", out=tmp_path / "x")


@needs_lancedb
def test_graphrag_export_files(published, tmp_path):
    import lancedb

    out = tmp_path / "graphrag"
    export(published.store.root, "graphrag", out=out)
    for name, columns in GRAPHRAG_COLUMNS.items():
        assert pq.read_schema(out / "output" / f"{name}.parquet").names == columns
    db = lancedb.connect(str(out / "output" / "lancedb"))
    entity_rows = db.open_table("entity_description").to_arrow()
    stored = PublishedGraph.read(published).vectors("entity")
    assert set(entity_rows.column("id").to_pylist()) == set(stored)
    assert entity_rows.schema.field("vector").type.list_size == published.config.embed.dim
    assert {"text_unit_text", "community_full_content"} <= set(db.table_names())
    assert f"vector_size: {published.config.embed.dim}" in (out / "settings.yaml").read_text()


def test_publish_writes_configured_exports(indexed_copy):
    """publish.exports is not part of what the index contains: turning it on for an unchanged
    corpus publishes nothing new, and writes the missing export of the current version."""
    run([indexed_copy.corpus], indexed_copy.index)  # the copy's source paths differ: settle them first
    versions = [m["version"] for m in manifests(indexed_copy.store)]
    summary = run([indexed_copy.corpus], indexed_copy.index, make_config(publish={"exports": ["lightrag"]}))
    assert [m["version"] for m in manifests(indexed_copy.store)] == versions
    target = export_dir(indexed_copy.index, "lightrag", versions[-1])
    assert json.loads((target / "export.json").read_text())["version"] == versions[-1]
    assert summary["version"] == versions[-1]


def test_cli_export(indexed_copy):
    result = CliRunner().invoke(app, ["export", "--index", str(indexed_copy.index), "--format", "lightrag", "--json"])
    assert result.exit_code == 0, result.output
    written = json.loads(result.output)
    assert written["written"] and Path(written["path"]) == export_dir(indexed_copy.index, "lightrag", written["version"])
    bad = CliRunner().invoke(app, ["export", "--index", str(indexed_copy.index), "--format", "neo4j"])
    assert bad.exit_code == 1 and "unknown export format" in bad.output

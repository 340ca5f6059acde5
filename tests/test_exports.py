"""Exports of a published version: GraphRAG's output tables, a LightRAG working directory, the
publish hook and the CLI; and (slow) the reference engines' own query code reading them."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import os
import subprocess
import zlib
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

REPO = Path(__file__).resolve().parents[1]
# the reference engines' own venv (README, "Exports"); GRAPHWRIGHT_REF_VENV points elsewhere
REF_PYTHON = Path(os.environ.get("GRAPHWRIGHT_REF_VENV", REPO / ".venv-ref")) / "bin" / "python"
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
        assert e["title"] == entities[e["id"]]["name"] and e["text_unit_ids"] == entities[e["id"]]["chunk_ids"]

    relationships = {r["relationship_id"]: r for r in published.read("relationships").to_pylist()}
    assert {r["id"] for r in tables["relationships"]} == set(relationships)
    for r in tables["relationships"]:
        ours = relationships[r["id"]]
        assert (r["source"], r["target"]) == (titles[ours["source_id"]], titles[ours["target_id"]])
        assert r["combined_degree"] == entities[ours["source_id"]]["degree"] + entities[ours["target_id"]]["degree"]

    chunks = {c["chunk_id"]: c for c in published.read("chunks").to_pylist()}
    assert {t["id"] for t in tables["text_units"]} == set(chunks)
    for t in tables["text_units"]:
        assert t["text"] == chunks[t["id"]]["text"] and t["document_id"] == chunks[t["id"]]["doc_id"]
        assert all(t["id"] in entities[e]["chunk_ids"] for e in t["entity_ids"])
    docs = {d["doc_id"] for d in published.read("documents", columns=["doc_id"]).to_pylist()}
    assert {d["id"] for d in tables["documents"]} == docs
    assert sorted(c for d in tables["documents"] for c in d["text_unit_ids"]) == sorted(chunks)

    by_number = {c["community"]: c for c in tables["communities"]}
    assert len(by_number) == len(tables["communities"])
    for c in tables["communities"]:
        assert c["parent"] == -1 if c["level"] == 0 else by_number[c["parent"]]["level"] == c["level"] - 1
        assert all(by_number[k]["parent"] == c["community"] for k in c["children"])
        assert set(c["entity_ids"]) <= set(entities)
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


# ---------------------------------------------------------------- the reference engines (slow)

QUESTIONS = ["Who is Tobias Reed?"]


@pytest.mark.slow
@pytest.mark.skipif(not REF_PYTHON.exists(), reason=f"no reference venv at {REF_PYTHON.parent.parent} (graphrag 3.3, lightrag-hku 1.5)")
def test_reference_engines_answer_from_our_export(indexed, tmp_path):
    """graphrag's local/global search and LightRAG's local/global/hybrid queries, run by their
    own packages in their own venv, answer from our export: the (deterministic) fake LLM quotes
    the context each engine put in its prompt, and that context is made of our entities."""
    from fake_openai import FakeOpenAI

    from graphwright.exports.embed_server import EmbeddingServer

    has_lancedb = importlib.util.find_spec("lancedb") is not None
    args = []
    lightrag_dir = export(indexed.index, "lightrag", out=tmp_path / "lightrag")["path"]
    args += ["--lightrag", lightrag_dir]
    if has_lancedb:
        args += ["--graphrag", export(indexed.index, "graphrag", out=tmp_path / "graphrag")["path"]]
    names = {e["name"] for e in PublishedIndex(indexed.store).read("entities", columns=["name"]).to_pylist()}
    with FakeOpenAI() as llm, EmbeddingServer.for_index(str(indexed.index)) as embed:
        proc = subprocess.run(
            [str(REF_PYTHON), str(REPO / "bench" / "reference_query.py"), *args, "--llm-base-url", llm.base_url,
             "--embed-base-url", embed.base_url, "--embed-model", embed.model, "--json", *QUESTIONS],
            check=False, capture_output=True, text=True, timeout=900, cwd=tmp_path, env={**os.environ, "OPENAI_API_KEY": "test"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    expected = {("lightrag", m) for m in ("local", "global", "hybrid")} | ({("graphrag", "local"), ("graphrag", "global")} if has_lancedb else set())
    assert {(r["engine"], r["mode"]) for r in results} == expected
    for r in results:
        assert r["answer"].startswith("According to the context:"), r
        assert any(name in r["answer"] for name in names), r["answer"]
        context_names = {e.get("entity") for e in r["context"].get("entities", [])} - {None}
        assert context_names <= names
    local = {r["engine"]: r for r in results if r["mode"] == "local"}
    assert "Tobias Reed" in {e["entity"] for e in local["lightrag"]["context"]["entities"]}
    if has_lancedb:
        assert "Tobias Reed" in {e["entity"] for e in local["graphrag"]["context"]["entities"]}

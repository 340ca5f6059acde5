"""One test per pipeline stage, each run through the local executor on a fresh index of the
test corpus (the stages before it run first)."""

import json

import numpy as np
import pyarrow.compute as pc
import pytest
from _helpers import (
    CORPUS,
    CORPUS_KEYS,
    assert_valid,
    data_table_versions,
    diff_counts,
    make_config,
)

from graphwright import ids
from graphwright.engines.embed import make_embedder, model_name
from graphwright.engines.vectors import load_index
from graphwright.pipeline import definition
from graphwright.pipeline.context import Request, Run
from graphwright.pipeline.progress import StageProgress
from graphwright.stages.extract.extractors import extractor_key
from graphwright.storage import contracts
from graphwright.storage.delta import IndexStore
from graphwright.storage.manifest import DATA_TABLES, load_manifest

ORDER = ["ingest", "chunk", "extract", "resolve", "cluster", "report", "embed", "publish"]


class Stages:
    def __init__(self, root, config=None):
        self.store = IndexStore(root / "index")
        self.store.root.mkdir(parents=True)
        self.config = config or make_config()
        self.logs = []
        self.run = Run(self.store, self.config, "run-test", StageProgress(False), self.logs.append, Request(sources=[str(CORPUS)]))
        self.results = self.run.results

    def do(self, name):
        with self.run.stage(name) as metrics:
            out = definition.by_name(name).execute(self.run, metrics)
        self.results[name] = out
        return out

    def upto(self, last):
        for name in ORDER[:ORDER.index(last)]:
            self.do(name)
        return self


@pytest.fixture
def stages(tmp_path):
    return Stages(tmp_path)


def test_stage_ingest(stages):
    out = stages.do("ingest")
    assert diff_counts(out["diff"]) == {"new": 6, "changed": 0, "unchanged": 0, "deleted": 0}
    assert out["errors"] == []
    docs = assert_valid(stages.store, "documents")
    assert set(docs.column("source_key").to_pylist()) == CORPUS_KEYS
    for row in docs.to_pylist():
        assert row["doc_id"] == ids.doc_id(row["source_key"])
        assert row["content_hash"] == ids.content_hash(row["text"])
        assert row["run_id"] == "run-test"
    version = stages.store.version("documents")
    again = stages.do("ingest")
    assert again["diff"]["unchanged"] == 6
    assert stages.store.version("documents") == version  # nothing rewritten
    assert stages.run.metrics[0]["stage"] == "ingest"


def test_stage_chunk(stages):
    stages.upto("chunk")
    out = stages.do("chunk")
    assert out["chunked_documents"] == 6 and out["chunks_written"] > 6
    chunks = assert_valid(stages.store, "chunks")
    docs = {d["doc_id"]: d for d in stages.store.read("documents").to_pylist()}
    size = stages.config.chunk.size_tokens
    for c in chunks.to_pylist():
        doc = docs[c["doc_id"]]
        assert c["doc_hash"] == doc["content_hash"]
        assert doc["text"][c["start_char"]:c["end_char"]] == c["text"]
        assert 0 < c["n_tokens"] <= size
    per_doc = {}
    for c in chunks.to_pylist():
        per_doc.setdefault(c["doc_id"], []).append(c["chunk_index"])
    assert set(per_doc) == set(docs)
    assert all(sorted(v) == list(range(len(v))) for v in per_doc.values())
    again = stages.do("chunk")
    assert again["chunked_documents"] == 0 and again["chunks_written"] == 0 and again["chunks_removed"] == 0


def test_a_chunk_update_reads_the_chunks_once_and_keeps_the_chunks_a_new_version_repeats(tmp_path, monkeypatch):
    def paragraph(i):
        return " ".join(f"Line {i}.{j} tells of the harbour keeper and his lamp." for j in range(30))

    def chunk_rows(root, src, docs):
        for old in src.glob("*.txt"):
            old.unlink()
        for name, text in docs.items():
            (src / f"{name}.txt").write_text(text)
        store = IndexStore(root)
        store.root.mkdir(parents=True, exist_ok=True)
        run = Run(store, make_config(ingest={"max_delete_fraction": 1.0}), "run-test", StageProgress(False), lambda m: None,
                  Request(sources=[str(src)]))
        for name in ("ingest", "chunk"):
            reads.clear(), joined.clear()
            with run.stage(name) as metrics:
                out = definition.by_name(name).execute(run, metrics)
        out["reads"], out["joined"] = list(reads), list(joined)  # the chunk stage's
        return out, sorted(store.read("chunks", columns=["chunk_id", "doc_id", "doc_hash", "text"]).to_pylist(), key=str)

    src, reads, joined = tmp_path / "src", [], []
    src.mkdir()
    first = {"a": "\n\n".join(paragraph(i) for i in range(6)), "b": paragraph(9)}
    _, before = chunk_rows(tmp_path / "index", src, first)
    read, join = IndexStore.read, pc.binary_join_element_wise
    monkeypatch.setattr(IndexStore, "read", lambda self, name, *a, **k: reads.append(name) or read(self, name, *a, **k))
    monkeypatch.setattr(pc, "binary_join_element_wise", lambda *a, **k: joined.append(len(a[0])) or join(*a, **k))
    second = {"a": "\n\n".join(paragraph(i) for i in (0, 1, 2, 3, 4, 7))}  # a's last paragraph changes, b goes
    out, after = chunk_rows(tmp_path / "index", src, second)
    assert out["reads"].count("chunks") == 1
    assert not out["joined"]  # (document, hash) pairs matched by hash joins, not joined into strings per chunk
    repeated = {r["chunk_id"] for r in before} & {r["chunk_id"] for r in after}
    assert repeated and out["chunks_removed"] > 0
    assert after == chunk_rows(tmp_path / "fresh", src, second)[1]


def test_stage_extract(stages):
    stages.upto("extract")
    out = stages.do("extract")
    n_chunks = stages.store.count("chunks")
    assert out["chunks_extracted"] == n_chunks and out["chunks_failed"] == 0
    key = extractor_key(stages.config.extract)
    marks = assert_valid(stages.store, "extractions").to_pylist()
    assert len(marks) == n_chunks and {m["status"] for m in marks} == {"ok"} and {m["extractor"] for m in marks} == {key}
    mentions = assert_valid(stages.store, "mentions")
    assertions = assert_valid(stages.store, "assertions")
    # the markers count what was written for each chunk
    per_chunk = {}
    for cid in mentions.column("chunk_id").to_pylist():
        per_chunk[cid] = per_chunk.get(cid, 0) + 1
    for m in marks:
        assert per_chunk.get(m["chunk_id"], 0) == m["n_mentions"]
    for row in mentions.to_pylist():
        assert row["mention_id"] == ids.stable_id("mention", row["chunk_id"], row["name"], key)
    assert assertions.num_rows == sum(m["n_assertions"] for m in marks)
    names = set(mentions.column("name").to_pylist())
    assert {"Tobias Reed", "Port Elling", "Kestrel Island", "Oswin Hale", "Elling Harbor Company"} <= names
    again = stages.do("extract")
    assert again["chunks_extracted"] == 0


def test_stage_resolve(stages):
    stages.upto("resolve")
    stages.do("resolve")
    entities = assert_valid(stages.store, "entities").to_pylist()
    aliases = assert_valid(stages.store, "entity_aliases").to_pylist()
    rels = assert_valid(stages.store, "relationships").to_pylist()
    chunk_ids = set(stages.store.read("chunks").column("chunk_id").to_pylist())
    doc_ids = set(stages.store.read("documents").column("doc_id").to_pylist())
    by_name = {e["name"]: e for e in entities}
    assert by_name["Tobias Reed"]["mention_count"] >= 5
    assert len(by_name["Tobias Reed"]["doc_ids"]) >= 4  # mentioned across the corpus
    for e in entities:
        assert set(e["chunk_ids"]) <= chunk_ids and set(e["doc_ids"]) <= doc_ids
    eids = {e["entity_id"] for e in entities}
    assert {a["entity_id"] for a in aliases} == eids
    for r in rels:
        assert r["source_id"] in eids and r["target_id"] in eids and r["source_id"] < r["target_id"]
    versions = {n: stages.store.version(n) for n in ("entities", "entity_aliases", "relationships")}
    stages.do("resolve")
    assert {n: stages.store.version(n) for n in versions} == versions  # identical result: no new version


def test_stage_cluster(stages):
    stages.upto("cluster")
    stages.do("cluster")
    comms = assert_valid(stages.store, "communities").to_pylist()
    eids = sorted(stages.store.read("entities").column("entity_id").to_pylist())
    assert sorted(e for c in comms if c["level"] == 0 for e in c["entity_ids"]) == eids
    by_id = {c["community_id"]: c for c in comms}
    for c in comms:
        if c["children_ids"]:
            assert sorted(e for k in c["children_ids"] for e in by_id[k]["entity_ids"]) == sorted(c["entity_ids"])
    assert max(c["level"] for c in comms) >= 1  # max_cluster_size=4 forces a hierarchy
    version = stages.store.version("communities")
    stages.do("cluster")
    assert stages.store.version("communities") == version


def test_stage_report(stages):
    stages.upto("report")
    stages.do("report")
    reports = assert_valid(stages.store, "community_reports").to_pylist()
    comms = stages.store.read("communities").to_pylist()
    assert {r["community_id"] for r in reports} == {c["community_id"] for c in comms if c["size"] >= stages.config.report.min_size}
    for r in reports:
        assert r["summary"] and r["title"] and r["full_content"].startswith(f"# {r['title']}")
        json.loads(r["findings"])
    version = stages.store.version("community_reports")
    stages.do("report")
    assert stages.store.version("community_reports") == version


def test_stage_embed(stages):
    stages.upto("embed")
    out = stages.do("embed")
    model = model_name(stages.config.embed)
    emb = assert_valid(stages.store, "embeddings")
    counts = {k: stages.store.count(t) for k, t in (("entity", "entities"), ("chunk", "chunks"), ("report", "community_reports"),
                                                      ("entity_name", "entities"))}
    for kind, n in counts.items():
        assert out["counts"][kind]["embedded"] == n
        path = stages.store.root / out["vector_indexes"][kind]
        assert path.exists()
        assert len(load_index(path).ids) == n
    assert emb.num_rows == sum(counts.values())
    assert set(emb.column("model").to_pylist()) == {model}
    # a stored chunk vector is the embedding of the chunk's text
    chunk = stages.store.read("chunks").to_pylist()[0]
    row = next(r for r in emb.to_pylist() if r["kind"] == "chunk" and r["item_id"] == chunk["chunk_id"])
    np.testing.assert_allclose(row["vector"], make_embedder(stages.config.embed).encode([chunk["text"]])[0], rtol=1e-6)
    assert not any(r["kind"] == "relationship" for r in emb.to_pylist())  # embed.relationships is off by default
    again = stages.do("embed")
    assert all(c["embedded"] == 0 for c in again["counts"].values())
    assert again["vector_indexes"] == out["vector_indexes"]


def test_stage_publish(stages):
    stages.upto("publish")
    manifest = stages.do("publish")
    assert manifest["new"] and manifest["version"] == 1
    assert manifest["table_versions"] == {k: v for k, v in data_table_versions(stages.store).items()}
    assert set(manifest["table_versions"]) == set(DATA_TABLES)
    assert manifest["counts"]["documents"] == 6
    stored = load_manifest(stages.store)
    assert stored["version"] == 1 and stored["table_versions"] == manifest["table_versions"]
    assert stored["embedding_model"] == model_name(stages.config.embed)
    again = stages.do("publish")
    assert not again["new"] and again["version"] == 1
    assert len(stages.store.read("index_manifest")) == 1
    contracts.schema("index_manifest").validate(stages.store.read("index_manifest"))

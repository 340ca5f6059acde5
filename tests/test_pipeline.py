"""End-to-end: run_index on the test corpus, then query, rerun, edit, delete, bad inputs."""

import shutil

import pyarrow.compute as pc
import pytest
from _helpers import (
    CORPUS,
    CORPUS_KEYS,
    assert_valid,
    data_table_versions,
    diff_counts,
    index_fresh,
    make_config,
    run,
)

from graphwright import ids
from graphwright.pipeline import context, definition
from graphwright.pipeline.errors import NothingToIndex
from graphwright.query import query
from graphwright.storage.delta import IndexStore
from graphwright.storage.manifest import (
    DATA_TABLES,
    NoPublishedVersion,
    PublishedIndex,
    load_manifest,
    manifests,
)


@pytest.fixture
def fresh(tmp_path):
    """A private index of a private copy of the corpus, for tests that edit the corpus."""
    return index_fresh(tmp_path / "fresh")


SUMMARY_KEYS = {"documents", "chunks", "chunks_extracted", "entities", "relationships", "communities", "reports", "version"}


def test_index_summary_matches_the_tables(indexed):
    s, store = indexed.summary, indexed.store
    assert SUMMARY_KEYS <= set(s)
    assert s["version"] == 1 and s["new_version"] is True
    assert s["documents"] == store.count("documents") == 6
    assert s["chunks"] == store.count("chunks") == s["chunks_extracted"] > 6
    assert s["entities"] == store.count("entities") > 10
    assert s["relationships"] == store.count("relationships") > 10
    assert s["communities"] == store.count("communities") > 1
    assert s["reports"] == store.count("community_reports") > 1
    assert diff_counts(s["documents_diff"]) == {"new": 6, "changed": 0, "unchanged": 0, "deleted": 0}
    assert s["source_errors"] == []
    assert set(s["seconds"]) == {st.name for st in definition.INDEX if st.enabled(make_config())}


def test_every_table_satisfies_its_contract_and_lineage_holds(indexed):
    store = indexed.store
    t = {name: assert_valid(store, name) for name in DATA_TABLES}
    docs = set(t["documents"].column("doc_id").to_pylist())
    assert set(t["documents"].column("source_key").to_pylist()) == CORPUS_KEYS
    chunk_doc = dict(zip(t["chunks"].column("chunk_id").to_pylist(), t["chunks"].column("doc_id").to_pylist()))
    assert set(chunk_doc.values()) == docs
    for name in ("mentions", "assertions", "extractions"):
        for cid, did in zip(t[name].column("chunk_id").to_pylist(), t[name].column("doc_id").to_pylist()):
            assert chunk_doc[cid] == did
    assert set(t["extractions"].column("chunk_id").to_pylist()) == set(chunk_doc)
    eids = set(t["entities"].column("entity_id").to_pylist())
    for e in t["entities"].to_pylist():
        assert e["chunk_ids"] and set(e["chunk_ids"]) <= set(chunk_doc)
        assert e["doc_ids"] == sorted({chunk_doc[c] for c in e["chunk_ids"]})
    for r in t["relationships"].to_pylist():
        assert {r["source_id"], r["target_id"]} <= eids
        assert r["doc_ids"] == sorted({chunk_doc[c] for c in r["chunk_ids"]})
    assert set(t["entity_aliases"].column("entity_id").to_pylist()) == eids
    emb = t["embeddings"]
    for kind, table, col in (("entity", "entities", "entity_id"), ("chunk", "chunks", "chunk_id"),
                             ("report", "community_reports", "community_id")):
        kind_ids = emb.filter(pc.equal(emb["kind"], kind)).column("item_id").to_pylist()
        assert sorted(kind_ids) == sorted(t[table].column(col).to_pylist())


def test_runs_and_stage_metrics_are_recorded(indexed):
    runs = assert_valid(indexed.store, "runs").to_pylist()
    assert [(r["run_id"], r["status"]) for r in runs] == [(indexed.summary["run_id"], "succeeded")]
    assert runs[0]["finished_at"] >= runs[0]["started_at"]
    metrics = assert_valid(indexed.store, "stage_metrics").to_pylist()
    assert {m["stage"] for m in metrics} == {st.name for st in definition.INDEX if st.enabled(make_config())}


def test_manifest_pins_the_tables_and_vector_files(indexed):
    manifest = load_manifest(indexed.store)
    assert manifest["version"] == 1
    assert manifest["table_versions"] == data_table_versions(indexed.store)
    assert set(manifest["vector_indexes"]) == {"entity", "chunk", "report", "entity_name", "lexical:chunk", "lexical:entity",
                                               "lexical:relationship", "lexical:report", "synonyms", "graph"}
    for rel in manifest["vector_indexes"].values():
        assert (indexed.index / rel).exists()


@pytest.mark.parametrize("mode", ["local", "naive"])
def test_query_returns_evidence_with_provenance(indexed, mode):
    result = query(str(indexed.index), "What did Tobias Reed show the council about the harbor fees?", mode=mode, top_k=4)
    assert result["mode"] == mode and result["version"] == 1
    evidence = result["evidence"]
    assert 0 < len(evidence) <= 4
    store = indexed.store
    chunks = {c["chunk_id"]: c for c in store.read("chunks").to_pylist()}
    docs = {d["doc_id"]: d for d in store.read("documents").to_pylist()}
    for e in evidence:
        assert {"doc_id", "chunk_id", "text", "score"} <= set(e)
        assert isinstance(e["score"], float)
        assert chunks[e["chunk_id"]]["doc_id"] == e["doc_id"]
        assert chunks[e["chunk_id"]]["text"] == e["text"]
        assert e["title"] == docs[e["doc_id"]]["title"] and e["source_key"] == docs[e["doc_id"]]["source_key"]
    scores = [e["score"] for e in evidence]
    assert scores == sorted(scores, reverse=True)
    assert len({e["chunk_id"] for e in evidence}) == len(evidence)


def test_local_query_selects_named_entities_and_their_chunks(indexed):
    result = query(str(indexed.index), "Who is Hollis Wren?", mode="local", top_k=3)
    assert result["entities"][0]["name"] == "Hollis Wren"  # the name in the question gets the bonus
    letters = {ids.doc_id("letter-1"), ids.doc_id("letter-2")}
    assert result["evidence"][0]["doc_id"] in letters
    assert "Hollis Wren" in result["evidence"][0]["via_entities"]
    assert any("Hollis Wren" in e["text"] for e in result["evidence"])
    for r in result["relationships"]:
        assert {"source", "target", "description", "weight", "chunk_ids", "doc_ids"} <= set(r)
    assert result["reports"] and all("summary" in r for r in result["reports"])


def test_query_errors(indexed, tmp_path):
    with pytest.raises(ValueError, match="unknown query mode"):
        query(str(indexed.index), "anything", mode="psychic")
    with pytest.raises(NoPublishedVersion):
        query(str(tmp_path / "nothing-here"), "anything")
    with pytest.raises(NoPublishedVersion, match="no version 7"):
        query(str(indexed.index), "anything", version=7)


def test_rerun_extracts_nothing_and_publishes_nothing(indexed, indexed_copy):
    store = indexed_copy.store
    before = data_table_versions(store)
    s = run([indexed.corpus], indexed_copy.index)  # the same input, read from the same place
    assert s["chunks_extracted"] == 0
    assert s["new_version"] is False and s["version"] == 1
    assert diff_counts(s["documents_diff"]) == {"new": 0, "changed": 0, "unchanged": 6, "deleted": 0}
    assert data_table_versions(store) == before  # not a single Delta commit to a data table
    assert [m["version"] for m in manifests(store)] == [1]
    assert sum(c["embedded"] for c in (s.get("embeddings") or s["recomputed"]["embeddings"]).values()) == 0


def test_editing_a_document_reextracts_only_its_changed_chunks(fresh, monkeypatch):
    # a small change lays an overlay over each published vector index, whose vectors are not read
    import faiss

    monkeypatch.setattr(faiss, "read_index", lambda *a: pytest.fail("read a published vector index"))
    store = fresh.store
    harbor = ids.doc_id("harbor.txt")
    old_chunks = {c["chunk_id"]: c for c in store.read("chunks").to_pylist()}
    old_harbor = {c for c, r in old_chunks.items() if r["doc_id"] == harbor}
    path = fresh.corpus / "harbor.txt"
    path.write_text(path.read_text().replace("until the lamps burned low.", "until the lamps burned out."))
    s = run([fresh.corpus], fresh.index)
    assert diff_counts(s["documents_diff"]) == {"new": 0, "changed": 1, "unchanged": 5, "deleted": 0}
    new_chunks = {c["chunk_id"]: c for c in store.read("chunks").to_pylist()}
    added = set(new_chunks) - set(old_chunks)
    assert added and all(new_chunks[c]["doc_id"] == harbor for c in added)
    assert len(added) < len(old_harbor)  # the edit is at the end: earlier chunks keep their ids
    assert s["chunks_extracted"] == len(added)
    marks = store.read("extractions").to_pylist()
    assert {m["chunk_id"] for m in marks if m["run_id"] == s["run_id"]} == added
    # the replaced chunks are gone with everything extracted from them
    gone = set(old_chunks) - set(new_chunks)
    assert gone and gone <= old_harbor
    for name in ("mentions", "assertions", "extractions"):
        assert not gone & set(store.read(name).column("chunk_id").to_pylist())
    for name in ("entities", "relationships"):
        for row in store.read(name).to_pylist():
            assert not gone & set(row["chunk_ids"])
    assert s["new_version"] and s["version"] == 2
    assert any("burned out" in c["text"] for c in new_chunks.values())


def test_an_update_adds_to_the_published_hnsw_index_instead_of_rebuilding_it(tmp_path):
    config = make_config(vectors={"hnsw_threshold": 5, "overlay_max_share": 0})  # in place, not an overlay (test_vector_overlay)
    fresh = index_fresh(tmp_path / "hnsw", config=config)
    store = fresh.store
    before = set(store.read("chunks").column("chunk_id").to_pylist())
    first = PublishedIndex(store).vector_index("chunk")
    assert type(first.index).__name__ == "IndexHNSWFlat" and None not in first.ids
    path = fresh.corpus / "harbor.txt"
    path.write_text(path.read_text().replace("until the lamps burned low.", "until the lamps burned out."))
    run([fresh.corpus], fresh.index, config)
    now = set(store.read("chunks").column("chunk_id").to_pylist())
    updated = PublishedIndex(store).vector_index("chunk")
    assert set(updated.ids) - {None} == now
    # the replaced chunks' vectors are skipped, not rebuilt away, and the new ones were added
    assert updated.ids.count(None) == len(before - now) > 0
    assert updated.index.ntotal == len(first.ids) + len(now - before)
    evidence = query(str(fresh.index), "the lamps burned out", mode="naive", top_k=50)["evidence"]
    assert len(evidence) == len(now) and {e["chunk_id"] for e in evidence} == now  # every live chunk, no other


def test_deleting_a_document_removes_every_row_that_references_it(fresh):
    store = fresh.store
    gone = ids.doc_id("notes/river.txt")
    gone_chunks = set(store.read("chunks", where=f"doc_id = '{gone}'").column("chunk_id").to_pylist())
    assert gone_chunks
    gone_text = (fresh.corpus / "notes" / "river.txt").read_text()
    (fresh.corpus / "notes" / "river.txt").unlink()
    s = run([fresh.corpus], fresh.index)
    assert s["documents_diff"]["deleted"] == 1 and s["documents"] == 5
    for name in ("documents", "chunks", "mentions", "assertions", "extractions"):
        assert gone not in set(store.read(name).column("doc_id").to_pylist()), name
    for name in ("entities", "relationships"):
        for row in store.read(name).to_pylist():
            assert gone not in row["doc_ids"], name
            assert not gone_chunks & set(row["chunk_ids"])
    chunks_of = {e["entity_id"]: e["chunk_ids"] for e in store.read("entities", columns=["entity_id", "chunk_ids"]).to_pylist()}
    for row in store.read("communities").to_pylist():  # counted from the members' lists, which hold none
        assert row["n_chunks"] == len({c for e in row["entity_ids"] for c in chunks_of[e]})
    emb = store.read("embeddings", where="kind = 'chunk'")
    assert not gone_chunks & set(emb.column("item_id").to_pylist())
    # no description or report keeps a sentence that only the deleted document contained
    from graphwright.text.sentences import split_sentences

    others = " ".join(" ".join(t.split()) for t in store.read("documents").column("text").to_pylist())
    only_there = [" ".join(gone_text[a:b].split()) for a, b in split_sentences(gone_text)]
    only_there = [x for x in only_there if len(x) > 20 and x not in others]
    assert only_there  # the premise: the deleted document had sentences of its own
    texts = [r["description"] for name in ("entities", "relationships") for r in store.read(name).to_pylist()]
    texts += [r["full_content"] for r in store.read("community_reports").to_pylist()]
    blob = " ".join(" ".join(t.split()) for t in texts)
    assert not [x for x in only_there if x in blob]
    assert s["new_version"] and s["version"] == 2
    # the published version 1 still reads as it was
    v1 = PublishedIndex(store, 1)
    assert gone in set(v1.read("documents").column("doc_id").to_pylist())
    old = query(str(fresh.index), "Greywater River depths", mode="naive", version=1, top_k=20)
    assert gone in {e["doc_id"] for e in old["evidence"]}
    new = query(str(fresh.index), "Greywater River depths", mode="naive", top_k=20)
    assert gone not in {e["doc_id"] for e in new["evidence"]}


def test_append_mode_keeps_documents_missing_from_the_input(indexed_copy, tmp_path):
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "postscript.txt").write_text("Hollis Wren visited Port Elling again in winter with Tobias Reed.")
    s = run([extra], indexed_copy.index, mirror=False)
    assert diff_counts(s["documents_diff"]) == {"new": 1, "changed": 0, "unchanged": 0, "deleted": 0}
    assert s["documents"] == 7
    assert ids.doc_id("postscript.txt") in set(indexed_copy.store.read("documents").column("doc_id").to_pylist())


def _write_bad_files(folder):
    (folder / "binary.txt").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    (folder / "empty.md").write_bytes(b"")


def test_bad_files_are_skipped_and_reported(tmp_path):
    corpus = tmp_path / "corpus"
    shutil.copytree(CORPUS, corpus)
    _write_bad_files(corpus)
    s = run([corpus], tmp_path / "index")
    assert s["documents"] == 6
    errors = {e["source"]: e["reason"] for e in s["source_errors"]}
    assert errors == {str(corpus / "binary.txt"): "binary file (contains NUL bytes)", str(corpus / "empty.md"): "empty file"}
    stored = IndexStore(tmp_path / "index").read("source_errors").to_pylist()
    assert {(r["source"], r["run_id"]) for r in stored} == {(src, s["run_id"]) for src in errors}


def test_a_file_that_becomes_unreadable_keeps_its_documents(fresh):
    (fresh.corpus / "council.txt").write_bytes(b"\x00\x01 corrupted")
    s = run([fresh.corpus], fresh.index)
    assert s["documents_diff"]["deleted"] == 0
    assert ids.doc_id("council.txt") in set(fresh.store.read("documents").column("doc_id").to_pylist())
    assert [e["source"] for e in s["source_errors"]] == [str(fresh.corpus / "council.txt")]


def test_only_bad_inputs_raise_and_leave_the_index_unchanged(indexed_copy, tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    _write_bad_files(bad)
    store = indexed_copy.store
    before = data_table_versions(store)
    with pytest.raises(NothingToIndex, match="no document could be read"):
        run([bad], indexed_copy.index)
    assert data_table_versions(store) == before
    assert [m["version"] for m in manifests(store)] == [1]
    assert query(str(indexed_copy.index), "Tobias Reed", mode="naive")["version"] == 1
    failed = [r for r in store.read("runs").to_pylist() if r["status"] == "failed"]
    assert len(failed) == 1 and "NothingToIndex" in failed[0]["error"]


def test_only_bad_inputs_on_a_new_index(tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    _write_bad_files(bad)
    with pytest.raises(NothingToIndex):
        run([bad], tmp_path / "index")
    with pytest.raises(NoPublishedVersion):
        load_manifest(IndexStore(tmp_path / "index"))


def test_duplicate_records_in_one_file_are_reported_not_fatal(tmp_path):
    corpus = tmp_path / "corpus"
    shutil.copytree(CORPUS, corpus)
    # sorts before letters.jsonl, so both letters become duplicates of these
    (corpus / "a-copies.jsonl").write_text(
        '{"id": "letter-1", "text": "An early copy of the first letter to Tobias Reed."}\n'
        '{"id": "letter-2", "text": "An early copy of the reply to Hollis Wren."}\n'
    )
    s = run([corpus], tmp_path / "index")
    assert s["documents"] == 6
    assert len(s["source_errors"]) == 2


def test_a_noop_rerun_does_not_start_an_executor(indexed, indexed_copy, monkeypatch):
    started = []
    real = context.make_executor
    monkeypatch.setattr(context, "make_executor", lambda cfg, **kw: started.append(cfg) or real(cfg, **kw))
    s = run([indexed.corpus], indexed_copy.index)
    assert s["chunks_extracted"] == 0 and not s["new_version"]
    assert started == []


@pytest.mark.parametrize("mode", ["naive", "local"])
@pytest.mark.parametrize("k", [0, -1])
def test_query_rejects_or_honours_non_positive_top_k(indexed, mode, k):
    try:
        result = query(str(indexed.index), "Tobias Reed", mode=mode, top_k=k)
    except ValueError:
        return
    assert result["evidence"] == []


def test_rerun_with_other_execution_settings_publishes_nothing(indexed, indexed_copy):
    cfg = make_config(execution={"commit_every": 64, "actors": 3})
    s = run([indexed.corpus], indexed_copy.index, cfg)
    assert s["chunks_extracted"] == 0
    assert s["new_version"] is False and s["version"] == 1


def test_small_work_runs_in_the_driver_and_starts_no_executor(indexed, indexed_copy, tmp_path, monkeypatch):
    """An update of one document chunks, extracts and embeds it in the driver: a Ray start and an
    actor pool per stage cost more than such work (execution.inline_batches). With inlining off,
    the same update goes to the executor, with the same results."""
    import json

    from graphwright.pipeline.executors import LocalExecutor

    started = []
    monkeypatch.setattr(context, "make_executor", lambda cfg, **kw: started.append(cfg) or LocalExecutor())
    other = tmp_path / "other"
    shutil.copytree(indexed_copy.index, other)
    note = min(p for p in indexed_copy.corpus.rglob("*.txt"))
    note.write_text(note.read_text() + "\nMara Voss opened a second clinic in Port Elling.\n")
    s = run([indexed_copy.corpus], indexed_copy.index, make_config(execution={"executor": "ray"}))
    assert s["chunks_extracted"] > 0 and started == []
    rows = IndexStore(indexed_copy.index).read("stage_metrics", where=f"run_id = '{s['run_id']}'").to_pylist()
    assert {r["stage"] for r in rows if json.loads(r["details"]).get("ran_in_driver")} >= {"chunk", "extract", "embed"}
    t = run([indexed_copy.corpus], other, make_config(execution={"executor": "ray", "inline_batches": 0, "inline_seconds": 0}))
    assert len(started) == 1 and t["chunks_extracted"] == s["chunks_extracted"]
    for name in ("chunks", "mentions", "entities", "relationships"):
        a, b = IndexStore(indexed_copy.index).read(name), IndexStore(other).read(name)
        key = a.column_names[0]
        assert a.sort_by(key).drop_columns([c for c in a.column_names if c.endswith("run_id")]).equals(
            b.sort_by(key).drop_columns([c for c in b.column_names if c.endswith("run_id")])), name

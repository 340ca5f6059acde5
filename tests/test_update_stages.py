"""The stages after resolve on an update: each skips when nothing it reads moved, the embed stage
reads the text of new chunks only, reports are written only where they changed, and publish
counts rows from the Delta log."""

from __future__ import annotations

import json
from pathlib import Path

from _helpers import run_stage_details as _details

from graphwright.config import load_config
from graphwright.pipeline.runner import run_index
from graphwright.storage.delta import IndexStore

CONFIG = load_config(overrides={"execution": {"executor": "local"}, "embed": {"engine": "hashing", "dim": 32},
                                "ingest": {"max_delete_fraction": 1.0}})
DOCS = {f"d{i}": f"Alice Moreau met Bruno Keller in Port Elling. Doc {i}: Chidi Okafor wrote to Emil Novak near Kestrel Island."
        for i in range(5)}


def _index(src: Path, index: Path, docs: dict[str, str], config=CONFIG) -> dict:
    for old in src.glob("*.txt"):
        old.unlink()
    for name, text in docs.items():
        (src / f"{name}.txt").write_text(text)
    return run_index([str(src)], index, config, show_progress=False, log=lambda m: None)


def test_stages_skip_when_nothing_they_read_moved_and_run_when_it_did(tmp_path):
    src, index = tmp_path / "src", tmp_path / "index"
    src.mkdir()
    _index(src, index, DOCS)
    noop = _details(index, _index(src, index, DOCS))
    assert all(noop[s].get("skipped") for s in ("cluster", "report", "embed")), noop
    changed = _details(index, _index(src, index, DOCS | {"d9": "Farah Haddad met Alice Moreau in Amberfield."}))
    assert not any(changed[s].get("skipped") for s in ("cluster", "report", "embed"))


def test_embed_runs_again_when_only_what_the_search_files_read_changed(tmp_path):
    from graphwright.storage.manifest import load_manifest

    src, index = tmp_path / "src", tmp_path / "index"
    src.mkdir()
    _index(src, index, DOCS)
    before = load_manifest(IndexStore(index))["vector_indexes"]
    config = load_config(overrides={**CONFIG.model_dump(), "search_index": {"synonym_threshold": 0.95}})
    summary = run_index([str(src)], index, config, show_progress=False, log=lambda m: None)
    assert not _details(index, summary)["embed"].get("skipped")  # a search-file setting changed: rebuilt
    assert load_manifest(IndexStore(index))["vector_indexes"]["synonyms"] != before["synonyms"]


def test_embed_takes_the_new_chunks_and_their_text_from_the_log(tmp_path, monkeypatch):
    src, index = tmp_path / "src", tmp_path / "index"
    src.mkdir()
    _index(src, index, DOCS)
    asked, read = [], []
    real_rows_in, real_read = IndexStore.rows_in, IndexStore.read

    def rows_in(self, name, column, values, columns):
        if name == "chunks":
            asked.append((len(set(values)), tuple(columns)))
        return real_rows_in(self, name, column, values, columns)

    def whole(self, name, *args, **kwargs):
        if name == "chunks":
            read.append(kwargs.get("columns"))
        return real_read(self, name, *args, **kwargs)

    monkeypatch.setattr(IndexStore, "rows_in", rows_in)
    monkeypatch.setattr(IndexStore, "read", whole)
    # d1 edited: its one chunk gets a new id; d0 gone; d9 new
    docs = {k: v for k, v in DOCS.items() if k != "d0"} | {"d1": DOCS["d1"] + " Later.", "d9": "Farah Haddad met Alice Moreau in Amberfield."}
    summary = _index(src, index, docs)
    embed = _details(index, summary)["embed"]
    assert embed["chunk_changes"] == "log"
    assert embed["chunk"] == {"embedded": 2, "reused": 3, "removed": 2}
    # no lookup of the new chunks' text by the embed stage (the lexical index makes its own), nor
    # a read of every chunk id: the extract and embed stages had them from the log
    assert asked and all(columns == ("chunk_id", "doc_id", "text", "n_tokens") for _, columns in asked), asked
    assert not [c for c in read if c == ["chunk_id"]], read
    monkeypatch.undo()
    store = IndexStore(index)

    def embedded() -> list[str]:
        return sorted(store.read("embeddings", columns=["item_id"], where="kind = 'chunk'").column("item_id").to_pylist())

    chunk_ids = sorted(store.read("chunks", columns=["chunk_id"]).column("chunk_id").to_pylist())
    assert embedded() == chunk_ids
    # a write to the embeddings since (another writer): the stored vectors are compared with the chunks again
    store.delete("embeddings", f"item_id = '{chunk_ids[0]}'")
    again = _details(index, _index(src, index, docs | {"d8": "Gita Rao met Bruno Keller in Port Elling."}))["embed"]
    assert again["chunk_changes"] == "table" and again["chunk"]["embedded"] == 2  # d8's chunk, and the one deleted
    assert embedded() == sorted(store.read("chunks", columns=["chunk_id"]).column("chunk_id").to_pylist())


def test_extract_skips_a_no_op_and_takes_an_updates_chunks_from_the_log(tmp_path, monkeypatch):
    import threading

    from graphwright.stages.extract import todo

    src, index, fresh_src, fresh = tmp_path / "src", tmp_path / "index", tmp_path / "fresh-src", tmp_path / "fresh"
    src.mkdir()
    fresh_src.mkdir()
    _index(src, index, DOCS)
    assert _details(index, _index(src, index, DOCS))["extract"].get("skipped")
    # its note's result names no table: a compaction rebases what is under a table's name
    from graphwright.storage import contracts

    note = json.loads((index / "state" / "extract.json").read_text())
    assert note["result"]["n_chunks"] == 5 and not set(note["result"]) & set(contracts.all_schemas())
    docs = {k: v for k, v in DOCS.items() if k != "d0"} | {"d9": "Farah Haddad met Alice Moreau in Amberfield."}
    deleting, real = [], todo.delete_matching
    monkeypatch.setattr(todo, "delete_matching", lambda *a, **k: deleting.append(threading.current_thread().name) or real(*a, **k))
    asked, among = [], todo._done_among
    monkeypatch.setattr(todo, "_done_among", lambda store_, key, ids: asked.append(len(ids)) or among(store_, key, ids))
    update = _details(index, _index(src, index, docs))["extract"]
    monkeypatch.undo()
    assert len(asked) == 1 and asked[0] >= 1  # the log's chunk rows, looked up among the markers
    assert update["work_found_from"] == "log" and update["chunks_extracted"] == 1
    # which of the log's chunks are done is asked with their ids as the set looked up, not the
    # extractor's every marker (1.2M of them at 1.2M chunks)
    import pyarrow as pa
    import pyarrow.compute as pc

    store = IndexStore(index)
    chunk = store.read("extractions", columns=["chunk_id"]).column("chunk_id")[0].as_py()
    sizes, is_in = [], pc.is_in
    monkeypatch.setattr(pc, "is_in", lambda values, value_set, **kw: sizes.append(len(value_set)) or is_in(values, value_set=value_set, **kw))
    done = todo._done_among(store, update["extractor"], pa.array([chunk, "no-such-chunk"]))
    monkeypatch.undo()
    assert done.to_pylist() == [chunk] and sizes == [2]
    assert len(deleting) == 3 and all(t.startswith("extract-delete") for t in deleting)  # the three tables side by side
    assert update["removed"]["mentions"] > 0 and update["removed"]["extractions"] == 1  # the rows of d0's chunk
    _index(fresh_src, fresh, docs)
    for name, key in (("mentions", "mention_id"), ("assertions", "assertion_id"), ("extractions", "chunk_id")):
        got, want = (sorted(IndexStore(i).read(name, columns=[key]).column(key).to_pylist()) for i in (index, fresh))
        assert got == want, name
    # a write to its tables since its last run (another writer, an interrupted run): from the tables
    store = IndexStore(index)
    store.delete("mentions", f"chunk_id = '{store.read('mentions', columns=['chunk_id']).column('chunk_id')[0].as_py()}'")
    again = _details(index, _index(src, index, docs | {"d8": "Gita Rao met Bruno Keller in Port Elling."}))["extract"]
    assert again["work_found_from"] == "tables" and again["chunks_extracted"] == 1


def test_publish_counts_from_the_log_equal_the_tables(tmp_path):
    src, index = tmp_path / "src", tmp_path / "index"
    src.mkdir()
    _index(src, index, DOCS)
    summary = _index(src, index, {k: v for k, v in DOCS.items() if k != "d1"})
    store = IndexStore(index)
    assert summary["entities"] == store.read("entities").num_rows
    assert summary["relationships"] == store.read("relationships").num_rows
    assert summary["communities"] == store.read("communities").num_rows
    assert summary["chunks"] == store.read("chunks").num_rows


def test_an_update_patches_documents_and_chunks_instead_of_merging_them(tmp_path, monkeypatch):
    # a MERGE reads every row of its target (at 1.2M chunks, every chunk's and document's text);
    # a patch reads the key column and rewrites only the files holding a changed key
    src, index = tmp_path / "src", tmp_path / "index"
    src.mkdir()
    _index(src, index, DOCS)
    documents_before = IndexStore(index).version("documents")
    merged = []
    real = IndexStore.upsert
    monkeypatch.setattr(IndexStore, "upsert", lambda self, name, table: merged.append(name) or real(self, name, table))
    docs = {k: v for k, v in DOCS.items() if k != "d0"} | {"d1": DOCS["d1"] + " Gita Rao sailed to Amberfield.",
                                                           "d9": "Farah Haddad met Alice Moreau in Amberfield."}
    _index(src, index, docs)
    assert not {"documents", "chunks"} & set(merged), merged
    store = IndexStore(index)
    assert store.version("documents") == documents_before + 1  # written and deleted documents in one commit
    fresh_src, fresh = tmp_path / "fresh-src", tmp_path / "fresh"
    fresh_src.mkdir()
    _index(fresh_src, fresh, docs)
    for name, key, columns in (("documents", "doc_id", ["doc_id", "source_key", "text", "content_hash"]),
                               ("chunks", "chunk_id", ["chunk_id", "doc_id", "doc_hash", "chunk_index", "text"])):
        assert store.read(name, columns=columns).sort_by(key).equals(IndexStore(fresh).read(name, columns=columns).sort_by(key)), name


def test_an_update_writes_only_the_aliases_that_changed(tmp_path):
    """Resolve patches entity_aliases with the rows that changed (an overwrite made every alias
    new to readers of the table's changes, and rewrote the whole table each night)."""
    from graphwright.storage.changes import changes_since

    src, index = tmp_path / "src", tmp_path / "index"
    src.mkdir()
    _index(src, index, DOCS)
    store = IndexStore(index)
    before_rows = {r["alias"]: r for r in store.read("entity_aliases").to_pylist()}
    before = store.version("entity_aliases")
    summary = _index(src, index, DOCS | {"d9": "Farah Haddad met Alice Moreau in Amberfield. Farah Haddad wrote."})
    after_rows = {r["alias"]: r for r in store.read("entity_aliases").to_pylist()}
    changed = {a for a, r in after_rows.items() if before_rows.get(a) != r}
    ch = changes_since(store, "entity_aliases", before, "alias", ["alias"])
    assert ch is not None and 0 < len(changed) < len(after_rows)
    assert set(ch.rows.column("alias").to_pylist()) == changed
    assert set(ch.deleted.to_pylist()) == set(before_rows) - set(after_rows)


def test_communities_written_with_chunk_lists_are_rewritten_once_without_them(tmp_path):
    """An index from before communities counted their chunks (each row listed them: nine tenths
    of the table, rewritten by every update that touched a member) is rewritten whole by the
    next run, even one in which nothing moved, with the same communities; later updates patch it."""
    import json

    import pyarrow as pa
    from deltalake import write_deltalake

    from graphwright.storage.patch import retired_columns

    src, index = tmp_path / "src", tmp_path / "index"
    src.mkdir()
    _index(src, index, DOCS)
    store = IndexStore(index)
    fresh = {r["community_id"]: r["n_chunks"] for r in store.read("communities", columns=["community_id", "n_chunks"]).to_pylist()}
    chunks_of = dict(zip(*(store.read("entities", columns=["entity_id", "chunk_ids"]).column(c).to_pylist() for c in ("entity_id", "chunk_ids"))))
    old = store.read("communities").drop_columns(["n_chunks"])
    lists = [sorted({c for e in members for c in chunks_of[e]}) for members in old.column("entity_ids").to_pylist()]
    old = old.append_column("chunk_ids", pa.array(lists, pa.list_(pa.string())))
    write_deltalake(store.path("communities"), old, mode="overwrite", schema_mode="overwrite")
    state = index / "state" / "cluster" / "state.json"  # made from that table, as an older version left it
    state.write_text(json.dumps({**json.loads(state.read_text()), "communities": store.version("communities")}))
    note = json.loads((index / "state" / "cluster.json").read_text())  # the note an older layout left
    note["key"] = note["key"].rsplit("|", 1)[0]
    (index / "state" / "cluster.json").write_text(json.dumps(note))

    reports_version = store.version("community_reports")
    noop = _details(index, _index(src, index, DOCS))
    assert not noop["cluster"].get("skipped") and noop["cluster"]["columns_retired"] == ["chunk_ids"]
    assert noop["cluster"]["incremental"]  # the same communities, rewritten in place: not clustered again
    assert store.version("community_reports") == reports_version  # so no report is written again
    assert retired_columns(store, "communities") == []
    assert {r["community_id"]: r["n_chunks"] for r in store.read("communities", columns=["community_id", "n_chunks"]).to_pylist()} == fresh
    assert [fresh[c] for c in old.column("community_id").to_pylist()] == [len(cs) for cs in lists]

    again = _details(index, _index(src, index, DOCS))
    assert again["cluster"].get("skipped")
    update = _details(index, _index(src, index, DOCS | {"d9": "Farah Haddad met Alice Moreau in Amberfield."}))
    assert update["cluster"]["incremental"] and "columns_retired" not in update["cluster"]


def _waits_for(event, seen: list, name: str, work):
    """`work`, called once `event` is set (or 5 s later); `seen` gets whether it was set in time."""
    def wrapped(*args, **kwargs):
        seen.append((name, event.wait(5)))
        return work(*args, **kwargs)
    return wrapped


def _sets(event, work):
    def wrapped(*args, **kwargs):
        event.set()
        return work(*args, **kwargs)
    return wrapped


def test_an_updates_fresh_top_level_runs_while_the_previous_hierarchy_is_read(tmp_path, monkeypatch):
    import threading

    from graphwright.stages.cluster import update

    src, index = tmp_path / "src", tmp_path / "index"
    src.mkdir()
    _index(src, index, DOCS)
    started, seen = threading.Event(), []
    monkeypatch.setattr(update, "fresh_top", _sets(started, update.fresh_top))
    monkeypatch.setattr(update, "previous_levels", _waits_for(started, seen, "previous_levels", update.previous_levels))
    details = _details(index, _index(src, index, DOCS | {"d9": "Farah Haddad met Alice Moreau in Amberfield."}))
    assert details["cluster"]["incremental"] and "modularity_fresh" in details["cluster"]["changes"]
    assert seen == [("previous_levels", True)]


def test_an_updates_community_rows_are_made_while_its_fresh_top_level_is(tmp_path, monkeypatch):
    """The rows of the units' communities are made before the fresh top level is waited for (the
    driver's core would idle through the wait); the table written stays consistent."""
    import threading

    from graphwright.stages.cluster import update

    src, index = tmp_path / "src", tmp_path / "index"
    src.mkdir()
    _index(src, index, DOCS)
    made, seen = threading.Event(), []
    monkeypatch.setattr(update, "_rows", _sets(made, update._rows))
    monkeypatch.setattr(update, "fresh_top", _waits_for(made, seen, "fresh_top", update.fresh_top))
    details = _details(index, _index(src, index, DOCS | {"d9": "Farah Haddad met Alice Moreau in Amberfield."}))
    assert details["cluster"]["incremental"] and details["cluster"]["changes"]["refreshed"] is False
    assert seen == [("fresh_top", True)]
    _chunk_counts_hold(IndexStore(index))


def test_the_lexical_indexes_are_written_beside_the_vector_indexes(tmp_path, monkeypatch):
    import threading

    from graphwright.stages.embed import lexical, search_files

    src, index = tmp_path / "src", tmp_path / "index"
    src.mkdir()
    started, seen = threading.Event(), []
    monkeypatch.setattr(lexical, "write_kind", _sets(started, lexical.write_kind))
    monkeypatch.setattr(search_files, "write_vector_index", _waits_for(started, seen, "vectors", search_files.write_vector_index))
    _index(src, index, DOCS)
    assert seen and all(in_time for _, in_time in seen)
    manifest = IndexStore(index).read("index_manifest").to_pylist()
    assert manifest  # published, with every file


def test_an_updates_community_rows_are_built_a_level_per_thread(tmp_path, monkeypatch):
    import threading

    from graphwright.stages.cluster.communities import ChunkLists

    src, index = tmp_path / "src", tmp_path / "index"
    src.mkdir()
    docs = {f"d{i}": f"{text} Part {i}: Gita Rao met Hamid Sayed at Lowmoor." for i, text in enumerate(DOCS.values())}
    config = load_config(overrides={**CONFIG.model_dump(), "cluster": {"max_cluster_size": 2}})  # two levels at least
    _index(src, index, docs, config)  # under the update's settings: other ones would cluster in full
    counted, calls = threading.Barrier(2, timeout=5), []
    real = ChunkLists.counts

    def counts(self, label, n_groups):  # each level's count waits for another level's
        try:
            counted.wait()
            calls.append(True)
        except threading.BrokenBarrierError:
            calls.append(False)
        return real(self, label, n_groups)

    monkeypatch.setattr(ChunkLists, "counts", counts)
    for old in src.glob("*.txt"):
        old.unlink()
    for name, text in (docs | {"d9": "Farah Haddad met Alice Moreau in Amberfield and Gita Rao."}).items():
        (src / f"{name}.txt").write_text(text)
    summary = run_index([str(src)], index, config, show_progress=False, log=lambda m: None)
    assert _details(index, summary)["cluster"]["incremental"]
    assert len(calls) >= 2 and calls[:2] == [True, True]


def test_report_planning_reads_entities_and_relationships_side_by_side(tmp_path, monkeypatch):
    import threading

    src, index = tmp_path / "src", tmp_path / "index"
    src.mkdir()
    _index(src, index, DOCS)
    config = load_config(overrides={**CONFIG.model_dump(), "report": {"mode": "llm"},
                                    "llm": {"engine": "openai", "base_url": "http://127.0.0.1:9/v1"}})
    from graphwright.stages.report.llm_reports import LLMReports

    started, seen = threading.Event(), []
    real = IndexStore.rows_in

    def rows_in(self, name, column, values, columns, version=None):
        if name == "relationships":
            started.set()
        elif name == "entities":
            seen.append(started.wait(5))
        return real(self, name, column, values, columns, version=version)

    monkeypatch.setattr(IndexStore, "rows_in", rows_in)
    store = IndexStore(index)
    communities = store.read("communities").to_pylist()
    LLMReports(store, config.report, config.llm, communities)  # plans only: nothing is asked
    assert seen and all(seen)


def test_extract_from_the_log_retries_an_unfinished_chunk_its_document_brought_back(tmp_path, monkeypatch):
    """An edited document's unchanged chunks keep their ids and are written again; one whose
    extraction had failed is extracted again, its old marker and rows gone (not doubled)."""
    from _helpers import make_extraction_fail

    config = load_config(overrides={**CONFIG.model_dump(), "chunk": {"size_tokens": 16, "overlap_tokens": 0},
                                    "extract": {"max_failed_fraction": 1.0}})
    text = ("Alice Moreau met Bruno Keller in Port Elling. " * 3 + "Hollis Wren wrote to Chidi Okafor from Kestrel Island. "
            + "Emil Novak sailed to Amberfield with Farah Haddad. " * 3)

    src, idx, fresh_src, fresh = tmp_path / "src", tmp_path / "index", tmp_path / "fresh-src", tmp_path / "fresh"
    src.mkdir()
    fresh_src.mkdir()
    make_extraction_fail(monkeypatch, "Hollis Wren", "extractor fell over")
    first = _index(src, idx, {"d0": text, "d1": "Gita Rao met Hamid Sayed at Lowmoor."}, config)
    assert first["chunks_failed"] == 1
    monkeypatch.undo()
    docs = {"d0": text + "Gita Rao visited Lowmoor in spring.", "d1": "Gita Rao met Hamid Sayed at Lowmoor."}
    update = _details(idx, _index(src, idx, docs, config))["extract"]
    assert update["work_found_from"] == "log" and update["chunks_failed"] == 0
    _index(fresh_src, fresh, docs, config)
    store = IndexStore(idx)
    markers = store.read("extractions", columns=["chunk_id", "status"]).to_pylist()
    assert {m["status"] for m in markers} == {"ok"} and len(markers) == len({m["chunk_id"] for m in markers})
    for name, key in (("mentions", "mention_id"), ("assertions", "assertion_id"), ("extractions", "chunk_id")):
        got, want = (sorted(IndexStore(i).read(name, columns=[key]).column(key).to_pylist()) for i in (idx, fresh))
        assert got == want, name


def _chunk_counts_hold(store) -> None:
    chunks_of = dict(zip(*(store.read("entities", columns=["entity_id", "chunk_ids"]).column(c).to_pylist()
                           for c in ("entity_id", "chunk_ids"))))
    for row in store.read("communities", columns=["entity_ids", "n_chunks"]).to_pylist():
        assert row["n_chunks"] == len({c for e in row["entity_ids"] for c in chunks_of[e]})


def test_an_update_finds_the_entities_whose_chunks_changed_from_the_log(tmp_path, monkeypatch):
    """A community counts its chunks again when a member's row was written since the last
    clustering (an entity mentioned in a new chunk, no edge changed), found from the Delta log's
    key columns, not by digesting every entity's chunk list."""
    src, index = tmp_path / "src", tmp_path / "index"
    src.mkdir()
    _index(src, index, DOCS)
    store = IndexStore(index)
    _chunk_counts_hold(store)
    derived = []
    real = IndexStore.read_derived
    monkeypatch.setattr(IndexStore, "read_derived", lambda self, name, *a, **k: (derived.append(name), real(self, name, *a, **k))[1])
    details = _details(index, _index(src, index, DOCS | {"d9": "Alice Moreau. Alice Moreau again."}))
    changes = details["cluster"]["changes"]
    assert details["cluster"]["incremental"] and 1 <= changes["rebuilt"] < changes["communities"]  # the log said which
    assert "entities" not in derived
    _chunk_counts_hold(store)

"""The files the embed stage writes for retrieval beside the vector indexes: lexical (BM25)
indexes, synonym edges and the passage graph. Built once, updated with what changed (equal to a
fresh build), pinned by the manifest, never overwritten, and removed by retention when no kept
version needs them."""

from __future__ import annotations

import hashlib
import json
import shutil

import numpy as np
import pyarrow as pa
import pytest
import tantivy
from _helpers import CORPUS, make_config, run

from graphwright.engines.lexical import open_version
from graphwright.ops.versions import retain
from graphwright.query.passage_graph import PassageGraph
from graphwright.query.searcher import Searcher
from graphwright.stages.embed.passage_graph import MENTION, RELATIONSHIP, SYNONYM
from graphwright.stages.embed.synonyms import read_synonyms
from graphwright.storage.delta import IndexStore
from graphwright.storage.manifest import load_manifest

# entity names that embed alike with the test profile's hashing embedder (shared words)
SYNONYMS = {"synonym_threshold": 0.5}


def _files(index) -> dict[str, str]:
    return {str(p.relative_to(index)): hashlib.sha256(p.read_bytes()).hexdigest()
            for folder in ("lexical", "graph") for p in (index / folder).rglob("*") if p.is_file()}


def _lexical_rows(index, kind: str) -> dict[str, dict]:
    store = IndexStore(index)
    lexical = open_version(store.files, load_manifest(store)["vector_indexes"][f"lexical:{kind}"])
    hits = lexical.searcher.search(tantivy.Query.all_query(), len(lexical) or 1, count=False).hits
    rows = {}
    for _, address in hits:
        doc = lexical.searcher.doc(address)
        rows[doc["item_id"][0]] = json.loads(bytes(doc["row"][0]))
    return rows


def _graph_edges(index) -> set[tuple[str, str, int, float]]:
    store = IndexStore(index)
    graph = PassageGraph(store.files, load_manifest(store)["vector_indexes"]["graph"])
    out = set()
    for node in range(graph.n_entities + graph.n_chunks):
        neighbours, weights, kinds = graph.row(node)
        for other, w, k in zip(neighbours.tolist(), weights.tolist(), kinds.tolist()):
            out.add((graph.ids([node])[0], graph.ids([other])[0], k, round(w, 4)))
    return out


def _synonyms(index) -> list[dict]:
    store = IndexStore(index)
    return read_synonyms(store.files, load_manifest(store)["vector_indexes"].get("synonyms")).to_pylist()


@pytest.fixture(scope="module")
def versions(tmp_path_factory):
    """The test corpus indexed, then updated (one document edited, one deleted, one added), and
    the updated corpus indexed fresh: (first index files, updated index, fresh index)."""
    root = tmp_path_factory.mktemp("search-files")
    corpus = root / "corpus"
    shutil.copytree(CORPUS, corpus)
    config = make_config(search_index=SYNONYMS)
    run([corpus], root / "updated", config)
    first = _files(root / "updated")
    first_manifest = load_manifest(IndexStore(root / "updated"))
    text = (corpus / "harbor.txt").read_text()
    (corpus / "harbor.txt").write_text(text + "\nCaptain Mara Voss later sold the Kestrel to Captain Mara Vossberg.\n")
    (corpus / "council.txt").unlink()
    (corpus / "ledger.txt").write_text("The Amberfield Ledger recorded that Pell Arden paid Tobias Reed for the copper.\n")
    run([corpus], root / "updated", config)
    run([corpus], root / "fresh", config)
    return first, first_manifest, root / "updated", root / "fresh"


def test_the_manifest_pins_lexical_indexes_synonyms_and_the_passage_graph(indexed):
    pinned = load_manifest(indexed.store)["vector_indexes"]
    assert {"lexical:chunk", "lexical:entity", "lexical:relationship", "lexical:report", "graph", "synonyms"} <= set(pinned)
    for path in pinned.values():
        assert (indexed.index / path).exists()


def test_an_update_equals_a_fresh_build(versions):
    _, _, updated, fresh = versions
    for kind in ("chunk", "entity", "relationship"):
        assert _lexical_rows(updated, kind) == _lexical_rows(fresh, kind), kind
    # communities are bound by quality, not equal to a fresh clustering (an update moves only the
    # entities it touched): the report index holds exactly the update's own reports
    reports = {r["community_id"]: r for r in IndexStore(updated).read("community_reports").to_pylist()}
    rows = _lexical_rows(updated, "report")
    assert set(rows) == set(reports)
    assert all(rows[c]["full_content"] == reports[c]["full_content"] and rows[c]["title"] == reports[c]["title"] for c in rows)
    assert _synonyms(updated) == _synonyms(fresh)
    assert _graph_edges(updated) == _graph_edges(fresh)


def _embed_details(index) -> dict:
    """The stage_metrics details of the last run's embed stage."""
    store = IndexStore(index)
    last = store.read("runs", columns=["run_id", "started_at"]).sort_by([("started_at", "descending")]).column("run_id")[0].as_py()
    return json.loads(store.read("stage_metrics", where=f"run_id = '{last}' AND stage = 'embed'").to_pylist()[0]["details"])


def _lexical_reads(index) -> dict:
    """How the last run's embed stage found each lexical index's changes."""
    return _embed_details(index)["lexical"]


def test_an_update_reads_from_the_delta_log_only_the_rows_that_changed(versions):
    _, _, updated, fresh = versions
    reads, store = _lexical_reads(updated), IndexStore(updated)
    assert {k: r["read"] for k, r in reads.items()} == {k: "changes" for k in ("chunk", "entity", "relationship", "report")}
    # the edit touched three documents of five: the rows of the files resolve kept are not read
    # (the chunks' DELETE rewrites their one file with its other rows, which are read again)
    assert reads["relationship"]["rows"] < store.read("relationships", columns=["relationship_id"]).num_rows / 2
    assert reads["entity"]["rows"] < store.read("entities", columns=["entity_id"]).num_rows
    assert {r["read"] for r in _lexical_reads(fresh).values()} == {"table"}  # a first build reads the tables


def test_an_update_overwrites_no_file_of_the_published_version(versions):
    first, first_manifest, updated, _ = versions
    after = _files(updated)
    assert {p: after.get(p) for p in first} == first  # every earlier file still there, unchanged
    assert load_manifest(IndexStore(updated))["vector_indexes"]["lexical:chunk"] != first_manifest["vector_indexes"]["lexical:chunk"]
    # the earlier version still answers from its own files
    old = Searcher(str(updated), version=first_manifest["version"])
    assert any(c["text"].startswith("The council") or "council" in c["text"].casefold()
               for c in old.chunks([c for c, _ in old.lexical_search("chunk", "council meeting", 5)]).values())


def test_an_update_searches_new_text_and_forgets_deleted_text(versions):
    _, _, updated, _ = versions
    searcher = Searcher(str(updated))
    hits = searcher.chunks([c for c, _ in searcher.lexical_search("chunk", "Vossberg ledger", 3)])
    assert any("Vossberg" in r["text"] for r in hits.values()) and any("Ledger" in r["text"] for r in hits.values())
    assert all(r["source_key"] != "council.txt" for r in searcher.chunks(list(_lexical_rows(updated, "chunk"))).values())


def test_a_rerun_on_unchanged_input_rewrites_nothing(versions, tmp_path):
    _, _, updated, _ = versions
    before = _files(updated)
    copy = tmp_path / "index"
    shutil.copytree(updated, copy)
    summary = run([updated.parent / "corpus"], copy, make_config(search_index=SYNONYMS))  # read from the same place
    assert _files(copy) == before
    assert load_manifest(IndexStore(copy))["version"] == load_manifest(IndexStore(updated))["version"], summary


def test_synonym_edges_join_names_that_embed_alike(versions):
    _, _, updated, _ = versions
    searcher = Searcher(str(updated))
    names = {r["entity_id"]: r["name"] for r in IndexStore(updated).read("entities", columns=["entity_id", "name"]).to_pylist()}
    pairs = {(names[p["entity_id"]], names[p["other_id"]]) for p in _synonyms(updated)}
    assert any({"Captain Mara Voss", "Captain Mara Vossberg"} == set(p) for p in pairs)
    for p in _synonyms(updated):
        assert p["entity_id"] < p["other_id"] and p["similarity"] >= SYNONYMS["synonym_threshold"]
    kinds = {k for _, _, k, _ in _graph_edges(updated)}
    assert kinds == {MENTION, RELATIONSHIP, SYNONYM}
    assert searcher.graph.n_chunks == IndexStore(updated).count("chunks")


def test_synonyms_take_their_query_vectors_from_the_name_index_not_the_table(versions, tmp_path, monkeypatch):
    """The names an update searches are in the name index it just wrote (the overlay's vectors
    are the table's): the synonym edges are the same, with no scan of the embeddings table."""
    from graphwright.engines.embed import model_name
    from graphwright.stages.embed import synonyms

    _, _, updated, _ = versions
    copy = tmp_path / "index"
    shutil.copytree(updated, copy)
    store = IndexStore(copy)
    pinned = load_manifest(store)["vector_indexes"]
    expected = _synonyms(copy)
    for path in (pinned["synonyms"], synonyms.covered_path(pinned["synonyms"])):
        (copy / path).unlink()
    monkeypatch.setattr(synonyms, "vector_matrix", lambda *a, **k: pytest.fail("the embeddings table was scanned"))
    config = make_config(search_index=SYNONYMS)
    written = synonyms.write_synonyms(store, config, model_name(config.embed), pinned[synonyms.NAME_KIND])
    assert written == pinned["synonyms"]
    assert read_synonyms(store.files, written).to_pylist() == expected and expected
    # an index that cannot give its vectors back (cuVS) has them read from the table: the same edges
    from graphwright.engines.vectors import VectorIndex
    from graphwright.stages.embed.vector_files import vector_matrix

    def cannot(self, positions):
        raise AttributeError("reconstruct_batch")

    monkeypatch.setattr(VectorIndex, "vectors", cannot)
    monkeypatch.setattr(synonyms, "vector_matrix", vector_matrix)
    for path in (pinned["synonyms"], synonyms.covered_path(pinned["synonyms"])):
        (copy / path).unlink()
    written = synonyms.write_synonyms(store, config, model_name(config.embed), pinned[synonyms.NAME_KIND])
    assert read_synonyms(store.files, written).to_pylist() == expected


def test_the_passage_graph_joins_each_chunk_to_the_entities_it_mentions(indexed):
    searcher = Searcher(str(indexed.index))
    graph = searcher.graph
    rows = indexed.store.read("entities", columns=["entity_id", "chunk_ids"]).to_pylist()
    for row in rows:
        node = graph.entity_nodes([row["entity_id"]])[0]
        assert sorted(graph.ids(graph.chunks_of(node))) == sorted(row["chunk_ids"])
        assert graph.chunk_count([node])[0] == len(row["chunk_ids"])
    rel = indexed.store.read("relationships", columns=["source_id", "target_id", "weight"]).to_pylist()
    pairs = {(min(a, b), max(a, b)): w for a, b, w in graph.relationship_pairs(graph.entity_nodes([r["source_id"] for r in rel]), touching=True)}
    for r in rel:
        a, b = graph.entity_nodes([r["source_id"], r["target_id"]])
        assert pairs[(min(a, b), max(a, b))] == pytest.approx(r["weight"])
    assert np.all(graph.entity_nodes(["not-an-entity"]) == -1)


def test_an_entitys_mentions_come_last_in_its_row_so_relationship_pairs_skip_them(indexed):
    from graphwright.stages.embed.passage_graph import MENTION

    graph = Searcher(str(indexed.index)).graph
    for node in range(graph.n_entities):
        kinds = graph.row(node)[2]
        others = len(kinds) - graph.chunk_count([node])[0]
        assert np.all(kinds[others:] == MENTION) and not np.any(kinds[:others] == MENTION)
    rel = indexed.store.read("relationships", columns=["source_id", "target_id", "weight"]).to_pylist()
    some = sorted({r["source_id"] for r in rel[::2]} | {r["target_id"] for r in rel[::3]})
    nodes = set(graph.entity_nodes(some).tolist())
    expected = {}
    for r in rel:
        a, b = graph.entity_nodes([r["source_id"], r["target_id"]])
        if a in nodes and b in nodes:
            expected[(min(a, b), max(a, b))] = pytest.approx(r["weight"])
    assert expected and {(a, b): w for a, b, w in graph.relationship_pairs(graph.entity_nodes(some))} == expected


def test_lookups_from_lexical_indexes_equal_the_tables(indexed):
    searcher = Searcher(str(indexed.index))
    chunks = indexed.store.read("chunks", columns=["chunk_id", "doc_id", "text"]).to_pylist()
    stored = searcher.chunks([c["chunk_id"] for c in chunks])
    assert {c: (r["doc_id"], r["text"]) for c, r in stored.items()} == {c["chunk_id"]: (c["doc_id"], c["text"]) for c in chunks}
    entities = indexed.store.read("entities").to_pylist()
    rows = searcher.entities([e["entity_id"] for e in entities] + ["missing"])
    for e in entities:
        r = rows[e["entity_id"]]
        assert (r["name"], r["type"], r["description"], r["n_chunks"]) == (e["name"], e["type"], e["description"], len(e["chunk_ids"]))
        assert r["chunk_ids"] == e["chunk_ids"][:10] and sorted(searcher.entity_chunks(r)) == sorted(e["chunk_ids"])
    assert "missing" not in rows
    reports = indexed.store.read("community_reports", columns=["community_id", "level", "title", "summary", "rating", "full_content"]).to_pylist()
    assert searcher.reports([r["community_id"] for r in reports]) == {r["community_id"]: r for r in reports}


@pytest.mark.parametrize("question", ['"unbalanced quote', "title:(x OR", "a" * 20000, "\x00\x1f", "", "the of and"])
def test_bm25_takes_any_question(indexed, question):
    searcher = Searcher(str(indexed.index))
    assert isinstance(searcher.lexical_search("chunk", question, 5), list)


def test_retention_removes_search_files_no_kept_version_needs(versions, tmp_path):
    _, first_manifest, updated, _ = versions
    copy = tmp_path / "index"
    shutil.copytree(updated, copy)
    store = IndexStore(copy)
    latest = load_manifest(store)
    retain(store, keep=1)
    left = _files(copy)
    for path in latest["vector_indexes"].values():
        assert path in left or path.startswith("vectors/")
    old = first_manifest["vector_indexes"]["lexical:chunk"]
    assert old not in left and old != latest["vector_indexes"]["lexical:chunk"]
    assert Searcher(str(copy)).lexical_search("chunk", "copper", 3)  # the kept version still searches


def test_the_passage_graph_is_the_same_whatever_order_the_scan_gives_its_batches(indexed, monkeypatch):
    """A scan of several files does not always give its batches in one order: each row lists its
    neighbours in node order, so the graph's files do not depend on it (and the keys are hashed
    once per run of batches, not once per batch)."""
    from graphwright.stages.embed import passage_graph

    store = indexed.store
    first, _ = passage_graph.build(store, None)
    scanner = IndexStore.scanner

    def shuffled(self, name, *args, **kwargs):
        scan = scanner(self, name, *args, **kwargs)

        def batches(columns):
            small = [b.slice(o, 5) for b in scan(columns) for o in range(0, b.num_rows, 5)]
            return iter(small[::-1])  # small batches, last first
        return batches

    monkeypatch.setattr(IndexStore, "scanner", shuffled)
    sorted_sizes = []  # the entries pair_order puts in order: the entity edges only, not every mention
    order = passage_graph.pair_order
    monkeypatch.setattr(passage_graph, "pair_order", lambda a, b, n_a, n_b: sorted_sizes.append(len(a)) or order(a, b, n_a, n_b))
    second, _ = passage_graph.build(store, None)
    assert {k: v.tolist() for k, v in first.items()} == {k: v.tolist() for k, v in second.items()}
    n_entities = len(first["entity_ids"])
    entity_edges = int(first["indptr"][n_entities] - first["chunk_counts"].sum())
    assert sorted_sizes == [entity_edges]  # the chunks' rows are the mentions' transpose


def test_mention_edges_already_in_order_are_used_as_given():
    """Resolve's codes give the mention edges valid and in order: they are not copied (two
    copies of 9.6M edges at 1.2M chunks); others are filtered and sorted."""
    from graphwright.stages.embed.passage_graph import _by_owner

    owner, chunk = np.array([0, 0, 1, 3], np.int64), np.array([1, 4, 0, 2], np.int64)
    kept = _by_owner(owner, chunk, 5)
    assert kept[0] is owner and kept[1] is chunk
    fixed = _by_owner(np.array([3, -1, 0, 0]), np.array([2, 1, 4, 1]), 5)
    assert [a.tolist() for a in fixed] == [[0, 0, 3], [1, 4, 2]]


def test_an_updates_passage_graph_is_brought_from_the_published_one_and_equals_a_build(versions):
    """The update's graph takes its mention edges from resolve's codes of the chunk lists
    (storage.lineage), or, where there are none (an index written before them), the published
    graph's mention edges of the entities whose rows did not change and the lists of those that
    did: not every entity's chunk list. Array for array it is the graph built from the tables,
    and both ways give the edges the lists give."""
    from graphwright.stages.embed import passage_graph
    from graphwright.stages.embed.passage_update import coded_mentions, updated_chunk_keys, updated_mentions

    _, _, updated, fresh = versions
    assert _embed_details(updated)["passage_graph"] == "lineage"
    assert _embed_details(fresh)["passage_graph"] == "lineage"
    store = IndexStore(updated)
    keys = passage_graph.node_keys(store)
    listed = passage_graph.mention_pairs(store, *keys)

    def edges(pairs):
        return sorted(zip(*(p.tolist() for p in pairs)))

    assert edges(coded_mentions(store, *keys)) == edges(listed)
    assert edges(updated_mentions(store, load_manifest(store, 1), *keys)) == edges(listed)
    # the chunk nodes too: the published graph's ids with the log's additions and deletions merged in
    assert _embed_details(updated)["passage_graph_chunk_ids"] == "changes"
    assert _embed_details(fresh)["passage_graph_chunk_ids"] == "table"
    assert updated_chunk_keys(store, load_manifest(store, 1)).equals(keys[1])
    gone = load_manifest(store, 1)
    assert updated_chunk_keys(store, {**gone, "vector_indexes": {**gone["vector_indexes"], "graph": "graph/passage-gone/meta.json"}}) is None
    shutil.copytree(updated, updated.parent / "no-lineage")
    bare = IndexStore(updated.parent / "no-lineage")
    for path in bare.files.list("state/lineage"):
        bare.files.delete(path)
    assert coded_mentions(bare, *keys) is None
    relative = load_manifest(store)["vector_indexes"]["graph"]
    graph = PassageGraph(store.files, relative)
    built, _ = passage_graph.build(store, graph.meta["synonyms"])
    for name, array in built.items():
        assert np.array_equal(np.load(updated / relative.rsplit("/", 1)[0] / f"{name}.npy"), array), name
    assert int((graph.kinds == MENTION).sum()) > 0


def test_a_passage_graph_whose_table_versions_are_unknown_is_built_from_the_tables(indexed, tmp_path):
    """A graph that retention removed, or one written before meta.json recorded its table
    versions whose manifest's versions do not give its path, cannot say what changed since: the
    lists are read whole. When the manifest's versions give its path, they are the ones."""
    from graphwright.stages.embed.passage_graph import node_keys
    from graphwright.stages.embed.passage_update import updated_mentions

    shutil.copytree(indexed.index, tmp_path / "index")
    store = IndexStore(tmp_path / "index")
    published = load_manifest(store)
    keys = node_keys(store)
    assert updated_mentions(store, published, *keys) is not None
    gone = {**published, "vector_indexes": {**published["vector_indexes"], "graph": "graph/passage-gone/meta.json"}}
    assert updated_mentions(store, gone, *keys) is None
    relative = published["vector_indexes"]["graph"]
    meta = json.loads(store.files.read_bytes(relative))
    del meta["versions"]  # as graphs were written before
    (tmp_path / "index" / relative).write_text(json.dumps(meta))
    assert updated_mentions(store, published, *keys) is not None
    later = {**published, "table_versions": {**published["table_versions"], "entities": published["table_versions"]["entities"] + 1}}
    assert updated_mentions(store, later, *keys) is None


def test_the_lexical_and_vector_indexes_go_to_whichever_thread_is_free(monkeypatch):
    """The passage graph is built beside the other search files; the lexical indexes and the
    vector indexes are independent pieces that either thread takes when free, not all behind one
    another in one thread (at 1.2M chunks one thread took every lexical index, 4 s, and the
    other waited 1.4 s for it at the end)."""
    import threading
    from types import SimpleNamespace

    from graphwright.stages.embed import search_files

    kinds = ["chunk", "entity", "name", "relationship"]
    by_thread, other_lexical = {}, threading.Event()

    def vector_index(store, kind, model, cfg, keys=None):
        by_thread[kind] = threading.current_thread().name
        return f"vectors/{kind}", {}

    def first_lexical():  # holds its thread until the other lexical index is written elsewhere
        by_thread["lexical:chunk"] = threading.current_thread().name
        assert other_lexical.wait(10), "the lexical indexes were written one after the other"
        return "lexical/chunk"

    def second_lexical():
        by_thread["lexical:entity"] = threading.current_thread().name
        other_lexical.set()
        return "lexical/entity"

    def lexical_work(store, cfg, stats, wanted):
        stats.update(chunk={}, entity={})
        return [("chunk", "lexical:chunk", first_lexical), ("entity", "lexical:entity", second_lexical)]

    monkeypatch.setattr(search_files, "write_vector_index", vector_index)
    monkeypatch.setattr(search_files, "lexical_work", lexical_work)
    monkeypatch.setattr(search_files, "_graph_files", lambda *args: {"graph": "graph/meta.json"})
    cfg = SimpleNamespace(search_index=SimpleNamespace(passage_graph=True))
    seconds: dict = {}
    files, _ = search_files.write_index_files(None, cfg, "model", kinds, seconds)
    assert files == {**{k: f"vectors/{k}" for k in kinds}, "lexical:chunk": "lexical/chunk", "lexical:entity": "lexical/entity",
                     "graph": "graph/meta.json"}
    held = by_thread.pop("lexical:chunk")
    assert set(by_thread.values()) == {by_thread["name"]} != {held}  # the rest, on the graph's thread meanwhile
    assert set(seconds["lexical"]) == {"chunk", "entity"} and seconds["lexical_s"] >= 0


def test_the_pieces_that_grow_with_the_corpus_are_taken_first(monkeypatch):
    """The relationships' and chunks' lexical indexes and the chunk vectors go first, so that none
    of them is the last piece one thread works on while the other waits."""
    from types import SimpleNamespace

    from graphwright.stages.embed import search_files

    taken = []

    def vector_index(store, kind, model, cfg, keys=None):
        if kind != "name":
            taken.append(kind)
        return f"vectors/{kind}", {}

    def lexical_work(store, cfg, stats, wanted):
        stats.update({k: {} for k in ("chunk", "entity", "relationship", "report")})
        return [(k, f"lexical:{k}", lambda k=k: taken.append(f"lexical:{k}") or f"lexical/{k}")
                for k in ("chunk", "entity", "relationship", "report")]

    def one_after_the_other(first, second, name):  # the first thread takes every piece, in the queue's order
        done = first()
        return done, second()

    monkeypatch.setattr(search_files, "write_vector_index", vector_index)
    monkeypatch.setattr(search_files, "lexical_work", lexical_work)
    monkeypatch.setattr(search_files, "_graph_files", lambda *args: {})
    monkeypatch.setattr(search_files, "side_by_side", one_after_the_other)
    cfg = SimpleNamespace(search_index=SimpleNamespace(passage_graph=True))
    seconds: dict = {}
    search_files.write_index_files(None, cfg, "model", ["chunk", "entity", "name", "report"], seconds)
    assert taken[:3] == ["lexical:relationship", "lexical:chunk", "chunk"]
    assert sorted(taken[3:]) == sorted(["lexical:entity", "lexical:report", "entity", "report"])
    assert set(seconds["vector_index_s"]) == {"chunk", "entity", "name", "report"}


def test_the_passage_graph_equals_its_reference_one_argsort_over_every_entry(versions):
    """The graph sorts its mention entries as bare keys and the entity-to-entity ones with their
    weights, then merges them: the arrays are those of one stable argsort over every entry, added
    as relationships, synonyms (a relationship first where both join two entities), then mentions."""
    from graphwright.stages.embed import passage_graph

    store = IndexStore(versions[2])
    synonyms = load_manifest(store)["vector_indexes"].get("synonyms")
    pairs = read_synonyms(store.files, synonyms)
    assert pairs is not None and pairs.num_rows  # the order of synonym against relationship entries is exercised
    entity_keys, chunk_keys = passage_graph.node_keys(store)
    built, meta = passage_graph.build(store, synonyms, (entity_keys, chunk_keys))
    n_e = len(entity_keys)
    n = n_e + len(chunk_keys)
    codes = {k: i for i, k in enumerate(entity_keys.to_pylist())}
    rel = store.read("relationships", columns=["source_id", "target_id", "weight"]).to_pylist()
    entries = []  # (src, dst, weight, kind), in the order they are added
    for rows, a, b, w, kind in ((rel, "source_id", "target_id", "weight", RELATIONSHIP),
                                (pairs.to_pylist(), "entity_id", "other_id", "similarity", SYNONYM)):
        for r in rows:
            entries += [(codes[r[a]], codes[r[b]], r[w], kind), (codes[r[b]], codes[r[a]], r[w], kind)]
    owner, chunk = passage_graph.mention_pairs(store, entity_keys, chunk_keys)
    for e, c in zip(owner.tolist(), chunk.tolist()):
        entries += [(e, n_e + c, 1.0, MENTION), (n_e + c, e, 1.0, MENTION)]
    entries.sort(key=lambda t: t[0] * n + t[1])  # stable
    assert meta["entries"] == len(entries)
    assert built["indices"].tolist() == [t[1] for t in entries]
    assert built["kinds"].tolist() == [t[3] for t in entries]
    assert np.allclose(built["weights"], np.array([t[2] for t in entries], np.float32))
    assert built["indptr"].tolist() == np.r_[0, np.cumsum(np.bincount([t[0] for t in entries], minlength=n))].tolist()
    assert built["chunk_counts"].tolist() == np.bincount(owner, minlength=n_e).tolist()


def test_the_passage_graph_puts_the_mentions_in_place_without_sorting_every_entrys_key(versions, monkeypatch):
    """Given its mention edges by entity, then chunk (as resolve's codes give them), the graph
    sorts nothing larger than the mentions themselves (the chunks' rows are a stable grouping of
    them by chunk): not the key of every entry, each mention twice, and it divides no key back
    into a row and a neighbour. The arrays are the reference ones (the test above)."""
    from graphwright.stages.embed import passage_graph
    from graphwright.stages.embed.passage_update import coded_mentions

    store = IndexStore(versions[2])
    synonyms = load_manifest(store)["vector_indexes"].get("synonyms")
    keys = passage_graph.node_keys(store)
    owner, chunk = coded_mentions(store, *keys)
    assert len(owner) > 1 and np.all(np.diff(owner * len(keys[1]) + chunk) > 0)  # already by entity, then chunk
    reference, _ = passage_graph.build(store, synonyms, keys)
    sorted_sizes, real_sort = [], np.sort

    def sort(a, *args, **kwargs):
        sorted_sizes.append(len(a))
        return real_sort(a, *args, **kwargs)

    monkeypatch.setattr(np, "sort", sort)
    built, _ = passage_graph.build(store, synonyms, keys, (owner, chunk))
    monkeypatch.undo()
    between = len(built["indices"]) - 2 * len(owner)  # entries between two entities
    assert between != 2 * len(owner)
    assert set(sorted_sizes) <= {len(owner), between}  # none since the entity edges are counted into place (pair_order)
    for name, array in reference.items():
        assert np.array_equal(built[name], array), name


@pytest.mark.parametrize("old, deleted, added, expected", [
    (["aa", "cc"], [], ["bb", "cc"], ["aa", "bb", "cc"]),  # a new id between, a rewritten row of one kept
    (["aa", "bb"], ["aa", "bb"], ["cc"], ["cc"]),  # every chunk replaced
    (["aa", "bb"], ["aa", "bb", "zz"], [], []),  # all gone (and one the graph never had)
    (["aa", "bb"], [], ["c"], None),  # an id of another length: read from the table
    (["a", "bb"], [], ["cc"], None),  # the published ids differ in length (padded): read from the table
])
def test_the_graphs_chunk_ids_are_merged_from_the_published_ones_and_the_log(tmp_path, monkeypatch, old, deleted, added, expected):
    import io
    from types import SimpleNamespace

    from graphwright.stages.embed import passage_update
    from graphwright.stages.embed.passage_graph import FORMAT

    store = IndexStore(tmp_path / "index")
    store.files.write_bytes("graph/passage-x/meta.json", json.dumps({"format": FORMAT, "versions": {"chunks": 3}}).encode())
    buffer = io.BytesIO()
    np.save(buffer, np.array(sorted(o.encode() for o in old)))
    store.files.write_bytes("graph/passage-x/chunk_ids.npy", buffer.getvalue())
    monkeypatch.setattr(passage_update, "changes_since", lambda *a: SimpleNamespace(
        rows=pa.table({"chunk_id": pa.array(added, pa.string())}), deleted=pa.array(deleted, pa.string())))
    got = passage_update.updated_chunk_keys(store, {"vector_indexes": {"graph": "graph/passage-x/meta.json"}})
    assert (got.to_pylist() if got is not None else None) == expected


def test_an_updates_lexical_rows_take_their_chunk_lists_heads_from_resolves_codes(versions, monkeypatch):
    """The entities and relationships an update changed are read without their chunk lists (the
    hub rows hold most of the index's list entries): each list's first ids and its length come
    from resolve's codes (storage.lineage). The items equal those made from the lists."""
    from graphwright.engines import lexical as lexical_engine
    from graphwright.stages.embed import lexical
    from graphwright.storage import changes

    _, first_manifest, updated, _ = versions
    store = IndexStore(updated)
    asked, real = [], changes.changes_since

    def recorded(store_, name, since, key, columns):
        asked.append((name, tuple(columns)))
        return real(store_, name, since, key, columns)

    monkeypatch.setattr(lexical, "changes_since", recorded)
    for kind in ("entity", "relationship"):
        since = lexical_engine.previous_sources(store.files, first_manifest["vector_indexes"][f"lexical:{kind}"])
        asked.clear()
        coded = lexical._changed(store, kind, since)
        assert asked and all("chunk_ids" not in columns for _, columns in asked), asked
        listed = lexical._changed(store, kind, since, codes=False)
        assert any("chunk_ids" in columns for _, columns in asked)
        assert coded[0].num_rows and coded[0].sort_by("item_id").equals(listed[0].sort_by("item_id")), kind
        assert coded[1].equals(listed[1]) and coded[2] == listed[2]


def test_chunk_list_heads_from_codes_equal_the_lists_cut():
    """Lists longer than a stored row keeps are cut to their first LIST_ITEMS ids, and counted
    whole; a row the codes do not hold sends the caller to the lists."""
    from graphwright.stages.embed.lexical import LIST_ITEMS, _with_chunk_heads
    from graphwright.storage.lineage import Lineage

    chunk_ids = pa.array([f"c{i:03d}" for i in range(40)])
    entity_ids = pa.array(["e0", "e1", "e2"])
    lists = {"e0": list(range(0, 40, 2)), "e1": [3], "e2": list(range(25))}  # codes, sorted
    pairs = np.array([0 * 3 + 1, 0 * 3 + 2], np.int64)  # (e0, e1), (e0, e2)
    rel_lists = [list(range(12)), [39]]
    indptr = np.r_[0, np.cumsum([len(lists[e]) for e in ("e0", "e1", "e2")])]
    rel_indptr = np.r_[0, np.cumsum([len(x) for x in rel_lists])]
    coded = Lineage(chunk_ids, entity_ids, indptr, np.concatenate([lists[e] for e in ("e0", "e1", "e2")]).astype(np.int32),
                    pairs, rel_indptr, np.concatenate(rel_lists).astype(np.int32), {})
    entities = pa.table({"entity_id": ["e2", "e0", "e1"]})
    got = _with_chunk_heads(entities, "entity", coded)
    assert got.column("n_chunks").to_pylist() == [25, 20, 1]
    assert got.column("chunk_ids").to_pylist() == [[f"c{i:03d}" for i in lists[e][:LIST_ITEMS]] for e in ("e2", "e0", "e1")]
    relationships = pa.table({"source_id": ["e2", "e1"], "target_id": ["e0", "e0"]})
    got = _with_chunk_heads(relationships, "relationship", coded)
    assert got.column("n_chunks").to_pylist() == [1, 12]
    assert got.column("chunk_ids").to_pylist() == [["c039"], [f"c{i:03d}" for i in range(LIST_ITEMS)]]
    assert _with_chunk_heads(pa.table({"entity_id": ["e0", "gone"]}), "entity", coded) is None
    assert _with_chunk_heads(pa.table({"source_id": ["e1"], "target_id": ["e2"]}), "relationship", coded) is None


def test_an_update_checks_the_names_it_searches_and_their_hits_not_every_name(tmp_path, monkeypatch):
    """Whether a name is long enough for synonym edges is asked of the names an update searches
    and of their hits (a regex over all 41k names was 0.4 s of a 0.1% update at 145k chunks);
    the edges are a fresh index's."""
    from graphwright.stages.embed import synonyms

    corpus = tmp_path / "corpus"
    shutil.copytree(CORPUS, corpus)
    config = make_config(search_index=SYNONYMS)
    run([corpus], tmp_path / "updated", config)
    (corpus / "harbor.txt").write_text((corpus / "harbor.txt").read_text() + "\nCaptain Mara Voss later sold the Kestrel to Captain Mara Vossberg.\n")
    checked, real = [], synonyms.named_enough
    monkeypatch.setattr(synonyms, "named_enough", lambda name: checked.append(name) or real(name))
    run([corpus], tmp_path / "updated", config)
    entities = IndexStore(tmp_path / "updated").count("entities")
    assert 0 < len(checked) < entities / 2, (len(checked), entities)
    monkeypatch.undo()
    run([corpus], tmp_path / "fresh", config)

    def edges(index):
        names = {r["entity_id"]: r["name"] for r in IndexStore(index).read("entities", columns=["entity_id", "name"]).to_pylist()}
        return {(names[p["entity_id"]], names[p["other_id"]], p["similarity"]) for p in _synonyms(index)}

    assert edges(tmp_path / "updated") == edges(tmp_path / "fresh") and edges(tmp_path / "fresh")


def test_resolves_codes_become_graph_nodes_without_a_hash_table_of_every_chunk_id(versions, monkeypatch):
    """coded_mentions numbers resolve's coded entities and chunks as graph nodes: where resolve's
    sorted ids are the node ids the codes are the nodes, where they differ (ids of one length)
    they are found by binary search; only ids of mixed lengths go through Arrow's hash lookup.
    The edges are the ones the lists give (the test above)."""
    from graphwright.stages.embed import passage_graph, passage_update
    from graphwright.stages.embed.passage_update import sorted_positions
    from graphwright.storage import lineage

    store = IndexStore(versions[2])
    keys = passage_graph.node_keys(store)
    listed = sorted(zip(*(p.tolist() for p in passage_graph.mention_pairs(store, *keys))))
    looked_up = []
    real = passage_update._codes
    monkeypatch.setattr(passage_update, "_codes", lambda values, k: looked_up.append(len(k)) or real(values, k))
    coded = lineage.current(store)
    assert coded.entity_ids.equals(keys[0]) and not coded.chunk_ids.equals(keys[1])  # both ways: as they are, searched
    owner, chunk = passage_update.coded_mentions(store, *keys)
    assert owner.dtype == chunk.dtype == np.int64
    assert sorted(zip(owner.tolist(), chunk.tolist())) == listed
    assert looked_up == []

    chunk_keys = keys[1]
    assert sorted_positions(chunk_keys, chunk_keys) is None
    fewer = chunk_keys.filter(pa.array([i % 3 != 1 for i in range(len(chunk_keys))]))
    some = pa.array([chunk_keys[2].as_py(), "x" * len(chunk_keys[0].as_py()), chunk_keys[0].as_py(), chunk_keys[1].as_py()])
    assert sorted_positions(some, fewer).tolist() == [1, -1, 0, -1]
    assert looked_up == []
    mixed = pa.array(["a", "bb", "c"])
    assert sorted_positions(pa.array(["bb", "zz", "a"]), mixed).tolist() == [1, -1, 0]
    assert looked_up == [3]  # mixed lengths: Arrow's lookup


def test_an_update_after_a_rollback_leaves_the_lexical_files_of_every_published_version_as_they_were(tmp_path):
    """Tantivy names a delete file by segment and opstamp: two updates of one base (before and
    after a rollback) that delete and add as many items name their delete files alike. The second
    must not overwrite the first's, which a published version pins."""
    from graphwright.ops.check import check
    from graphwright.ops.versions import rollback
    from graphwright.pipeline.runner import run_index
    from graphwright.query.searcher import Searcher
    from graphwright.storage.delta import IndexStore

    src = tmp_path / "src"
    src.mkdir()
    for i in range(3):
        (src / f"d{i}.txt").write_text(f"Copper ledger {i} of the harbor guild.")
    cfg = make_config(ingest={"max_delete_fraction": 1.0}, search_index={"passage_graph": False})
    index = tmp_path / "index"

    def update():
        run_index([str(src)], index, cfg, show_progress=False, log=lambda m: None)

    update()
    (src / "d0.txt").write_text("Tin ledger of the harbor guild.")
    update()

    def found(version: int) -> list[str]:
        searcher = Searcher(str(index), version=version)
        hits = searcher.lexical_search("chunk", "copper tin", 10)
        return sorted(row["text"] for row in searcher.chunks([c for c, _ in hits]).values())

    before = found(2)
    store = IndexStore(index)
    rollback(store, 1, "rollback-run")
    (src / "d0.txt").write_text("Copper ledger 0 of the harbor guild.")
    (src / "d2.txt").write_text("Wool ledger of the harbor guild.")
    update()
    assert found(2) == before
    assert not check(store)["problems"]  # every pinned file's sha256 as published


def test_synonym_pairs_found_under_other_settings_are_not_kept(tmp_path):
    from graphwright.pipeline.runner import run_index
    from graphwright.stages.embed.synonyms import read_synonyms
    from graphwright.storage.delta import IndexStore
    from graphwright.storage.manifest import load_manifest

    src = tmp_path / "src"
    src.mkdir()
    for name, text in {"a": "Harbor Lantern Society met Bruno Keller near Port Elling.",
                       "c": "Lantern Society Archive wrote to Emil Novak near Kestrel Island.",
                       "e": "Society Archive Lantern Room thanked Farah Haddad near Greywater River.",
                       "d": "Harbor Lantern Guild Society argued with Dana Whitfield near Amberfield."}.items():
        (src / f"{name}.txt").write_text(text)

    def pairs(index, threshold: float) -> list[float]:
        cfg = make_config(embed={"dim": 1024}, search_index={"synonym_threshold": threshold})
        run_index([str(src)], index, cfg, show_progress=False, log=lambda m: None)
        store = IndexStore(index)
        table = read_synonyms(store.files, load_manifest(store)["vector_indexes"].get("synonyms"))
        return sorted(round(s, 4) for s in table.column("similarity").to_pylist())

    looser = pairs(tmp_path / "index", 0.5)
    assert any(s < 0.7 for s in looser)
    assert pairs(tmp_path / "index", 0.7) == pairs(tmp_path / "fresh", 0.7)


def test_vector_files_built_under_other_index_settings_are_not_laid_over(tmp_path):
    """Without a change an update lays an empty overlay over the published file: one built as
    HNSW under a lower threshold must be rebuilt as the exact index a fresh build makes."""
    from graphwright.pipeline.runner import run_index
    from graphwright.storage.delta import IndexStore
    from graphwright.storage.manifest import load_manifest

    src = tmp_path / "src"
    src.mkdir()
    for i in range(6):
        (src / f"d{i}.txt").write_text(f"Alice Moreau met Bruno Keller in Port Elling on day {i}. The harbor was busy {i}.")

    def files(index, threshold: int) -> dict:
        run_index([str(src)], index, make_config(vectors={"hnsw_threshold": threshold}), show_progress=False, log=lambda m: None)
        return load_manifest(IndexStore(index))["vector_indexes"]

    files(tmp_path / "index", 1)
    updated, fresh = files(tmp_path / "index", 200_000), files(tmp_path / "fresh", 200_000)
    assert {k: updated[k] for k in ("chunk", "entity")} == {k: fresh[k] for k in ("chunk", "entity")}


def test_a_lexical_index_whose_deleted_documents_pass_the_share_is_rebuilt_and_scores_as_a_fresh_one(tmp_path):
    """BM25 counts deleted documents until a merge drops them: six of nine deleted flipped the
    ranking of 'copper tin' against a fresh build's."""
    from graphwright.pipeline.runner import run_index
    from graphwright.query.searcher import Searcher

    src = tmp_path / "src"
    src.mkdir()
    for i in range(6):
        (src / f"old{i}.txt").write_text(f"Copper shipments arrived at the harbor, entry {i}.")
    for name, metal in (("a", "Copper copper"), ("b", "Tin"), ("c", "Wool")):
        (src / f"{name}.txt").write_text(f"{metal} was traded by the guild.")
    cfg = make_config(ingest={"max_delete_fraction": 1.0})

    def ranked(index) -> list[tuple[str, float]]:
        run_index([str(src)], index, cfg, show_progress=False, log=lambda m: None)
        searcher = Searcher(str(index))
        hits = searcher.lexical_search("chunk", "copper tin", 3)
        rows = searcher.chunks([c for c, _ in hits])
        return [(rows[c]["text"], round(score, 5)) for c, score in hits]

    ranked(tmp_path / "index")
    for i in range(6):
        (src / f"old{i}.txt").unlink()
    assert ranked(tmp_path / "index") == ranked(tmp_path / "fresh")

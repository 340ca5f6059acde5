"""A small update of a published vector index (HNSW or flat) writes an overlay file beside the published
base instead of reading and rewriting the base (engines.vectors.overlay): the files it writes
follow the change, queries see exactly the live items, and check, repair and retention treat
the overlay and its base as one index."""

from __future__ import annotations

import numpy as np
import pytest
from _helpers import index_fresh, make_config, run

from graphwright.engines.vectors.overlay import OVERLAY_SUFFIX, LayeredIndex, base_of, read_overlay
from graphwright.ops.check import check
from graphwright.ops.repair import repair
from graphwright.ops.versions import retain
from graphwright.query import query
from graphwright.stages.embed import vector_files
from graphwright.storage.health import StorageError
from graphwright.storage.manifest import PublishedIndex


def overlay_config(share: float = 0.9, hnsw_threshold: int = 5):
    return make_config(vectors={"hnsw_threshold": hnsw_threshold, "overlay_max_share": share})


def edit(corpus, name: str, old: str, new: str) -> None:
    path = corpus / name
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def listed_vector_files(index) -> set[str]:
    return {str(p.relative_to(index)) for p in (index / "vectors").iterdir()}


def live_chunks(store) -> set[str]:
    return set(store.read("chunks").column("chunk_id").to_pylist())


@pytest.fixture(params=[5, 10**6], ids=["hnsw", "flat"])
def layered(tmp_path, monkeypatch, request):
    """An index whose published chunk vectors are an overlay over the first build's base: an
    HNSW index, or a flat one (below the HNSW threshold, which was rebuilt from a scan)."""
    import faiss

    config = overlay_config(hnsw_threshold=request.param)
    fresh = index_fresh(tmp_path / "overlay", config=config)
    base = PublishedIndex(fresh.store).manifest["vector_indexes"]["chunk"]
    assert base.endswith(".faiss")
    before = listed_vector_files(fresh.index)
    base_bytes = (fresh.index / base).read_bytes()
    edit(fresh.corpus, "harbor.txt", "until the lamps burned low.", "until the lamps burned out.")
    scans = []
    scan = vector_files.vector_matrix
    with monkeypatch.context() as m:  # the update never loads a vector index file
        m.setattr(faiss, "read_index", lambda *a: pytest.fail("read a faiss index file"))
        m.setattr(vector_files, "vector_matrix", lambda store, where, *a: scans.append(where) or scan(store, where, *a))
        run([fresh.corpus], fresh.index, config)
    # the new chunks' vectors come from the embeddings files the update wrote, not a scan of the table
    assert not [w for w in scans if "'chunk'" in w]
    return fresh, config, base, before, base_bytes


def test_a_small_update_writes_an_overlay_not_a_new_base(layered):
    fresh, config, base, before, base_bytes = layered
    store = fresh.store
    relative = PublishedIndex(store).manifest["vector_indexes"]["chunk"]
    assert relative.endswith(OVERLAY_SUFFIX) and base_of(store.files, relative) == base
    assert (fresh.index / base).read_bytes() == base_bytes  # the base is never rewritten
    new_chunk_files = {f for f in listed_vector_files(fresh.index) - before if f.startswith("vectors/chunk-")}
    assert new_chunk_files == {relative}
    # the overlay holds the new chunks' own vectors and skips the replaced chunks' base positions
    overlay = read_overlay(store.files, relative)
    emb = store.read("embeddings", where="kind = 'chunk'")
    stored = dict(zip(emb.column("item_id").to_pylist(), emb.column("vector").to_pylist()))
    assert overlay.ids and all(np.allclose(v, stored[i]) for i, v in zip(overlay.ids, overlay.vectors))
    vi = PublishedIndex(store).vector_index("chunk")
    assert isinstance(vi, LayeredIndex)
    now = live_chunks(store)
    assert set(vi.ids) - {None} == now and overlay.removed_ids and not set(overlay.removed_ids) & now
    evidence = query(str(fresh.index), "the lamps burned out", mode="naive", top_k=50)["evidence"]
    assert len(evidence) == len(now) and {e["chunk_id"] for e in evidence} == now
    top = query(str(fresh.index), "until the lamps burned out", mode="naive", top_k=1)["evidence"][0]
    assert top["chunk_id"] in overlay.ids and "burned out" in top["text"]
    assert check(store)["ok"], check(store)["problems"]


def test_a_second_update_lays_a_new_overlay_over_the_same_base(layered):
    fresh, config, base, _, _ = layered
    store = fresh.store
    first = PublishedIndex(store).manifest["vector_indexes"]["chunk"]
    carried = set(read_overlay(store.files, first).ids)
    edit(fresh.corpus, "festival.md", "lantern", "lamp")
    run([fresh.corpus], fresh.index, config)
    second = PublishedIndex(store).manifest["vector_indexes"]["chunk"]
    assert second != first and second.endswith(OVERLAY_SUFFIX) and base_of(store.files, second) == base
    now = live_chunks(store)
    overlay = read_overlay(store.files, second)
    assert carried & now <= set(overlay.ids)  # the first overlay's live items are carried
    assert set(PublishedIndex(store).vector_index("chunk").ids) - {None} == now
    # retention keeps the base the kept overlay lays over, and drops the overlay no version uses
    retain(store, 1)
    assert (fresh.index / base).exists() and (fresh.index / second).exists() and not (fresh.index / first).exists()
    assert check(store)["ok"]
    assert {e["chunk_id"] for e in query(str(fresh.index), "lamp", mode="naive", top_k=50)["evidence"]} == now


def test_an_overlay_past_its_share_is_folded_into_a_new_base(layered):
    fresh, _, base, _, _ = layered
    store = fresh.store
    edit(fresh.corpus, "council.txt", "The", "A")
    run([fresh.corpus], fresh.index, overlay_config(share=0.001))
    relative = PublishedIndex(store).manifest["vector_indexes"]["chunk"]
    assert relative.endswith(".faiss") and relative != base
    vi = PublishedIndex(store).vector_index("chunk")
    assert set(vi.ids) - {None} == live_chunks(store)
    assert vi.index.ntotal == len(vi.ids)  # the overlay's vectors went into the HNSW graph


def test_a_lost_base_under_an_overlay_is_rebuilt_by_repair(layered):
    fresh, _, base, _, _ = layered
    store = fresh.store
    (fresh.index / base).unlink()
    found = check(store)
    assert not found["ok"] and any(base in p["detail"] for p in found["problems"])
    result = repair(store, "repair-test")
    assert result["ok"], result
    relative = PublishedIndex(store).manifest["vector_indexes"]["chunk"]
    assert relative.endswith(".faiss")
    now = live_chunks(store)
    assert {e["chunk_id"] for e in query(str(fresh.index), "lamps", mode="naive", top_k=50)["evidence"]} == now


def _unit_vectors(n: int, dim: int = 8) -> np.ndarray:
    data = np.random.default_rng(0).normal(size=(n, dim)).astype(np.float32)
    return data / np.linalg.norm(data, axis=1, keepdims=True)


def test_overlay_search_merges_both_layers_by_score():
    from graphwright.config import VectorConfig
    from graphwright.engines.vectors import build_index
    from graphwright.engines.vectors.overlay import Overlay

    data = _unit_vectors(40)
    ids, hashes = [f"i{n:02d}" for n in range(40)], [f"h{n}" for n in range(40)]
    base = build_index(ids[:30], data[:30], VectorConfig(hnsw_threshold=5), hashes[:30])
    # i00..i04 removed, i30..i39 added: what an index of i05..i39 returns, exactly
    layered = LayeredIndex(base, Overlay("b.faiss", ids[:5], hashes[:5], ids[30:], hashes[30:], data[30:]))
    exact = data[5:] @ data[:3].T
    for q, hits in enumerate(layered.search(data[:3], 5)):
        want = [ids[5 + i] for i in np.argsort(-exact[:, q], kind="stable")[:5]]
        assert [i for i, _ in hits] == want
    assert np.allclose(layered.reconstruct(32), data[32]) and layered.ids[:5] == [None] * 5
    # the vectors at positions of both layers, in the order asked, as they were added
    positions = [33, 7, 29, 30, 12]
    assert np.array_equal(layered.vectors(positions), data[positions].astype(np.float32))


@pytest.mark.parametrize("threshold", [5, 10**6], ids=["hnsw base", "flat base"])
def test_an_overlay_skips_items_by_key_whatever_the_base_layout(threshold):
    """A repair may rebuild a base under its name (derived from the items it holds) with another
    order and without the empty slots of an in-place update; a flat base may lie under an overlay
    once the index has crossed the HNSW threshold."""
    from graphwright.config import VectorConfig
    from graphwright.engines.vectors import VectorIndex, build_index
    from graphwright.engines.vectors.overlay import Overlay

    data = _unit_vectors(30)
    ids, hashes = [f"i{n:02d}" for n in range(30)], [f"h{n}" for n in range(30)]
    overlay = Overlay("b.faiss", ["i03", "i17"], ["h3", "h17"], [], [], np.zeros((0, 1), np.float32))
    first = build_index(ids, data, VectorConfig(hnsw_threshold=threshold), hashes)
    order = np.random.default_rng(1).permutation(30)
    rebuilt = build_index([ids[i] for i in order], data[order], VectorConfig(hnsw_threshold=threshold), [hashes[i] for i in order])
    with_slot = VectorIndex([None] + list(first.ids[1:]), first.index, [None] + list(first.text_hashes[1:]))  # i00 removed in place
    for base, live in ((first, set(ids)), (rebuilt, set(ids)), (with_slot, set(ids) - {"i00"})):
        layered = LayeredIndex(base, overlay)
        assert set(layered.ids) - {None} == live - {"i03", "i17"}
        found = {i for i, _ in layered.search(data[:5], 30)[0]}
        assert found == live - {"i03", "i17"}


def test_a_damaged_overlay_is_reported_and_repaired_not_a_crash(layered):
    fresh, config, _, _, _ = layered
    store = fresh.store
    relative = PublishedIndex(store).manifest["vector_indexes"]["chunk"]
    (fresh.index / relative).write_bytes(b"PAR1 not an overlay")
    found = check(store)
    assert not found["ok"] and any(relative in p["detail"] for p in found["problems"])
    with pytest.raises(StorageError, match="cannot be read.*check --index .* --repair"):
        PublishedIndex(store).vector_index("chunk")
    assert repair(store, "repair-test")["ok"]
    assert PublishedIndex(store).manifest["vector_indexes"]["chunk"].endswith(".faiss")
    assert check(store)["ok"]
    assert {e["chunk_id"] for e in query(str(fresh.index), "lamps", mode="naive", top_k=50)["evidence"]} == live_chunks(store)
    edit(fresh.corpus, "festival.md", "lantern", "lamp")  # and the next update goes on from the repaired version
    summary = run([fresh.corpus], fresh.index, config)
    assert summary["new_version"]
    assert {e["chunk_id"] for e in query(str(fresh.index), "lamps", mode="naive", top_k=50)["evidence"]} == live_chunks(store)


class _Files(dict):
    def write_bytes(self, relative, data):
        self[relative] = data

    def read_bytes(self, relative):
        return self[relative]


def test_an_overlay_of_removals_only_reads_back():
    from graphwright.engines.vectors.overlay import Overlay, write_overlay

    files = _Files()
    write_overlay(files, "v/chunk-x" + OVERLAY_SUFFIX, Overlay("v/chunk-b.faiss", ["a", "b"], ["ha", "hb"], [], [], np.zeros((0, 1), np.float32)))
    back = read_overlay(files, "v/chunk-x" + OVERLAY_SUFFIX)
    assert back.base == "v/chunk-b.faiss" and back.removed_ids == ["a", "b"] and back.ids == [] and back.size() == 2


def test_positions_an_in_place_update_removed_are_not_counted_again(tmp_path):
    fresh = index_fresh(tmp_path / "inplace", config=overlay_config(share=0))
    edit(fresh.corpus, "harbor.txt", "until the lamps burned low.", "until the lamps burned out.")
    run([fresh.corpus], fresh.index, overlay_config(share=0))  # in place: the new base skips the replaced positions
    store = fresh.store
    base = PublishedIndex(store).manifest["vector_indexes"]["chunk"]
    assert base.endswith(".faiss") and None in PublishedIndex(store).vector_index("chunk").ids
    before = live_chunks(store)
    edit(fresh.corpus, "festival.md", "lantern", "lamp")
    run([fresh.corpus], fresh.index, overlay_config())
    relative = PublishedIndex(store).manifest["vector_indexes"]["chunk"]
    assert relative.endswith(OVERLAY_SUFFIX) and base_of(store.files, relative) == base
    assert set(read_overlay(store.files, relative).removed_ids) == before - live_chunks(store)  # this edit's, no earlier slot
    assert set(PublishedIndex(store).vector_index("chunk").ids) - {None} == live_chunks(store)


def test_an_empty_base_is_folded_not_a_crash():
    import pyarrow as pa
    import pyarrow.parquet as pq

    from graphwright.engines.vectors.overlay import next_overlay

    files = _Files()
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({"item_id": pa.array([], pa.string()), "text_hash": pa.array([], pa.string())}), sink)
    files["v/community-e.ids.parquet"] = sink.getvalue().to_pybytes()  # a kind that had no items
    assert next_overlay(files, "v/community-e.faiss", pa.array(["c1"]), pa.array(["h1"]), lambda ids, hashes: np.ones((1, 4), np.float32), 0.05) is None
    assert next_overlay(files, "v/community-e.faiss", pa.array([], pa.string()), pa.array([], pa.string()), None, 0.05).ids == []


def test_an_overlays_new_vectors_are_found_by_the_hashes_it_gives_without_the_whole_key_set(layered):
    """recent_vectors takes the new items' text hashes from the overlay, which has them, instead of
    looking each id up among every key of the kind (at 1.2M chunks a hash table of 1.2M ids, 0.5 s
    of each update): the vectors the update wrote since the first version's pin, none scanned."""
    from graphwright.storage.manifest import load_manifest

    fresh, _, _, _, _ = layered
    store = fresh.store
    overlay = read_overlay(store.files, PublishedIndex(store).manifest["vector_indexes"]["chunk"])
    model = store.read("embeddings", columns=["model"]).column("model")[0].as_py()
    since = load_manifest(store, 1)["table_versions"]["embeddings"]
    got = vector_files.recent_vectors(store, "chunk", model, list(overlay.ids), list(overlay.text_hashes), since,
                                      lambda wanted: pytest.fail(f"scanned for {wanted}"))
    assert np.allclose(got, overlay.vectors)
    stale = ["0" * len(overlay.text_hashes[0])] * len(overlay.ids)  # no vector embeds these texts: scanned for
    assert vector_files.recent_vectors(store, "chunk", model, list(overlay.ids), stale, since,
                                       lambda wanted: np.zeros((len(wanted), got.shape[1]), np.float32)).sum() == 0


def test_an_updates_vector_indexes_take_their_keys_from_the_stage_and_are_named_as_from_the_table(tmp_path, monkeypatch):
    """The embed stage hands each kind's keys (the rows it read, less those it deleted, and those
    it appended) to its vector index instead of the index reading them again (1.2M chunk keys:
    1.3 s an update); the files are the ones the table's keys name and build."""
    from graphwright.engines.embed import model_name
    from graphwright.storage.delta import IndexStore

    config = overlay_config()
    fresh = index_fresh(tmp_path / "keys", config=config)
    edit(fresh.corpus, "harbor.txt", "until the lamps burned low.", "until the lamps burned out.")
    reads = []
    read = IndexStore.read

    def counted(self, name, *args, **kwargs):
        if name == "embeddings" and kwargs.get("columns") == ["item_id", "text_hash"]:
            reads.append(kwargs.get("where"))
        return read(self, name, *args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(IndexStore, "read", counted)
        run([fresh.corpus], fresh.index, config)
    assert reads == []
    store = fresh.store
    published = PublishedIndex(store).manifest["vector_indexes"]
    assert published["chunk"].endswith(OVERLAY_SUFFIX)
    model = model_name(config.embed)
    for kind in ("chunk", "entity", "report"):  # from the table's keys: the same file, there already
        assert vector_files.write_vector_index(store, kind, model, config) == (published[kind], {})


def test_keys_are_put_in_item_order_as_arrows_sort_puts_them():
    import pyarrow as pa

    rng = np.random.default_rng(4)
    hexes = [f"{v:024x}" for v in rng.integers(0, 1 << 62, 500)]
    cases = [
        pa.table({"item_id": hexes, "text_hash": [f"h{i}" for i in range(500)]}),  # one length: numpy
        pa.table({"item_id": ["b", "a", "b", "c"], "text_hash": ["2", "9", "1", "0"]}),  # an id twice
        pa.table({"item_id": ["bb", "a", "ccc"], "text_hash": ["1", "2", "3"]}),  # lengths differ
        pa.table({"item_id": pa.array([], pa.string()), "text_hash": pa.array([], pa.string())}),
    ]
    for keys in cases:
        want = keys.sort_by([("item_id", "ascending"), ("text_hash", "ascending")])
        assert vector_files.by_item(keys).to_pylist() == want.to_pylist()

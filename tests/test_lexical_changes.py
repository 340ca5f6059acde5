"""A lexical index brought up to date from the Delta log (stages.embed.lexical with
storage.changes) holds exactly what one built from the whole tables holds."""

import json
import shutil

import pyarrow as pa
import pytest
import tantivy

from graphwright import ids
from graphwright.engines.lexical import open_version, previous_items
from graphwright.stages.embed.lexical import write_kind
from graphwright.storage import contracts
from graphwright.storage.delta import IndexStore
from graphwright.storage.patch import patch_table


@pytest.fixture(autouse=True)
def incremental(monkeypatch):
    """These indexes are small enough that a few deletions pass the share past which an update
    rebuilds the index (lexical.REBUILD_DELETED_SHARE): the tests follow the update path."""
    monkeypatch.setattr("graphwright.stages.embed.lexical.REBUILD_DELETED_SHARE", 1.0)


def entities(rows):
    return pa.Table.from_pylist([{"entity_id": ids.entity_id(k), "canonical_key": k, "name": k.title(), "type": "PERSON",
                                  "types": ["PERSON"], "description": d, "mention_count": 1, "degree": 1,
                                  "chunk_ids": ["c1"], "doc_ids": ["d1"]} for k, d in rows],
                                schema=contracts.schema("entities").arrow)


def aliases(rows):
    return pa.Table.from_pylist([{"alias": a, "entity_id": ids.entity_id(k), "method": "m", "evidence": "e", "mention_count": 1}
                                 for k, a in rows], schema=contracts.schema("entity_aliases").arrow)


def items(store, relative) -> list[dict]:
    return sorted(previous_items(store.files, relative).to_pylist(), key=lambda r: r["item_id"])


def rows(store, relative) -> dict:
    """What the index holds: each item's stored row, and its body found by a search."""
    index = open_version(store.files, relative)
    hits = index.searcher.search(tantivy.Query.all_query(), 100, count=False).hits
    return {index.searcher.doc(a)["item_id"][0]: json.loads(bytes(index.searcher.doc(a)["row"][0])) for _, a in hits}


def test_an_entity_index_updated_from_the_log_equals_one_built_from_the_tables(tmp_path):
    store = IndexStore(tmp_path / "index")
    people = [(f"person {i}", f"Person {i} keeps the ledger.") for i in range(6)]
    store.append("entities", entities(people))
    store.replace_if_changed("entity_aliases", aliases([(k, k) for k, _ in people]))
    first = write_kind(store, "entity", None)
    # person 0 changes its description and gains an alias; person 1 only gains one; person 5 goes
    patch_table(store, "entities", pa.array([ids.entity_id("person 5")]), [entities([("person 0", "Person 0 sold the ledger.")])])
    store.replace_if_changed("entity_aliases", aliases([(k, k) for k, _ in people[:5]] + [("person 0", "P. Zero"), ("person 1", "P. One")]))
    stats: dict = {}
    updated = write_kind(store, "entity", first, stats=stats)
    assert stats == {"read": "changes", "rows": 2}  # person 0 (its row changed) and person 1 (its aliases did)
    shutil.copytree(tmp_path / "index", tmp_path / "fresh")
    shutil.rmtree(tmp_path / "fresh" / "lexical")
    fresh = IndexStore(tmp_path / "fresh")
    built = write_kind(fresh, "entity", None)  # from the tables
    assert updated == built  # named by the items they hold: the same
    assert items(store, updated) == items(fresh, built) and len(items(store, updated)) == 5
    assert rows(store, updated) == rows(fresh, built)
    assert rows(store, updated)[ids.entity_id("person 0")]["description"] == "Person 0 sold the ledger."


def test_a_chunk_index_follows_a_retitled_document_and_a_deleted_chunk(tmp_path):
    def documents(titles):
        return pa.Table.from_pylist([{"doc_id": d, "source_key": f"{d}.txt", "source": "s", "title": t, "text": "x",
                                      "content_hash": "h", "metadata": None, "n_chars": 1, "run_id": "r"} for d, t in titles],
                                    schema=contracts.schema("documents").arrow)

    def chunks(rows):
        return pa.Table.from_pylist([{"chunk_id": c, "doc_id": d, "doc_hash": "h", "chunk_index": 0, "text": text, "n_tokens": 3,
                                      "start_char": 0, "end_char": 1} for c, d, text in rows], schema=contracts.schema("chunks").arrow)

    store = IndexStore(tmp_path / "index")
    store.append("documents", documents([("d1", "Harbor"), ("d2", "Council")]))
    store.append("chunks", chunks([("c1", "d1", "The harbor froze."), ("c2", "d1", "Ships waited."), ("c3", "d2", "The council met.")]))
    first = write_kind(store, "chunk", None)
    patch_table(store, "documents", pa.array([], pa.string()), [documents([("d2", "Assembly")])])  # retitled: c3's body changes
    store.delete_in("chunks", "chunk_id", ["c2"])
    store.append("chunks", chunks([("c4", "d1", "The ice broke.")]))
    stats: dict = {}
    updated = write_kind(store, "chunk", first, stats=stats)
    assert stats["read"] == "changes"
    shutil.copytree(tmp_path / "index", tmp_path / "fresh")
    shutil.rmtree(tmp_path / "fresh" / "lexical")
    fresh = IndexStore(tmp_path / "fresh")
    assert updated == write_kind(fresh, "chunk", None)
    got = rows(store, updated)
    assert got == rows(fresh, updated) and sorted(got) == ["c1", "c3", "c4"] and got["c3"]["title"] == "Assembly"


def test_an_item_list_brought_up_to_date_by_sorted_search_equals_one_by_hash_lookups(monkeypatch):
    """item_lists.updated searches content-hash ids in the sorted list; ids of mixed lengths, or a
    list out of order, take hash lookups and a sort. Both give the same list, changed rows and
    removed ids."""
    import random

    from graphwright.stages.embed import item_lists

    rng = random.Random(3)
    pool = sorted({f"{rng.getrandbits(96):024x}" for _ in range(400)})

    def table(values, salt=""):
        return pa.table({"item_id": pa.array(values, pa.string()),
                         "row_hash": pa.array([v[::-1] + salt for v in values], pa.string())})

    before = table(pool[::2])
    cases = [
        (table(pool[1::2][::-1]), pool[:0]),  # new items only, unsorted
        (pa.concat_tables([table(pool[:40:2], "x"), table(pool[100:120:2]), table(pool[1:30:2])]), pool[200:260:2]),
        (table([]), pool[::4]),  # deletions only
        (table(pool[::2]), []),  # nothing changed
        (table(["a", pool[3]]), pool[:4:2]),  # an id of another length: hash lookups
    ]
    by_hashing, hashed = item_lists._by_hashing, []
    monkeypatch.setattr(item_lists, "_by_hashing", lambda *a: hashed.append(1) or by_hashing(*a))
    for i, (fresh, deleted) in enumerate(cases):
        for kept in (before, before.take(pa.array(list(range(len(pool[::2])))[::-1]))):  # in order, and out of it
            hashed.clear()
            got = item_lists.updated(kept, fresh, pa.array(deleted, pa.string()))
            assert bool(hashed) == (kept is not before or i == len(cases) - 1)  # sorted search where it can
            want = by_hashing(kept, fresh, pa.array(deleted, pa.string()))
            assert got[0].to_pylist() == want[0].to_pylist() == sorted(got[0].to_pylist(), key=lambda r: r["item_id"])
            assert sorted(got[1].to_pylist(), key=str) == sorted(want[1].to_pylist(), key=str)
            assert sorted(got[2].to_pylist()) == sorted(want[2].to_pylist())
    merged = item_lists.merged(table(pool[::3]), table(["zz", "a"]))  # mixed lengths: sorted whole
    assert merged.column("item_id").to_pylist() == sorted(pool[::3] + ["zz", "a"])


def test_an_item_list_is_an_arrow_file_named_from_its_buffers_and_a_parquet_one_is_still_read(tmp_path, monkeypatch):
    """A version's item list is an Arrow IPC file, read without decoding; the version is named
    by a hash of the list's buffers, not of keys joined row by row. A version written with a
    Parquet list (before) is still brought up to date, and retention keeps its list."""
    import pyarrow.parquet as pq

    from graphwright.engines.lexical import files_in_use, ids_path

    store = IndexStore(tmp_path / "index")
    people = [(f"person {i}", f"Person {i} keeps the ledger.") for i in range(6)]
    store.append("entities", entities(people))
    store.replace_if_changed("entity_aliases", aliases([(k, k) for k, _ in people]))
    first = write_kind(store, "entity", None)
    assert ids_path(first).endswith(".ids.arrow") and store.files.exists(ids_path(first))
    assert not store.files.exists(first.removesuffix(".json") + ".ids.parquet")
    # the list as an earlier version wrote it
    legacy = first.removesuffix(".json") + ".ids.parquet"
    sink = pa.BufferOutputStream()
    pq.write_table(store.files.read_table(ids_path(first)), sink)
    store.files.write_bytes(legacy, sink.getvalue().to_pybytes())
    store.files.delete(ids_path(first))
    assert legacy in files_in_use(store.files, [first]) and ids_path(first) not in files_in_use(store.files, [first])
    assert len(items(store, first)) == 6

    def joined(*args, **kwargs):
        raise AssertionError("the item list's keys joined row by row")

    monkeypatch.setattr(ids, "stable_id_of_strings", joined)
    patch_table(store, "entities", pa.array([ids.entity_id("person 5")]), [entities([("person 0", "Person 0 sold the ledger.")])])
    updated = write_kind(store, "entity", first, stats=(stats := {}))
    assert stats == {"read": "changes", "rows": 1}
    shutil.copytree(tmp_path / "index", tmp_path / "fresh")
    shutil.rmtree(tmp_path / "fresh" / "lexical")
    fresh = IndexStore(tmp_path / "fresh")
    built = write_kind(fresh, "entity", None)
    assert updated == built and items(store, updated) == items(fresh, built) and len(items(store, updated)) == 5
    assert rows(store, updated) == rows(fresh, built)

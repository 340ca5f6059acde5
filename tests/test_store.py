from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from graphwright.storage import contracts
from graphwright.storage.contracts import SchemaError
from graphwright.storage.delta import IndexStore, spill, sql_list


def doc_rows(n, start=0, text="text"):
    return [
        {"doc_id": f"d{i:04d}", "source_key": f"k{i}", "source": "src", "title": f"T{i}", "text": f"{text} {i}",
         "content_hash": f"h{i}", "metadata": None, "n_chars": 6, "run_id": "r1"}
        for i in range(start, start + n)
    ]


def docs(n, start=0, text="text"):
    return pa.Table.from_pylist(doc_rows(n, start, text))


@pytest.fixture
def store(tmp_path):
    return IndexStore(tmp_path / "index")


def test_missing_table_reads_empty_with_its_schema(store):
    assert not store.exists("documents")
    assert store.version("documents") is None
    table = store.read("documents")
    assert table.num_rows == 0 and table.schema.equals(contracts.schema("documents").arrow)
    assert store.read("documents", columns=["doc_id"]).column_names == ["doc_id"]
    assert store.count("documents") == 0
    assert store.delete("documents", "true") == 0
    assert store.versions() == {}


def test_ensure_creates_an_empty_table_once(store):
    store.ensure("chunks")
    assert store.exists("chunks") and store.version("chunks") == 0
    store.ensure("chunks")
    assert store.version("chunks") == 0
    assert store.versions() == {"chunks": 0}


def test_upsert_is_idempotent(store):
    store.upsert("documents", docs(5))
    v1 = store.version("documents")
    before = store.read("documents").sort_by("doc_id")
    store.upsert("documents", docs(5))
    assert store.count("documents") == 5
    assert store.read("documents").sort_by("doc_id").equals(before)
    v2 = store.version("documents")
    assert v2 >= v1
    store.upsert("documents", contracts.empty("documents"))  # nothing to merge: no new version
    assert store.version("documents") == v2


def test_upsert_updates_matches_and_inserts_new_rows(store):
    store.upsert("documents", docs(3))
    store.upsert("documents", docs(3, start=2, text="new"))  # d0002 updated, d0003..4 inserted
    rows = {r["doc_id"]: r for r in store.read("documents").to_pylist()}
    assert sorted(rows) == [f"d{i:04d}" for i in range(5)]
    assert rows["d0001"]["text"] == "text 1"
    assert rows["d0002"]["text"] == "new 2"


def test_writes_are_validated_before_anything_is_written(store):
    bad = docs(2).drop_columns(["title"])
    with pytest.raises(SchemaError):
        store.upsert("documents", bad)
    assert not store.exists("documents")
    dupes = pa.Table.from_pylist(doc_rows(2) + doc_rows(1))
    for write in (store.upsert, store.append, store.overwrite):
        with pytest.raises(SchemaError, match="duplicate primary key"):
            write("documents", dupes)
    assert not store.exists("documents")


def test_read_at_an_old_version(store):
    v1 = store.upsert("documents", docs(2))
    v2 = store.upsert("documents", docs(2, start=2))
    store.delete_in("documents", "doc_id", ["d0000"])
    assert v2 > v1
    assert store.count("documents", version=v1) == 2
    assert sorted(store.read("documents", version=v1).column("doc_id").to_pylist()) == ["d0000", "d0001"]
    assert store.count("documents", version=v2) == 4
    assert store.count("documents") == 3


def test_read_with_columns_and_where(store):
    store.upsert("documents", docs(4))
    table = store.read("documents", columns=["doc_id", "n_chars"], where="doc_id IN ('d0001', 'd0003')")
    assert table.column_names == ["doc_id", "n_chars"]
    assert sorted(table.column("doc_id").to_pylist()) == ["d0001", "d0003"]
    assert table.schema.field("n_chars").type == pa.int64()


def test_sql_list_quotes_values(store):
    assert sql_list(["a", "O'Brien"]) == "('a', 'O''Brien')"
    rows = doc_rows(2)
    rows[1]["doc_id"] = "O'Brien"
    store.upsert("documents", pa.Table.from_pylist(rows))
    found = store.read("documents", where=f"doc_id IN {sql_list(['O' + chr(39) + 'Brien'])}")
    assert found.column("doc_id").to_pylist() == ["O'Brien"]


def test_delete_in_batches_large_value_lists(store, monkeypatch):
    import graphwright.storage.delta as store_module

    monkeypatch.setattr(store_module, "DELETE_IN_KEYS", 500)
    store.upsert("documents", docs(1500))
    before = store.version("documents")
    deleted = store.delete_in("documents", "doc_id", [f"d{i:04d}" for i in range(1200)] + ["missing"])
    assert deleted == 1200
    assert store.count("documents") == 300
    assert store.version("documents") == before + 3  # one commit per list of 500


def test_delete_in_with_extra_predicate(store):
    rows = doc_rows(4)
    rows[0]["run_id"] = rows[1]["run_id"] = "r2"
    store.upsert("documents", pa.Table.from_pylist(rows))
    assert store.delete_in("documents", "doc_id", ["d0000", "d0002"], also="run_id = 'r2'") == 1
    assert sorted(store.read("documents").column("doc_id").to_pylist()) == ["d0001", "d0002", "d0003"]


def test_append_and_overwrite(store):
    store.append("documents", docs(2))
    store.append("documents", docs(2, start=2))
    assert store.count("documents") == 4
    store.overwrite("documents", docs(1, start=9))
    assert store.read("documents").column("doc_id").to_pylist() == ["d0009"]


def test_an_append_opens_its_table_once(store, monkeypatch):
    """Every opening replays the log since its checkpoint, and the extract stage appends to five
    tables per commit: an append opened each table three times (ensure, the write, the version)."""
    from deltalake import table as delta_table

    store.append("documents", docs(2))
    opened = []
    real_init = delta_table.DeltaTable.__init__
    monkeypatch.setattr(delta_table.DeltaTable, "__init__", lambda self, *a, **kw: opened.append(a) or real_init(self, *a, **kw))
    version = store.append("documents", docs(2, start=2))
    assert len(opened) == 1
    assert version == store.version("documents") == 2 and store.count("documents") == 4


def _unchanged(result) -> bool:
    """replace_if_changed's 'nothing changed' answer (a (version, changed) pair or a row diff)."""
    if isinstance(result, dict):
        return not (result.get("added") or result.get("removed") or result.get("changed"))
    return result[1] is False


def test_replace_if_changed_does_not_bump_the_version_on_identical_data(store):
    first = store.replace_if_changed("documents", docs(3))
    assert not _unchanged(first)
    version = store.version("documents")
    # the same rows in another order are the same table
    shuffled = docs(3).take([2, 0, 1])
    again = store.replace_if_changed("documents", shuffled)
    assert _unchanged(again)
    assert store.version("documents") == version


def test_replace_if_changed_replaces_on_any_difference(store):
    store.replace_if_changed("documents", docs(3))
    version = store.version("documents")
    result = store.replace_if_changed("documents", docs(3, text="edited"))
    assert not _unchanged(result)
    assert store.version("documents") == version + 1
    assert store.read("documents").sort_by("doc_id").column("text").to_pylist() == ["edited 0", "edited 1", "edited 2"]
    store.replace_if_changed("documents", docs(2))  # a removed row is a change too
    assert store.count("documents") == 2 and store.version("documents") == version + 2


def test_replace_if_changed_creates_an_empty_table(store):
    store.replace_if_changed("communities", contracts.empty("communities"))
    assert store.exists("communities") and store.count("communities") == 0
    version = store.version("communities")
    assert _unchanged(store.replace_if_changed("communities", contracts.empty("communities")))
    assert store.version("communities") == version


def test_rows_in_gives_the_same_rows_by_in_lists_and_by_one_scan(tmp_path, monkeypatch):
    import graphwright.storage.delta as store_module

    store = IndexStore(tmp_path)
    rows = [{"doc_id": f"d{i:03d}", "source_key": f"k{i}", "source": "s", "title": "t", "text": f"text {i}",
             "content_hash": f"h{i}", "metadata": None, "n_chars": 6, "run_id": "r"} for i in range(300)]
    store.upsert("documents", pa.Table.from_pylist(rows))
    wanted = [f"d{i:03d}" for i in range(0, 300, 7)] + ["missing"]
    by_lists = store.rows_in("documents", "doc_id", wanted, ["doc_id", "text"])
    monkeypatch.setattr(store_module, "IN_LIST_KEYS", 3)  # forces the scan
    by_scan = store.rows_in("documents", "doc_id", wanted, ["doc_id", "text"])
    assert by_scan.column_names == ["doc_id", "text"]
    assert sorted(by_scan.to_pylist(), key=str) == sorted(by_lists.to_pylist(), key=str)
    assert by_scan.num_rows == len(wanted) - 1
    # many keys go to the join as they come: Python's sort of a report update's 362k ids took seconds
    monkeypatch.setattr(store_module, "sorted", lambda *a, **k: (_ for _ in ()).throw(AssertionError("sorted")), raising=False)
    by_join = store.rows_in("documents", "doc_id", set(wanted), ["doc_id", "text"])
    assert sorted(by_join.to_pylist(), key=str) == sorted(by_lists.to_pylist(), key=str)


def _row_diff_by_dicts(old, new, key):
    """The definition row_diff is measured against: Python rows matched on the key."""
    def rows(t):
        return dict(zip(zip(*(t.column(k).to_pylist() for k in key)), t.to_pylist()))
    before, after = rows(old), rows(new)
    common = before.keys() & after.keys()
    changed = sum(1 for k in common if before[k] != after[k])
    return {"added": len(after.keys() - before.keys()), "removed": len(before.keys() - after.keys()),
            "changed": changed, "unchanged": len(common) - changed}


def test_row_diff_counts_like_python_rows():
    import random

    from graphwright.storage.diff import row_diff

    rng = random.Random(4)

    def table(ids):
        return pa.table({
            "id": pa.array(ids, pa.string()),
            "n": pa.array([rng.choice([1, 2, None]) for _ in ids], pa.int64()),
            "tags": pa.array([rng.choice([["a"], ["a", "b"], [], None, ["b", None]]) for _ in ids], pa.list_(pa.string())),
        })

    for _ in range(20):
        old = table([f"k{i}" for i in rng.sample(range(40), 25)])
        new = table([f"k{i}" for i in rng.sample(range(40), 25)])
        assert row_diff(old, new, ("id",)) == _row_diff_by_dicts(old, new, ("id",))
        assert row_diff(old, old, ("id",)) == {"added": 0, "removed": 0, "changed": 0, "unchanged": 25}
    two = table(["x", "y"]).append_column("k2", pa.array(["1", "2"]))
    assert row_diff(two, two.slice(1), ("id", "k2")) == {"added": 0, "removed": 1, "changed": 0, "unchanged": 1}


def _relationships(n: int, seed: int, edit: int | None = None) -> pa.Table:
    import random

    rng = random.Random(seed)
    rows = [{"relationship_id": f"r{i:04d}", "source_id": f"e{i}", "target_id": f"e{i + 1}", "source": f"E{i}",
             "target": f"E{i + 1}", "description": rng.choice(["", "knows", "met at the ball"]),
             "weight": rng.choice([1.0, 2.5, 0.1]),
             "chunk_ids": rng.choice([[], ["c1"], ["c1", "c2"], ["c2", "c1"]]), "doc_ids": [f"d{i % 3}"]}
            for i in range(n)]
    if edit is not None:
        rows[edit]["chunk_ids"] = rows[edit]["chunk_ids"] + ["c9"]  # a change inside a list only
    return contracts.schema("relationships").validate(pa.Table.from_pylist(rows))


def _split(table: pa.Table, seed: int) -> list[pa.Table]:
    import random

    cuts = sorted(random.Random(seed).sample(range(1, table.num_rows), 3))
    return [table.slice(a, b - a) for a, b in zip([0, *cuts], [*cuts, table.num_rows])]


def test_replace_parts_if_changed_diffs_as_row_diff_does(tmp_path, monkeypatch):
    import graphwright.storage.diff as diff_module
    from graphwright.storage.diff import row_diff

    monkeypatch.setattr(diff_module, "DIGEST_ROWS", 7)  # several digest slices per part
    monkeypatch.setattr(diff_module, "DIGEST_ITEMS", 5)  # and slices cut by list items
    store = IndexStore(tmp_path)
    steps = [_relationships(40, 1), _relationships(40, 1).take(list(range(39, -1, -1))),  # same rows, reordered
             _relationships(40, 1, edit=7), _relationships(30, 1), _relationships(45, 2)]
    previous, versions = contracts.empty("relationships"), []
    for i, table in enumerate(steps):
        expected = row_diff(previous, table, ("relationship_id",))  # the definition, on whole tables
        assert store.replace_parts_if_changed("relationships", _split(table, i)) == expected
        assert store.read("relationships").sort_by("relationship_id").equals(table.sort_by("relationship_id"))
        previous = table
        versions.append(store.version("relationships"))
    assert row_diff(steps[1], steps[2], ("relationship_id",))["changed"] == 1  # an edit inside one list
    assert versions[1] == versions[0] and versions[0] < versions[2] < versions[3] < versions[4]  # only step 1 wrote nothing


def test_replace_parts_if_changed_with_no_parts_creates_an_empty_table(store):
    assert _unchanged(store.replace_parts_if_changed("relationships", []))
    assert store.exists("relationships") and store.count("relationships") == 0
    version = store.version("relationships")
    assert _unchanged(store.replace_parts_if_changed("relationships", iter(())))
    assert store.version("relationships") == version


def test_replace_parts_if_changed_rejects_a_key_repeated_across_parts(store):
    table = _relationships(10, 3)
    with pytest.raises(SchemaError, match="repeat a primary key"):
        store.replace_parts_if_changed("relationships", [table.slice(0, 6), table.slice(4, 6)])
    assert not store.exists("relationships") or store.count("relationships") == 0


def _spilled(name, parts, folder):
    return [(path, part.num_rows) for path, part in spill(name, parts, str(folder))]


def test_append_files_adds_every_spilled_part_in_one_commit(store, tmp_path):
    store.upsert("documents", docs(2))
    before = store.version("documents")
    files = _spilled("documents", iter([docs(3, start=10), contracts.empty("documents"), docs(4, start=20)]), tmp_path)
    assert store.version("documents") == before  # spilling commits nothing
    assert store.append_files("documents", files) == 7
    assert store.version("documents") == before + 1  # one commit for all the parts
    assert sorted(store.read("documents").column("doc_id").to_pylist()) == [
        "d0000", "d0001", "d0010", "d0011", "d0012", "d0020", "d0021", "d0022", "d0023"]
    assert store.append_files("documents", []) == 0 and store.version("documents") == before + 1


def test_spill_validates_every_part_before_anything_is_committed(store, tmp_path):
    bad = docs(2, start=5).drop_columns(["text"])
    spilled = spill("documents", [docs(3), bad], str(tmp_path))
    path, part = next(spilled)
    assert pq.read_table(path).equals(part) and part.num_rows == 3
    with pytest.raises(SchemaError, match="text"):
        next(spilled)
    assert not store.exists("documents")


def test_read_derived_computes_columns_in_the_query(store):
    derived = {"n": ('cardinality("chunk_ids")', pa.int32()), "described": ('character_length("description") > 0', pa.bool_())}
    assert store.read_derived("entities", ["entity_id"], derived).num_rows == 0  # no table yet
    store.upsert("entities", pa.Table.from_pylist([
        {"entity_id": e, "canonical_key": e, "name": e, "type": "PERSON", "types": ["PERSON"], "description": d,
         "mention_count": len(chunks), "degree": 0, "chunk_ids": chunks, "doc_ids": ["d1"]}
        for e, chunks, d in (("e1", ["c1", "c2", "c3"], "a person"), ("e2", [], ""))]))
    table = store.read_derived("entities", ["entity_id"], derived)
    assert sorted(table.to_pylist(), key=lambda r: r["entity_id"]) == [
        {"entity_id": "e1", "n": 3, "described": True}, {"entity_id": "e2", "n": 0, "described": False}]
    assert table.schema.field("n").type == pa.int32()


def test_distinct_array_holds_each_value_once_across_files(store):
    store.append("documents", docs(3))
    store.append("documents", docs(3, start=2))  # d0002 again, in another file
    values = store.distinct_array("documents", "source")
    assert values.to_pylist() == ["src"] and values.type == pa.string()
    assert sorted(store.distinct_array("documents", "doc_id", where="n_chars = 6").to_pylist()) == [f"d{i:04d}" for i in range(5)]
    assert store.distinct_array("chunks", "chunk_id").to_pylist() == []


def _codecs_and_row_groups(root, name: str) -> tuple[dict[str, set[str]], int]:
    """The codecs of each column of a table's data files and the most rows a row group holds."""
    from graphwright.storage.patch import data_files

    store = IndexStore(root)
    codecs, most = {}, 0
    for path, _ in data_files(store, name):
        meta = pq.ParquetFile(f"{store.path(name)}/{path}").metadata
        for g in range(meta.num_row_groups):
            for c in range(meta.num_columns):
                column = meta.row_group(g).column(c)
                codecs.setdefault(column.path_in_schema, set()).add(column.compression)
            most = max(most, meta.row_group(g).num_rows)
    return codecs, most


def test_every_writer_writes_lz4_and_a_patch_or_spill_in_row_groups_of_bounded_size(tmp_path, monkeypatch):
    """A patch, a spill, and delta-rs's appends, MERGEs and DELETEs write LZ4; a patch and a
    spill write row groups a reader decodes in parallel (a patch wrote one Snappy row group per
    file, which every update read on one core), and leave id columns uncompressed (hex ids that
    LZ4 hardly shrinks, at more than half the cost of a write)."""
    from graphwright.storage import parquet_files
    from graphwright.storage.patch import patch_table

    monkeypatch.setattr(parquet_files, "ROW_GROUP_BYTES", 2000)
    store = IndexStore(tmp_path / "a")
    store.append("documents", docs(200))
    store.upsert("documents", docs(5, text="changed"))
    store.delete("documents", "doc_id = 'd0003'")
    codecs = _codecs_and_row_groups(tmp_path / "a", "documents")[0]
    assert set().union(*codecs.values()) == {"LZ4"}  # pyarrow's name for LZ4_RAW; delta-rs sets no codec per column
    ours = {c: ({"UNCOMPRESSED"} if c in ("doc_id", "run_id") else {"LZ4"}) for c in codecs}
    patch_table(store, "documents", ["d0004"], [docs(1, start=7, text="patched")])
    codecs, most = _codecs_and_row_groups(tmp_path / "a", "documents")
    assert codecs == ours and most < 100  # every file was rewritten by the patch, in small row groups
    other = IndexStore(tmp_path / "b")
    other.replace_parts_if_changed("documents", [docs(200)])
    codecs, most = _codecs_and_row_groups(tmp_path / "b", "documents")
    assert codecs == ours and most < 100


def test_delete_matching_rewrites_only_the_files_holding_a_value_in_one_commit(store):
    """Rows whose column holds one of the values go in one commit, whatever their number; a file
    holding none stays as it was, and the rewritten files' other rows are moved together to one
    file (dataChange false), not reported as changed (a Delta DELETE per 5,000 values scanned
    every file each time)."""
    import json

    from graphwright.storage.changes import changes_since
    from graphwright.storage.patch import data_files, delete_matching

    for start in (0, 100, 200):  # three files
        store.append("documents", docs(100, start))
    before, files = store.version("documents"), {p for p, _ in data_files(store, "documents")}
    gone = [f"d{i:04d}" for i in (3, 150, 151)] + [f"x{i}" for i in range(6000)]  # more than DELETE_IN_KEYS, most absent
    assert delete_matching(store, "documents", "doc_id", gone) == 3
    assert store.version("documents") == before + 1
    after = {p for p, _ in data_files(store, "documents")}
    assert len(files - after) == 2 and len(after - files) == 1  # d0200-d0299's file stayed; the others' rows share one
    left = store.read("documents", columns=["doc_id"]).column("doc_id").to_pylist()
    assert sorted(left) == [f"d{i:04d}" for i in range(300) if i not in (3, 150, 151)]
    log = (store.path("documents") + f"/_delta_log/{before + 1:020d}.json")
    adds = [json.loads(line)["add"] for line in open(log) if '"add"' in line]
    assert adds and not any(a["dataChange"] for a in adds)
    changes = changes_since(store, "documents", before, "doc_id", ["doc_id"])
    assert sorted(changes.deleted.to_pylist()) == ["d0003", "d0150", "d0151"] and changes.rows.num_rows == 0
    assert delete_matching(store, "documents", "doc_id", ["nothing"]) == 0 and store.version("documents") == before + 1


def test_delete_matching_in_a_partitioned_table_reads_and_writes_only_its_partition(tmp_path):
    """The embeddings' stale vectors of one kind and model: files of other kinds are not read,
    and a rewritten file's kept rows stay in their partition with their values."""
    import numpy as np

    from graphwright.storage.patch import _data_files, delete_matching

    store = IndexStore(tmp_path / "index")

    def vectors(kind, ids, model="m1"):
        return pa.table({"kind": [kind] * len(ids), "item_id": ids, "model": [model] * len(ids), "text_hash": ["h"] * len(ids),
                         "vector": pa.array([np.ones(2, np.float32).tolist()] * len(ids), pa.list_(pa.float32()))})

    store.append("embeddings", pa.concat_tables([vectors("chunk", ["a", "b", "c"]), vectors("chunk", ["a"], model="m2"),
                                                 vectors("entity", ["a", "b"])]))
    entity_files = {p for p, _, part in _data_files(store, "embeddings") if part["kind"] == "entity"}
    assert delete_matching(store, "embeddings", "item_id", pa.array(["a", "c"]), where={"kind": "chunk", "model": "m1"}) == 2
    rows = store.read("embeddings", columns=["kind", "item_id", "model"]).sort_by([("kind", "ascending"), ("item_id", "ascending"), ("model", "ascending")])
    assert rows.to_pylist() == [{"kind": "chunk", "item_id": "a", "model": "m2"}, {"kind": "chunk", "item_id": "b", "model": "m1"},
                                {"kind": "entity", "item_id": "a", "model": "m1"}, {"kind": "entity", "item_id": "b", "model": "m1"}]
    assert entity_files <= {p for p, _, _ in _data_files(store, "embeddings")}
    assert all(p.startswith(f"kind={part['kind']}/") for p, _, part in _data_files(store, "embeddings"))


def test_delete_matching_reads_only_the_files_whose_known_values_hold_one(store, monkeypatch):
    """Given each file's distinct values (read once by the caller), only the files holding a
    value to delete are read again; a file the caller did not know is read."""
    from graphwright.storage import patch

    for start in (0, 100, 200):
        store.append("documents", docs(100, start))
    known = patch.distinct_per_file(store, "documents", "doc_id")
    holder = next(p for p, v in known.items() if "d0150" in v.to_pylist())
    unknown = next(p for p in sorted(known) if p != holder)
    del known[unknown]
    read = []
    original = patch.read_data_file
    monkeypatch.setattr(patch, "read_data_file", lambda s, n, path, c: (read.append(path), original(s, n, path, c))[1])
    assert patch.delete_matching(store, "documents", "doc_id", ["d0150"], known=known) == 1
    assert set(read) == {unknown, holder}


def test_rows_in_scans_the_table_at_most_once_whatever_the_number_of_keys(tmp_path, monkeypatch):
    """Each IN-list query reads the columns of the whole table: many keys are joined in one scan,
    not asked a list at a time."""
    store = IndexStore(tmp_path)
    rows = [{"doc_id": f"d{i:04d}", "source_key": f"k{i}", "source": "s", "title": "t", "text": f"text {i}",
             "content_hash": f"h{i}", "metadata": None, "n_chars": 6, "run_id": "r"} for i in range(2500)]
    store.upsert("documents", pa.Table.from_pylist(rows))
    queries = []
    read = IndexStore.read
    monkeypatch.setattr(IndexStore, "read", lambda self, *a, **kw: queries.append(kw.get("where")) or read(self, *a, **kw))
    for n in (10, 400, 1500, 2500):
        queries.clear()
        got = store.rows_in("documents", "doc_id", [f"d{i:04d}" for i in range(n)], ["doc_id"])
        assert got.num_rows == n
        assert len([q for q in queries if q and " IN " in q]) <= 1


def test_vectors_are_written_without_a_dictionary_and_ids_and_chunk_lists_with_one(tmp_path):
    """Float columns get no dictionary, whoever writes the file (delta-rs appends, a delete's
    rewrite, a patch): trying one first made rewriting embeddings files 1.5 times slower. The
    other columns keep theirs (an entity's chunk list is 60% larger without)."""
    import numpy as np

    from graphwright.storage.patch import _data_files, delete_matching, patch_table

    store = IndexStore(tmp_path / "index")

    def encodings(name):
        out = {}
        for path, _, _ in _data_files(store, name):
            meta = pq.ParquetFile(f"{store.path(name)}/{path}").metadata.row_group(0)
            for i in range(meta.num_columns):
                out.setdefault(meta.column(i).path_in_schema, set()).add("RLE_DICTIONARY" in meta.column(i).encodings)
        return out

    ids = [f"i{i}" for i in range(50)]
    store.append("embeddings", pa.table({"kind": ["chunk"] * 50, "item_id": ids, "model": ["m"] * 50, "text_hash": ["h"] * 50,
                                         "vector": pa.array([[0.5, 0.25]] * 50, pa.list_(pa.float32()))}))
    delete_matching(store, "embeddings", "item_id", pa.array(["i3"]), where={"kind": "chunk", "model": "m"})
    assert encodings("embeddings") == {"item_id": {True}, "model": {True}, "text_hash": {True}, "vector.list.element": {False}}
    entities = contracts.empty("entities").to_pylist()
    row = {"entity_id": "e1", "canonical_key": "a", "name": "A", "type": "PERSON", "types": ["PERSON"], "description": "d",
           "mention_count": 1, "degree": 1, "chunk_ids": ["c1", "c2"], "doc_ids": ["d1"]}
    patch_table(store, "entities", [], [pa.Table.from_pylist(entities + [row], schema=contracts.schema("entities").arrow)])
    assert encodings("entities")["chunk_ids.list.element"] == {True}
    store.append("relationships", contracts.schema("relationships").validate(pa.Table.from_pylist([
        {"relationship_id": "r1", "source_id": "e1", "target_id": "e2", "source": "A", "target": "B", "description": "d",
         "weight": np.float64(1.5), "chunk_ids": ["c1"], "doc_ids": ["d1"]}], schema=contracts.schema("relationships").arrow)))
    assert encodings("relationships")["weight"] == {False} and encodings("relationships")["source_id"] == {True}


def test_a_patch_writes_its_new_rows_while_it_rewrites_the_old_files(tmp_path, monkeypatch):
    """The new rows' files and the rewrite of the files that held the keys are Arrow work on two
    threads: a new rows' file is still being written when a rewrite reads its file whole (at 1.2M
    chunks the entities' new rows are 330 MB of chunk lists). Sequentially, the write would wait
    for a rewrite that starts only after it."""
    import threading

    from graphwright.storage import contracts, patch

    schema = contracts.schema("documents").arrow

    def docs(keys, version):
        return pa.Table.from_pylist([{"doc_id": k, "source_key": k, "source": "s", "title": k, "text": f"{k} {version}",
                                      "content_hash": version, "metadata": None, "n_chars": 1, "run_id": "r"} for k in keys], schema=schema)

    store = IndexStore(tmp_path / "index")
    patch.patch_table(store, "documents", pa.array([], pa.string()), [docs(["a", "b", "c"], "1")])
    rewriting, overlapped = threading.Event(), []
    read, write = patch.read_data_file, patch.write_parquet

    def reading(store_, name, path, columns):
        if len(columns) > 1:  # a rewrite reads its file whole
            rewriting.set()
        return read(store_, name, path, columns)

    def writing(table, where):
        if "d" in table.column("doc_id").to_pylist():  # the new rows' file (a rewrite keeps a and c)
            overlapped.append(rewriting.wait(timeout=5))
        return write(table, where)

    monkeypatch.setattr(patch, "read_data_file", reading)
    monkeypatch.setattr(patch, "write_parquet", writing)
    stats = patch.patch_table(store, "documents", pa.array([], pa.string()), [docs(["b", "d"], "2")])
    assert overlapped == [True] and stats["files_rewritten"] == 1
    got = {r["doc_id"]: r["text"] for r in store.read("documents", columns=["doc_id", "text"]).to_pylist()}
    assert got == {"a": "a 1", "b": "b 2", "c": "c 1", "d": "d 2"}


def test_rows_a_patch_or_a_deletion_only_moves_are_not_checked_for_repeated_keys_again(store, monkeypatch):
    """The rows kept from a rewritten file are that file's, whose keys were checked when it was
    written: only new rows have their keys grouped (at 1.2M chunks the kept rows of the files an
    update rewrites are millions). A repeated key among new rows is still refused."""
    from graphwright.storage import contracts
    from graphwright.storage.patch import delete_matching, patch_table

    store.append("documents", docs(100))
    checked = []
    real = contracts.TableSchema._check_unique_key
    monkeypatch.setattr(contracts.TableSchema, "_check_unique_key", lambda self, table: checked.append(table.num_rows) or real(self, table))
    patch_table(store, "documents", ["d0004"], [docs(1, start=7, text="patched")])
    assert delete_matching(store, "documents", "doc_id", ["d0010"]) == 1
    assert checked == [1]  # the patch's one new row; none of the rows either only moved
    assert store.count("documents") == 98
    with pytest.raises(contracts.SchemaError):
        patch_table(store, "documents", [], [pa.concat_tables([docs(1, start=3), docs(1, start=3)])])


def test_a_local_patch_or_deletion_writes_its_files_in_the_table_and_copies_none(store, monkeypatch):
    """A local table's new files are written where the commit names them: nothing is put through
    the object store (that copy was 0.78 s of the entities' patch in a 0.1% update at 1.2M chunks)."""
    import obstore

    from graphwright.storage.patch import data_files, delete_matching, patch_table

    for start in (0, 100):
        store.append("documents", docs(100, start))

    def no_copy(*args, **kwargs):
        raise AssertionError("a local table's file was copied")

    monkeypatch.setattr(obstore, "put", no_copy)
    stats = patch_table(store, "documents", ["d0004"], [docs(2, start=7, text="patched")])
    assert stats["files_rewritten"] == 1 and stats["files_added"] == 2
    assert delete_matching(store, "documents", "doc_id", ["d0150"]) == 1
    rows = {r["doc_id"]: r["text"] for r in store.read("documents", columns=["doc_id", "text"]).to_pylist()}
    assert len(rows) == 198 and rows["d0007"] == "patched 7" and "d0004" not in rows and "d0150" not in rows
    on_disk = {p.name for p in Path(store.path("documents")).glob("*.parquet")}
    assert {path for path, _ in data_files(store, "documents")} <= on_disk


def test_a_patch_that_fails_before_its_commit_leaves_the_table_and_its_folder_as_they_were(store):
    """The files written straight into a local table's folder are removed when the patch fails
    before it commits (a part that does not meet the contract, after one that does)."""
    from graphwright.storage.patch import patch_table

    store.append("documents", docs(100))
    folder, version = Path(store.path("documents")), store.version("documents")
    before = sorted(p.name for p in folder.glob("*.parquet"))

    def parts():
        yield docs(3, start=200)
        yield docs(2, start=300).drop_columns(["text"])

    with pytest.raises(SchemaError):
        patch_table(store, "documents", ["d0001"], parts())
    assert sorted(p.name for p in folder.glob("*.parquet")) == before and store.version("documents") == version
    assert store.read("documents").num_rows == 100


def test_the_first_patch_of_a_table_creates_it_through_a_temporary_folder(tmp_path):
    from graphwright.storage.patch import patch_table

    store = IndexStore(tmp_path / "index")
    patch_table(store, "documents", [], [docs(3)])
    assert sorted(store.read("documents", columns=["doc_id"]).column("doc_id").to_pylist()) == ["d0000", "d0001", "d0002"]


def test_a_refused_commit_or_a_failed_deletion_leaves_no_file_in_the_table(tmp_path, monkeypatch):
    """A commit refused (a conflicting writer) lists none of the files written for it: they are
    removed; so are a deletion's, in a partitioned table's folders, when it fails before its
    commit."""
    import numpy as np
    from deltalake import DeltaTable
    from deltalake.exceptions import CommitFailedError

    from graphwright.storage import patch

    store = IndexStore(tmp_path / "index")
    store.append("documents", docs(100))

    def on_disk(name):
        return sorted(str(p.relative_to(store.path(name))) for p in Path(store.path(name)).rglob("*.parquet"))

    before, version = on_disk("documents"), store.version("documents")

    def refused(self, *args, **kwargs):
        raise CommitFailedError("a concurrent writer committed first")

    with monkeypatch.context() as m:
        m.setattr(DeltaTable, "create_write_transaction", refused)
        with pytest.raises(CommitFailedError):
            patch.patch_table(store, "documents", ["d0001"], [docs(2, start=300)])
    assert on_disk("documents") == before and store.version("documents") == version

    vectors = pa.table({"kind": ["chunk"] * 3 + ["entity"], "item_id": ["a", "b", "c", "a"], "model": ["m"] * 4,
                        "text_hash": ["h"] * 4, "vector": pa.array([np.ones(2, np.float32).tolist()] * 4, pa.list_(pa.float32()))})
    store.append("embeddings", vectors)
    before = on_disk("embeddings")

    def fails(*args, **kwargs):
        raise RuntimeError("killed before the commit")

    with monkeypatch.context() as m:
        m.setattr(patch, "commit_files", fails)
        with pytest.raises(RuntimeError):
            patch.delete_matching(store, "embeddings", "item_id", ["a"], where={"kind": "chunk", "model": "m"})
    assert on_disk("embeddings") == before
    assert patch.delete_matching(store, "embeddings", "item_id", ["a"], where={"kind": "chunk", "model": "m"}) == 1


def test_the_rows_a_patch_or_a_deletion_keeps_from_a_file_are_written_without_copying_them(store, monkeypatch):
    """A file a patch or a deletion rewrites keeps most of its rows: they are written as slices of
    the rows read (no copy of their lists: filtering copied 0.3-1.1 s of every relationships file
    an update at 1.2M chunks rewrites), in their order, and the table holds what it should."""
    from graphwright.storage import patch
    from graphwright.storage.patch import delete_matching, patch_table, without_rows

    store.append("relationships", _relationships(60, seed=1))
    read, written = [], []
    real_read, real_write = patch.read_data_file, patch.write_parquet
    monkeypatch.setattr(patch, "read_data_file", lambda *a: read.append(real_read(*a)) or read[-1])
    monkeypatch.setattr(patch, "write_parquet", lambda table, where: written.append(table) or real_write(table, where))

    def in_buffers_read(table: pa.Table) -> bool:  # every value buffer of the kept lists starts in one read
        spans = [(b.address, b.address + b.size) for t in read if "chunk_ids" in t.column_names for c in t.column("chunk_ids").chunks
                 for b in c.flatten().buffers() if b is not None]
        values = [b for c in table.column("chunk_ids").chunks for b in c.flatten().buffers()[1:] if b is not None and b.size]
        return bool(values) and all(any(lo <= b.address < hi for lo, hi in spans) for b in values)

    patch_table(store, "relationships", ["r0003", "r0040"], [_relationships(60, seed=1, edit=7).slice(7, 1)])
    kept = [t for t in written if t.num_rows == 57]
    assert len(kept) == 1 and in_buffers_read(kept[0])
    read.clear(), written.clear()
    assert delete_matching(store, "relationships", "relationship_id", ["r0010", "r0011"]) == 2
    assert len(written) == 1 and written[0].num_rows == 55 and in_buffers_read(written[0])
    rows = store.read("relationships").sort_by("relationship_id")
    expected = _relationships(60, seed=1, edit=7)
    expected = expected.filter(pa.array([r not in ("r0003", "r0040", "r0010", "r0011") for r in expected.column("relationship_id").to_pylist()]))
    assert rows.select(expected.column_names).cast(expected.schema).equals(expected)

    marks = [bool(i % 2) for i in range(9)]
    table = pa.table({"x": pa.chunked_array([list(range(4)), list(range(4, 9))])})
    assert without_rows(table, pa.array(marks)).column("x").num_chunks == 5  # five runs, sliced
    assert without_rows(table, pa.array([None, True] + marks[2:])).column("x").to_pylist() == [0, 2, 4, 6, 8]  # null: kept
    assert without_rows(table, pa.array([False] * 9)).equals(table) and without_rows(table, pa.array([True] * 9)).num_rows == 0
    few = without_rows(table, pa.array([i != 5 for i in range(9)]))  # most rows go: a copy of the few kept, not a slice
    assert few.column("x").to_pylist() == [5] and all(c.offset == 0 for c in few.column("x").chunks)
    with pytest.raises(ValueError):
        without_rows(table, pa.array(marks[:8]))
    monkeypatch.setattr(patch, "KEPT_RUNS_SLICED", 4)  # past it, filtered: one chunk per chunk read
    for got in (without_rows(table, pa.array(marks)), without_rows(table, pa.chunked_array([marks[:4], marks[4:]]))):
        assert got.column("x").to_pylist() == [0, 2, 4, 6, 8] and got.column("x").num_chunks <= 2


def test_a_deletion_writes_the_slices_of_many_files_as_one_copy_past_the_limit(store, monkeypatch):
    """The Parquet writer pays for every slice it is given: the kept rows of several rewritten
    files written to one file are combined once when their slices pass KEPT_RUNS_SLICED."""
    from graphwright.storage import patch
    from graphwright.storage.patch import delete_matching

    for seed in (1, 2):
        store.append("relationships", _relationships(20, seed=seed).set_column(
            0, "relationship_id", pa.array([f"s{seed}-{i:02d}" for i in range(20)])))
    written = []
    real_write = patch.write_parquet
    monkeypatch.setattr(patch, "write_parquet", lambda table, where: written.append(table) or real_write(table, where))
    monkeypatch.setattr(patch, "KEPT_RUNS_SLICED", 3)
    assert delete_matching(store, "relationships", "relationship_id", ["s1-05", "s2-05"]) == 2  # two runs in each file
    assert len(written) == 1 and written[0].num_rows == 38
    assert {c.num_chunks for c in written[0].columns} == {1}
    assert store.count("relationships") == 38


def test_a_data_file_that_is_gone_or_broken_is_named_with_its_table_and_the_way_out(store):
    """A patch, a deletion or a cache lookup reads data files one by one, past DataFusion: a file
    the log lists that is gone, or holds no Parquet, is reported as the table's, with the file and
    `graphwright check` named; a missing one is also a FileNotFoundError (the LLM cache's key
    index falls back to a join on it)."""
    from graphwright.storage.health import DataFileMissing, StorageError
    from graphwright.storage.patch import data_files, read_data_file

    store.append("documents", docs(3))
    (path, _), = data_files(store, "documents")
    file = Path(store.path("documents")) / path
    file.write_bytes(b"not parquet")
    with pytest.raises(StorageError, match=rf"table documents of .* cannot be read: its data file {path} is unreadable.*graphwright check") as broken:
        read_data_file(store, "documents", path, ["doc_id"])
    assert broken.value.table == "documents" and not isinstance(broken.value, FileNotFoundError)
    file.unlink()
    with pytest.raises(DataFileMissing, match=rf"its data file {path} is missing") as gone:
        read_data_file(store, "documents", path, ["doc_id"])
    assert isinstance(gone.value, FileNotFoundError) and gone.value.table == "documents"

"""storage.changes: the rows a Delta table's log says changed since a version, against a diff
of the table's contents at both versions, through every kind of write the index makes."""

import os

import pyarrow as pa
import pytest

from graphwright.storage import contracts
from graphwright.storage.changes import changes_since
from graphwright.storage.delta import IndexStore
from graphwright.storage.patch import patch_table

COLUMNS = ["doc_id", "title", "text"]


def docs(keys, version="a"):
    rows = [{"doc_id": k, "source_key": k, "source": "s", "title": f"title {k}", "text": f"text {k} {version}",
             "content_hash": version, "metadata": None, "n_chars": 1, "run_id": "r"} for k in keys]
    return pa.Table.from_pylist(rows, schema=contracts.schema("documents").arrow)


def contents(store, version=None) -> dict:
    t = store.read("documents", version=version, columns=COLUMNS)
    return {r["doc_id"]: (r["title"], r["text"]) for r in t.to_pylist()}


def diff(store, since):
    """The truth the log must give: keys whose row differs, and keys gone."""
    before, now = contents(store, since), contents(store)
    return {k for k in now if before.get(k) != now[k]}, set(before) - set(now)


def check(store, since, expect_files_read=None):
    ch = changes_since(store, "documents", since, "doc_id", COLUMNS)
    assert ch is not None
    changed, gone = diff(store, since)
    rows = {r["doc_id"]: (r["title"], r["text"]) for r in ch.rows.to_pylist()}
    now = contents(store)
    assert set(rows) >= changed  # every changed row is there, with its current content
    assert all(rows[k] == now[k] for k in rows)
    assert set(ch.deleted.to_pylist()) & set(now) == set()
    assert set(ch.deleted.to_pylist()) >= gone
    if expect_files_read is not None:
        assert ch.files_read == expect_files_read
    return ch


@pytest.fixture
def store(tmp_path):
    s = IndexStore(tmp_path / "index")
    # two files of 50 rows, so that a patch keeps rows of a file it rewrites
    s.append("documents", docs([f"d{i:03d}" for i in range(50)]))
    s.append("documents", docs([f"d{i:03d}" for i in range(50, 100)]))
    return s


def test_a_patch_is_read_as_its_new_rows_and_the_keys_of_the_files_it_kept(store):
    since = store.version("documents")
    patch_table(store, "documents", pa.array(["d003", "d077"]), [docs(["d010", "d060", "new1"], "b")])
    ch = check(store, since, expect_files_read=1)  # the new rows' file: the kept rows are moved, not changed
    assert sorted(ch.rows.column("doc_id").to_pylist()) == ["d010", "d060", "new1"]
    assert sorted(ch.deleted.to_pylist()) == ["d003", "d077"]


def test_commits_are_followed_one_by_one(store):
    since = store.version("documents")
    patch_table(store, "documents", pa.array([], pa.string()), [docs(["d010"], "b")])
    # the next patch moves d010's changed row into a kept file: its change must not be lost
    patch_table(store, "documents", pa.array(["d011"]), [docs(["d012"], "c")])
    patch_table(store, "documents", pa.array([], pa.string()), [docs(["new9"], "c")])
    patch_table(store, "documents", pa.array(["new9"]), [])  # added and deleted in between: no row
    store.append("documents", docs(["z1"], "d"))
    store.delete("documents", "doc_id = 'd020'")  # delta-rs rewrites the file with its other rows
    ch = check(store, since)
    assert {"d010", "d012", "z1"} <= set(ch.rows.column("doc_id").to_pylist())
    assert {"d011", "d020"} <= set(ch.deleted.to_pylist())
    assert "new9" not in ch.rows.column("doc_id").to_pylist()


def test_an_overwrite_and_a_compaction(store):
    since = store.version("documents")
    store.replace_if_changed("documents", docs([f"d{i:03d}" for i in range(0, 100, 2)], "e"))
    mid = store.version("documents")
    check(store, since)
    store.ensure("documents").optimize.compact()
    ch = check(store, mid, expect_files_read=0)  # a compaction changes no row
    assert ch.rows.num_rows == 0 and len(ch.deleted) == 0


def test_nothing_since_and_what_the_log_cannot_say(store, monkeypatch):
    import graphwright.storage.file_commits as file_commits

    monkeypatch.setattr(file_commits, "DELETED_KEYS_NAMED", -1)  # patches that name no deleted key: their files' keys are read
    now = store.version("documents")
    ch = changes_since(store, "documents", now, "doc_id", COLUMNS)
    assert ch.rows.num_rows == 0 and len(ch.deleted) == 0 and ch.commits == 0
    assert changes_since(store, "documents", None, "doc_id", COLUMNS) is None
    assert changes_since(store, "documents", now + 1, "doc_id", COLUMNS) is None
    patch_table(store, "documents", pa.array(["d001"]), [docs(["d002"], "f")])
    # the file the patch removed is vacuumed: its keys cannot be read
    store.ensure("documents").vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    assert changes_since(store, "documents", now, "doc_id", COLUMNS) is None
    # log retention cleaned the commits up to a checkpoint: what they did cannot be read
    fresh = store.version("documents")
    patch_table(store, "documents", pa.array(["d005"]), [])
    store.ensure("documents").create_checkpoint()
    os.remove(store.path("documents") + f"/_delta_log/{fresh + 1:020d}.json")
    assert store.read("documents", columns=["doc_id"]).num_rows == 98  # the table itself still reads
    assert changes_since(store, "documents", fresh, "doc_id", COLUMNS) is None


def test_the_keys_of_files_are_gathered_as_arrow_chunks_not_as_python_values(store, monkeypatch):
    """pa.chunked_array converts a ChunkedArray it is given value by value through Python (1.1 s
    for a relationships table's 2.26M keys, four times an update): the keys read from each file
    reach it as its chunks."""
    import graphwright.storage.changes as changes
    import graphwright.storage.file_commits as file_commits

    monkeypatch.setattr(file_commits, "DELETED_KEYS_NAMED", -1)
    given = []
    real = pa.chunked_array

    def spy(arrays, *args, **kwargs):
        given.extend(type(a).__name__ for a in arrays)
        return real(arrays, *args, **kwargs)

    since = store.version("documents")
    patch_table(store, "documents", pa.array(["d003", "d077"]), [docs(["d010", "d060", "new1"], "b")])
    monkeypatch.setattr(changes.pa, "chunked_array", spy)
    check(store, since, expect_files_read=1)
    assert given and "ChunkedArray" not in given


def test_a_patch_names_the_keys_it_deleted_and_a_reader_reads_no_key_of_the_files_it_moved(store, monkeypatch):
    """A patch rewrites every file holding a touched key (at 1.2M chunks, all of a relationships
    table's files for a 0.1% update); its commit names the keys it left without a row, so that
    the reader of the changes reads only the new rows, not the key columns of the files it
    removed and moved. A key removed and written again in one patch is changed, not deleted.
    Past DELETED_KEYS_NAMED keys a commit names none and the keys are read, with the same answer."""
    import graphwright.storage.file_commits as file_commits

    since = store.version("documents")
    patch_table(store, "documents", pa.array(["d003", "d077", "d010", "absent"]), [docs(["d010", "d060", "new1"], "b")])
    patch_table(store, "documents", pa.array(["d004"]), [])
    ch = check(store, since, expect_files_read=1)
    assert ch.keys_read == 0
    assert sorted(ch.deleted.to_pylist()) == ["d003", "d004", "d077"]
    assert sorted(ch.rows.column("doc_id").to_pylist()) == ["d010", "d060", "new1"]
    # the files the first patch removed are gone: the named keys are all the reader needs
    store.ensure("documents").vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    assert sorted(changes_since(store, "documents", since, "doc_id", COLUMNS).deleted.to_pylist()) == ["d003", "d004", "d077"]

    monkeypatch.setattr(file_commits, "DELETED_KEYS_NAMED", 1)
    mid = store.version("documents")
    patch_table(store, "documents", pa.array(["d020", "d021"]), [])
    ch = check(store, mid)
    assert ch.keys_read > 0 and sorted(ch.deleted.to_pylist()) == ["d020", "d021"]


def test_a_patch_rewrites_two_files_at_a_time(store, monkeypatch):
    """The files holding a touched key are read, filtered and written two at a time (Arrow's
    work, off the GIL): both files' reads meet at a barrier, which one thread alone never
    passes. The table holds what a patch one file at a time leaves."""
    import threading

    import graphwright.storage.patch as patch

    meet = threading.Barrier(2, timeout=10)
    real = patch.read_data_file

    def read(store_, name, path, columns):
        if len(columns) > 1:  # the whole rows of a file being rewritten
            meet.wait()
        return real(store_, name, path, columns)

    monkeypatch.setattr(patch, "read_data_file", read)
    stats = patch_table(store, "documents", pa.array(["d003", "d077"]), [docs(["new1"], "b")])
    assert stats["files_rewritten"] == 2 and stats["rows_removed"] == 2
    assert sorted(contents(store)) == sorted([f"d{i:03d}" for i in range(100) if i not in (3, 77)] + ["new1"])

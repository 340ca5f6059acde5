"""Readers open a Delta table once per version and thread (storage.snapshots), see every commit
made since, and keep the version they were given while others write."""

import threading

import pyarrow as pa
import pytest

import graphwright.storage.delta as delta
from graphwright.storage.delta import IndexStore


def docs(ids, text="text"):
    return pa.Table.from_pylist([
        {"doc_id": i, "source_key": f"k-{i}", "source": "src", "title": i, "text": f"{text} {i}", "content_hash": f"h-{i}-{text}",
         "metadata": None, "n_chars": 6, "run_id": "r1"} for i in ids])


@pytest.fixture
def opens(monkeypatch):
    """The DeltaTable openings of graphwright.storage.delta, as (table folder, version asked)."""
    seen = []
    class Counting(delta.DeltaTable):
        def __init__(self, table_uri, *args, **kwargs):
            seen.append((str(table_uri).rsplit("/", 1)[-1], kwargs.get("version")))
            super().__init__(table_uri, *args, **kwargs)

    monkeypatch.setattr(delta, "DeltaTable", Counting)
    return seen


def test_reads_of_an_unchanged_table_open_it_once(tmp_path, opens):
    store = IndexStore(tmp_path / "index")
    store.append("documents", docs(["a", "b"]))
    opens.clear()
    for _ in range(5):
        assert store.read("documents", columns=["doc_id"]).num_rows == 2
        assert store.version("documents") == 1
        assert store.count("documents") == 2
    assert opens == [("documents", None)]
    for _ in range(3):  # a version asked for by number: opened once too
        assert store.read("documents", version=0).num_rows == 0
    assert opens == [("documents", None), ("documents", 0)]


def test_a_reader_sees_what_another_writer_committed_and_keeps_what_it_holds(tmp_path, opens):
    reader, writer = IndexStore(tmp_path / "index"), IndexStore(tmp_path / "index")
    writer.append("documents", docs(["a"]))
    held = reader._table("documents")
    assert reader.count("documents") == 1
    writer.append("documents", docs(["b", "c"]))  # another process, as far as the reader knows
    assert reader.version("documents") == 2 and reader.count("documents") == 3
    reader.append("documents", docs(["d"]))  # through the reader's own store: its snapshots stay as they were
    assert held.version() == 1
    assert reader.count("documents") == 4 and reader.version("documents") == 3
    assert reader.delete("documents", "doc_id = 'a'") == 1 and reader.count("documents") == 3


def test_each_thread_opens_its_own_snapshot(tmp_path, opens):
    store = IndexStore(tmp_path / "index")
    store.append("documents", docs(["a"]))
    mine = store._table("documents")
    theirs = []
    worker = threading.Thread(target=lambda: theirs.append(store._table("documents")))
    worker.start()
    worker.join()
    assert theirs[0] is not mine and theirs[0].version() == mine.version() == 1
    assert store._table("documents") is mine


def test_a_table_removed_and_made_again_is_read_as_it_is_now(tmp_path):
    import shutil

    store = IndexStore(tmp_path / "index")
    store.append("documents", docs(["a", "b"]))
    store.append("documents", docs(["c"]))
    assert store.count("documents") == 3
    shutil.rmtree(store.path("documents"))
    assert store.version("documents") is None and store.read("documents").num_rows == 0
    store.append("documents", docs(["x"]))
    assert store.version("documents") == 1 and store.read("documents", columns=["doc_id"]).column("doc_id").to_pylist() == ["x"]


def test_bytes_added_are_read_from_the_log_not_from_a_snapshot_per_version(tmp_path, opens):
    """A stage's bytes written (stage_metrics) sum the sizes of the files each commit added, a file
    a later commit rewrote included: read from the commits' add actions, the same sum as
    comparing every version's files, with no table opened per version."""
    import os

    store = IndexStore(tmp_path / "index")
    store.append("documents", docs(["a", "b"]))
    store.append("documents", docs(["c"]))
    assert store.delete("documents", "doc_id = 'a'") == 1  # rewrites the first file
    folder = tmp_path / "index" / "tables" / "documents"
    every = sum(os.path.getsize(p) for p in folder.glob("*.parquet"))  # nothing vacuumed: each file once
    opens.clear()
    assert store.bytes_added("documents", None) == every
    first = store.bytes_added("documents", 1)
    assert 0 < first < every
    assert [version for _, version in opens if version is not None] == []

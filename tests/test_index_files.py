"""IndexFiles: a file the caller gives up is renamed into a local index, not copied; tables and
arrays are streamed into a local index and read from it without being made bytes first."""

import errno
import os

import numpy as np
import pyarrow as pa
import pytest

from graphwright.storage import location
from graphwright.storage.location import IndexFiles


def _made(tmp_path, size: int = 1 << 20):
    source = tmp_path / "staging" / "index"
    source.parent.mkdir()
    source.write_bytes(os.urandom(size))
    return source, source.read_bytes(), source.stat().st_ino


def test_a_moved_file_is_renamed_into_a_local_index(tmp_path):
    files = IndexFiles(tmp_path / "root")
    source, data, inode = _made(tmp_path)
    files.write_file("vectors/chunk-abc.faiss", source, move=True)
    target = tmp_path / "root" / "vectors" / "chunk-abc.faiss"
    assert target.read_bytes() == data and target.stat().st_ino == inode  # the same file: no copy made
    assert not source.exists()


@pytest.mark.parametrize("move", [False, True])
def test_a_copy_where_a_rename_cannot_go(tmp_path, monkeypatch, move):
    """Without `move`, or across filesystems (EXDEV), the file is copied and the source stays."""
    def cross_device(a, b):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(location.os, "replace", cross_device)
    files = IndexFiles(tmp_path / "root")
    source, data, _ = _made(tmp_path)
    files.write_file("graph/passage-1/indptr.npy", source, move=move)
    assert (tmp_path / "root" / "graph" / "passage-1" / "indptr.npy").read_bytes() == data and source.exists()


def test_a_local_index_reads_its_files_without_the_object_store_client(tmp_path, monkeypatch):
    """A local file is read in one copy, not through obstore (which copied it twice: resolve reads
    0.7 GB of state each run at 1.2M chunks); what obstore wrote reads back the same, and an
    absent file is FileNotFoundError."""
    import obstore

    files = IndexFiles(tmp_path / "root")
    names = ["state/resolve/state.json", "state/a b/seg ment-1.npz", "graph/passage-x/meta.json"]
    for i, name in enumerate(names):
        files.write_bytes(name, bytes([i]) * 1000)

    def refused(*args, **kwargs):
        raise AssertionError("read through obstore")

    monkeypatch.setattr(obstore, "get", refused)
    assert [files.read_bytes(n) for n in names] == [bytes([i]) * 1000 for i in range(len(names))]
    with pytest.raises(FileNotFoundError):
        files.read_bytes("state/none.json")


def test_arrays_written_as_arrow_are_read_memory_mapped_and_npz_files_still_read(tmp_path):
    """Resolve's segments (0.7 GB a run at 1.2M chunks) are Arrow IPC files, read from a local
    index without a copy; the .npz segments of earlier runs are read as before."""
    import numpy as np
    import pyarrow as pa

    files = IndexFiles(tmp_path)
    arrays = {"name": np.arange(5, dtype=np.int32), "description": np.array([1, -2, 3, 4, 2**40], np.int64)}
    files.write_arrays("state/seg.arrow", **arrays)
    files.write_arrays("state/seg.npz", **arrays)
    assert pa.ipc.open_file(pa.BufferReader((tmp_path / "state/seg.arrow").read_bytes())).read_all().num_rows == 5
    for relative in ("state/seg.arrow", "state/seg.npz"):
        got = files.read_arrays(relative)
        assert set(got) == set(arrays)
        for k, v in arrays.items():
            assert got[k].dtype == v.dtype and got[k].tolist() == v.tolist()
    mapped = files.read_arrays("state/seg.arrow")["description"]
    assert not mapped.flags.owndata and not mapped.flags.writeable  # a view of the mapped file
    empty = {"name": np.zeros(0, np.int32)}
    files.write_arrays("state/empty.arrow", **empty)
    assert files.read_arrays("state/empty.arrow")["name"].dtype == np.int32


def test_a_local_index_streams_tables_and_arrays_into_place_and_maps_them_back(tmp_path, monkeypatch):
    """No bytes object of a whole table or array file is made (a put of one, or a read of one),
    the file appears whole under its name, and a write that fails leaves neither it nor a
    temporary file behind."""
    def no_bytes(*args, **kwargs):
        raise AssertionError("made as bytes")

    files = IndexFiles(tmp_path / "root")
    monkeypatch.setattr(IndexFiles, "write_bytes", no_bytes)
    monkeypatch.setattr(IndexFiles, "read_bytes", no_bytes)
    table = pa.table({"id": pa.array(["a", "b"]), "n": pa.array([1, 2])}).replace_schema_metadata({"k": "v"})
    files.write_table("state/x/t.arrow", table)
    files.write_arrays("state/x/a.npz", codes=np.arange(5), weights=np.ones(3, np.float32))
    files.write_arrays("state/x/b.arrow", codes=np.arange(4))
    assert files.read_table("state/x/t.arrow").equals(table) and files.read_table("state/x/t.arrow").schema.metadata == {b"k": b"v"}
    arrays = files.read_arrays("state/x/a.npz")
    assert arrays["codes"].tolist() == [0, 1, 2, 3, 4] and arrays["weights"].tolist() == [1.0] * 3
    assert files.read_arrays("state/x/b.arrow")["codes"].tolist() == [0, 1, 2, 3]
    held = files.read_table("state/x/t.arrow")
    files.write_table("state/x/t.arrow", table.slice(1))  # replaced whole
    assert files.read_table("state/x/t.arrow").column("id").to_pylist() == ["b"]
    assert held.equals(table)  # a table read before stays whole: the file was renamed over, not rewritten

    class Broken:
        schema = table.schema

    with pytest.raises(Exception):
        files.write_table("state/x/u.arrow", Broken())
    assert sorted(p.name for p in (tmp_path / "root" / "state" / "x").iterdir()) == ["a.npz", "b.arrow", "t.arrow"]


def test_the_temporary_files_of_a_killed_write_are_swept_with_the_other_leftovers(tmp_path):
    """A process killed between writing a state file's temporary file and renaming it leaves the
    temporary file; the sweep the next run makes under the run lock (clear_leftovers) removes it,
    outside the Delta tables, and nothing else."""
    from graphwright.pipeline.staging import clear_leftovers

    files = IndexFiles(tmp_path / "root")
    files.write_table("state/resolve/kept.arrow", pa.table({"n": [1]}))
    files.write_bytes("tables/chunks/part-0.parquet", b"data")
    for left in ("state/resolve/.kept.arrow.11-22-3.tmp", "lexical/.chunk-ab.ids.arrow.11-22-4.tmp"):
        files.write_bytes(left, b"partial")
    assert files.partial_writes() == ["lexical/.chunk-ab.ids.arrow.11-22-4.tmp", "state/resolve/.kept.arrow.11-22-3.tmp"]
    assert clear_leftovers(files, dry_run=True) == 2 and len(files.partial_writes()) == 2
    assert clear_leftovers(files) == 2 and files.partial_writes() == []
    assert files.list("state") == ["state/resolve/kept.arrow"] and files.list("tables") == ["tables/chunks/part-0.parquet"]
    assert IndexFiles("s3://bucket/index").partial_writes() == []

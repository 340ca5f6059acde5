"""IndexFiles.write_file: a file the caller gives up is renamed into a local index, not copied."""

import errno
import os

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

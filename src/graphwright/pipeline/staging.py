"""A stage's input, staged in the index for Ray's workers to read.

The driver writes each input block of a Ray stage as an Arrow IPC file under
INDEX/staging/<run id>/<stage>-<n>/, and Ray tasks read them, so the driver never puts a stage's
input into Ray's object store itself. Object-store pages a process has written stay in its
resident set (RssShmem) after the objects are freed: at 1.2M chunks, 1.6 GB of the driver's
7.6 GB peak were the extraction texts it had put there, still counted in resolve. Workers reach
the index already (every node reads and writes it; the call ledger is written from them too).
"""

from __future__ import annotations

import functools
import itertools
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa

from graphwright.storage.location import IndexFiles, is_uri, storage_options

ROOT = "staging/"
PART_COLUMN = "part"
_WRITE_OPTIONS = pa.ipc.IpcWriteOptions(compression="lz4")


def to_ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=_WRITE_OPTIONS) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def from_ipc(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


def index_files(root: str) -> IndexFiles:
    """A worker's handle on the index (one per actor: an object store's client keeps its connections)."""
    return IndexFiles(root, storage_options() or None)


def read_parts(batch: pa.Table, files: IndexFiles) -> pa.Table:
    """The staged blocks `batch` names, as one table."""
    return pa.concat_tables([from_ipc(files.read_bytes(p)) for p in batch.column(PART_COLUMN).to_pylist()])


@functools.lru_cache(maxsize=4)
def _worker_files(root: str) -> IndexFiles:
    return index_files(root)


def read_staged(batch: pa.Table, root: str) -> pa.Table:
    """A Ray Data batch function: the staged blocks `batch` names (for a dataset that starts from
    staged files, such as the input of a Ray Data LLM processor)."""
    return read_parts(batch, _worker_files(root))


class Staging:
    """The staging area of one run. Only the run that holds the index's run lock makes one."""

    def __init__(self, root: str, run_id: str):
        self.root = str(root)
        self.files = index_files(self.root)
        self.prefix = f"{ROOT}{run_id}/"
        self._stages = itertools.count()

    def clear_all(self) -> int:
        """Remove what runs killed before their stages ended left staged; the number of files."""
        return clear_leftovers(self.files)

    def write(self, name: str, blocks: list[pa.Table]) -> tuple[str, list[str]]:
        """Stage `blocks` (one file each, in order); (their folder, the files' paths)."""
        folder = f"{self.prefix}{name}-{next(self._stages)}/"
        parts = [f"{folder}{i:06d}.arrow" for i in range(len(blocks))]
        with ThreadPoolExecutor(max_workers=4) as pool:  # puts to an object store overlap
            list(pool.map(lambda part, block: self.files.write_bytes(part, to_ipc(block)), parts, blocks))
        return folder, parts

    def remove(self, folder: str) -> int:
        return self._remove(folder)

    def _remove(self, prefix: str) -> int:
        return _remove(self.files, prefix)


def clear_leftovers(files: IndexFiles, *, dry_run: bool = False) -> int:
    """Remove every staged file and every partly written state file (killed runs' leftovers:
    only call it holding the run lock); the number of files."""
    partial = files.partial_writes()
    if dry_run:
        return len(files.list(ROOT)) + len(partial)
    for relative in partial:
        files.delete(relative)
    return _remove(files, ROOT) + len(partial)


def _remove(files: IndexFiles, prefix: str) -> int:
    if not is_uri(str(files.location)):  # one tree removal, not a delete per file
        path = Path(files.location) / prefix
        count = sum(1 for p in path.rglob("*") if p.is_file()) if path.exists() else 0
        shutil.rmtree(path, ignore_errors=True)
        return count
    parts = files.list(prefix)
    for part in parts:
        files.delete(part)
    return len(parts)

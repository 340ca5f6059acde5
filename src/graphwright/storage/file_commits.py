"""One Delta commit of the data files a patch or a deletion wrote (storage.patch): written where
the commit will name them, removed if it does not happen, and refused when another writer removed
a file it replaces meanwhile."""

from __future__ import annotations

import itertools
from collections.abc import Callable
import json
import re
import tempfile
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties
from deltalake.exceptions import CommitFailedError
from deltalake.transaction import AddAction, RemoveAction

from graphwright.storage import contracts, location
from graphwright.storage.log_retention import KEEP_LOG

SAFE_PARTITION_VALUE = re.compile(r"[A-Za-z0-9_.-]+")
DELETED_KEYS = "graphwright.deleted"  # the commitInfo field of a patch's deleted keys
DELETED_KEYS_NAMED = 100_000  # at most this many in one commit (about 2 MB of JSON); past it, readers read the files' keys
MOVED_FROM = "graphwright.moved"  # the commitInfo field of a deletion's moved files: where their rows came from


# a patch or deletion whose rewritten files another writer removed meanwhile (a compaction, a
# deletion) is made again from the table's new version: this many attempts in all
COMMIT_ATTEMPTS = 3


class ConcurrentRewrite(CommitFailedError):
    """The files a patch or a deletion rewrote are no longer all in the table: another writer
    removed some after they were listed. Committing would bring their rows back."""


class NewFiles:
    """The data files one commit adds: `new(partition values)` gives (its path in the table, where
    to write it now). A local table's are written straight into its folder under the names the
    commit gives them, so the commit copies nothing (putting them from a temporary folder copied
    the 481 MB a 0.1% update at 1.2M chunks writes to the entities: 0.78 s). Until the commit no
    version lists them: leaving the `with` by an error before the commit, or a commit refused,
    removes them; a process killed before its commit leaves them unlisted in the folder, as a
    killed Delta writer does (readers never see them; retention deletes them: storage.orphans).
    An object store's, and those of a table not made yet, are written to a temporary
    folder and put by the commit."""

    def __init__(self, store, name: str):
        self.name, self.batch, self.count, self.written = name, uuid.uuid4().hex, itertools.count(), []
        self.direct = not store.is_remote and store.exists(name)
        self._folder = None if self.direct else tempfile.TemporaryDirectory(prefix=f"graphwright-patch-{name}-")
        self.root = Path(store.path(name)) if self.direct else Path(self._folder.name)
        self.committing = False  # from the commit's start: the files may then be the table's

    def new(self, partition: dict[str, str] | None = None) -> tuple[str, str]:
        values = partition or {}
        if any(not SAFE_PARTITION_VALUE.fullmatch(v) for v in values.values()):
            raise ValueError(f"table {self.name}: partition value {values} needs escaping in a file path, which commit_files does not do")
        relative = "".join(f"{c}={v}/" for c, v in values.items()) + f"part-{next(self.count):05d}-{self.batch}.parquet"
        where = self.root / relative
        where.parent.mkdir(parents=True, exist_ok=True)
        self.written.append(where)
        return relative, str(where)

    def __enter__(self) -> NewFiles:
        return self

    def discard(self, mark: int) -> None:
        """Remove the files written since `len(self.written)` was `mark` (an attempt not committed)."""
        for where in self.written[mark:]:
            where.unlink(missing_ok=True)
        del self.written[mark:]

    def __exit__(self, kind, error, trace) -> bool:
        if self._folder is not None:
            self._folder.cleanup()
        elif error is not None and not self.committing:
            for where in self.written:
                where.unlink(missing_ok=True)
        return False


def with_retries(new_files: NewFiles, attempt: Callable[[], None]) -> None:
    """Run `attempt` (list the table's files, rewrite those it must and commit) until a commit is
    not refused, COMMIT_ATTEMPTS times at most: the files of a refused attempt are removed (on an
    object store, those it put stay unlisted until retention deletes them: storage.orphans), and
    the next one starts from the table's new version. The last refusal is raised."""
    for n in range(COMMIT_ATTEMPTS):
        mark = len(new_files.written)
        try:
            attempt()
            return
        except CommitFailedError:  # ConcurrentRewrite, or delta-rs's own conflict check
            if n + 1 == COMMIT_ATTEMPTS:
                raise
            new_files.discard(mark)


def commit_files(store, dt, name: str, new_files: NewFiles, adds: list[tuple[str, str, int]], removes: list[str],
            moved: list[tuple] = (), deleted: tuple[tuple[str], pa.Array] | None = None,
            moved_from: dict[str, list] | None = None, listed=None) -> None:
    """One Delta commit: remove `removes` (paths in the table), add the files `adds` and `moved`
    ((path in the table, where `new_files` put it, rows[, partition values])). The rows of `moved`
    are rows of `removes` copied unchanged, so they are added with dataChange false, as a
    compaction adds its files: a reader of the changes (storage.changes) reads only their keys.
    `deleted`: (key column, the keys the commit leaves without a row), named in its commitInfo
    (up to DELETED_KEYS_NAMED of them), so that a reader of the changes reads no key column of the
    files it removed and moved. `moved_from`: delete_matching's MOVED_FROM, named there too.
    `listed`: the snapshot `removes` were listed from; where `dt` is a later version, they must all
    still be in it (ConcurrentRewrite if not: delta-rs accepts removing a file another commit
    removed, so a compaction's copy of the rows would stay beside the patch's)."""
    import obstore

    table_files, actions = location.open_store(store.path(name), store.storage_options), []
    now = int(time.time() * 1000)
    for path in removes:
        actions.append(RemoveAction(path, True, now))
    for (relative, local, rows, *partition), change in [(f, True) for f in adds] + [(f, False) for f in moved]:
        if not new_files.direct:
            obstore.put(table_files, relative, Path(local))
        actions.append(AddAction(relative, Path(local).stat().st_size, partition[0] if partition else {}, now, change,
                                 json.dumps({"numRecords": rows})))
    if not new_files.direct and removes:
        dt = store.ensure(name)  # the puts take a while on an object store: checked against the version after them
    _still_listed(dt, listed, removes, name)
    named = {}
    if deleted is not None and len(deleted[1]) <= DELETED_KEYS_NAMED:
        named[DELETED_KEYS] = {"key": deleted[0][0], "values": pc.unique(deleted[1]).to_pylist()}
    if moved_from:
        named[MOVED_FROM] = moved_from
    new_files.committing = True
    try:
        dt.create_write_transaction(actions, mode="append", schema=contracts.schema(name).arrow,
                                    commit_properties=CommitProperties(custom_metadata=named) if named else None,
                                    post_commithook_properties=KEEP_LOG)
    except CommitFailedError:
        new_files.committing = False  # refused (a conflicting writer): no version lists the files
        raise


def _still_listed(dt, listed, removes: list[str], name: str) -> None:
    """ConcurrentRewrite unless every file in `removes` (listed at snapshot `listed`) is still one
    of version `dt`'s."""
    if not removes or listed is None or listed.version() == dt.version():
        return
    live = set(pa.table(dt.get_add_actions(flatten=False)).column("path").to_pylist())
    gone = [path for path in removes if path not in live]
    if gone:
        raise ConcurrentRewrite(
            f"table {name}: another writer removed {len(gone)} of the files this run rewrote (e.g. {gone[0]}) between "
            f"versions {listed.version()} and {dt.version()}; nothing was committed. Rerun; if it keeps happening, stop "
            "the other writer (graphwright's own runs, compactions and vacuums take the index's run lock)")

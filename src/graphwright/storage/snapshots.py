"""Delta tables opened once per version, for readers.

Opening a DeltaTable replays its log from the last checkpoint: 1.5-8 ms a table on the
benchmark indexes, and an update at 145k chunks opened tables 275 times for 62 distinct
(table, version, thread) snapshots. A reader asking for the latest version lists only the log
entries from the version it last saw on (about 0.1 ms locally, one LIST request on an object
store) and gets the snapshot it already opened when nothing was committed since.

A cached snapshot is never written through and never moved to another version: writers open
their own table (IndexStore.ensure), so a snapshot someone holds keeps meaning the version it
was opened at. Snapshots are kept per thread (deltalake's tables are not meant to be shared
between threads, delta-io/delta-rs#2958).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable

from deltalake import DeltaTable

from graphwright.storage.health import LOG, log_versions

KEPT_PER_THREAD = 64  # snapshots a thread keeps (the least recently used go first)


class TableSnapshots:
    """`get(name, version)`: the table at `version` (None: the latest), opened by
    `open_table(name, version, pinned)` the first time a thread asks for that version.
    `log_store(name)` is an obstore store rooted at the table's folder."""

    def __init__(self, open_table: Callable[[str, int | None, bool], DeltaTable | None], log_store: Callable[[str], object]):
        self._open, self._log_store = open_table, log_store
        self._local = threading.local()

    def _state(self) -> tuple[OrderedDict, dict[str, int]]:
        local = self._local
        if not hasattr(local, "snapshots"):
            local.snapshots, local.latest = OrderedDict(), {}
        return local.snapshots, local.latest

    def get(self, name: str, version: int | None = None) -> DeltaTable | None:
        snapshots, latest = self._state()
        pinned = version is not None
        if version is None and name in latest:
            version = self._newest(name, latest[name])
        if version is None:  # first look at this table in this thread, or its log cannot say
            dt = self._open(name, None, False)
            if dt is None:
                latest.pop(name, None)
                return None
            latest[name] = dt.version()
            self._keep(snapshots, (name, dt.version(), False), dt)
            return dt
        if not pinned:
            latest[name] = version
        key = (name, version, pinned)
        dt = snapshots.get(key)
        # a version asked for by number is checked to be in the log still (it may have been trimmed)
        if dt is not None and dt.version() == version and (not pinned or self._present(name, version)):
            snapshots.move_to_end(key)
            return dt
        dt = self._open(name, version, pinned)
        self._keep(snapshots, key, dt)
        return dt

    @staticmethod
    def _keep(snapshots: OrderedDict, key: tuple, dt: DeltaTable) -> None:
        snapshots[key] = dt
        snapshots.move_to_end(key)
        while len(snapshots) > KEPT_PER_THREAD:
            snapshots.popitem(last=False)

    def _present(self, name: str, version: int) -> bool:
        """Whether the commit of `version` is in the table's log."""
        import obstore
        from obstore.exceptions import BaseError

        try:
            obstore.head(self._log_store(name), f"{LOG}/{version:020d}.json")
            return True
        except (BaseError, OSError):
            return False

    def _newest(self, name: str, known: int) -> int | None:
        """The table's latest version, from one listing of the log from version `known` on;
        None when that commit is no longer there (the table was removed or its log cleaned up)."""
        import obstore
        from obstore.exceptions import BaseError

        # the listing starts after `offset`: after the commit before `known` (its checkpoint sorts before it)
        offset = f"{LOG}/{known - 1:020d}.json" if known else None
        try:
            entries = {meta["path"].rsplit("/", 1)[-1]: meta["size"]
                       for batch in obstore.list(self._log_store(name), f"{LOG}/", offset=offset) for meta in batch}
        except (BaseError, OSError):
            return None
        if f"{known:020d}.json" not in entries:
            return None
        commits, checkpoints = log_versions(entries)
        return max([known, *commits, *checkpoints])

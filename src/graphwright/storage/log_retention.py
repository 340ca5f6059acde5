"""Every Delta commit graphwright makes keeps the table's log whole; vacuum trims it below what
the kept versions need.

delta-rs writes a checkpoint after every 100th commit of a table and then, by default, deletes
the log files older than the log retention (30 days) up to it. A version whose commits are gone
can no longer be opened ("No files in log segment"), so a published version older than a month
would stop reading once its tables passed a hundred commits, long before vacuum's
`keep_versions` says it may go. Tables are created with log cleanup off, and each write also
says so, for tables made by older versions. Checkpoints themselves come from storage.checkpoints.

Without cleanup a table's log grows by a file per commit for ever; `trim_log`, called by
retention (ops.versions), deletes the commits, checkpoints and checksums below the newest
checkpoint at or before the oldest version still needed: a reader of that version or any later
one starts from that checkpoint and never opens them.
"""

from __future__ import annotations

import re

from deltalake import PostCommitHookProperties

from graphwright.storage import health

KEEP_LOG = PostCommitHookProperties(cleanup_expired_logs=False)
TABLE_PROPERTIES = {"delta.enableExpiredLogCleanup": "false"}
_VERSIONED = re.compile(r"^(\d{20})\.(?:json|crc|checkpoint(?:\.\d+\.\d+)?\.parquet)$")


def trim_log(store, name: str, oldest_needed: int, *, dry_run: bool = False) -> int:
    """Delete table `name`'s log files that no reader of Delta version `oldest_needed` or later
    replays. Returns how many there were (none when no checkpoint lies at or below that version)."""
    import obstore

    table_store = store.table_files(name)
    entries = health.log_entries(table_store)
    _, checkpoints = health.log_versions(entries)
    floor = max((v for v in checkpoints if v <= oldest_needed), default=None)
    if floor is None:
        return 0
    doomed = sorted(n for n in entries if (m := _VERSIONED.match(n)) and int(m.group(1)) < floor)
    if not dry_run:
        for entry in doomed:  # oldest first: a listing made meanwhile still finds a readable tail
            obstore.delete(table_store, f"{health.LOG}/{entry}")
    return len(doomed)

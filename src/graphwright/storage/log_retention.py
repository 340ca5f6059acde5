"""Every Delta commit graphwright makes keeps the table's log whole; vacuum trims it below what
the kept versions need.

delta-rs writes a checkpoint after every 100th commit of a table and then, by default, deletes
the log files older than the log retention (30 days) up to it. A version whose commits are gone
can no longer be opened ("No files in log segment"), so a published version older than a month
would stop reading once its tables passed a hundred commits, long before vacuum's
`keep_versions` says it may go. Tables are created with log cleanup off, and each write also
says so, for tables made by older versions. Checkpoints themselves come from storage.checkpoints.

Without cleanup a table's log grows by a file per commit for ever; `trim_log`, called by
retention (ops.versions), deletes the commits, checkpoints and checksums below a checkpoint at or
before the oldest version still needed: a reader of that version or any later one starts from
that checkpoint and never opens them. `spare` keeps that many more checkpoints below, for
readers that hold a version they did not pin (a query process's LLM cache lookup reads one
version twice; an open handle appends after the version it read).
"""

from __future__ import annotations

import re

from deltalake import PostCommitHookProperties

from graphwright.storage import health

KEEP_LOG = PostCommitHookProperties(cleanup_expired_logs=False)
TABLE_PROPERTIES = {"delta.enableExpiredLogCleanup": "false"}
_VERSIONED = re.compile(r"^(\d{20})\.(?:json|crc|checkpoint(?:\.\d+\.\d+)?\.parquet)$")
_PART = re.compile(r"^(\d{20})\.checkpoint\.(\d+)\.(\d+)\.parquet$")


def complete_checkpoints(entries: dict[str, int]) -> list[int]:
    """Versions with a whole checkpoint: a single file, or every part of a multi-part one (a
    writer killed halfway leaves some parts, which no reader may start from)."""
    _, checkpoints = health.log_versions(entries)
    parts: dict[tuple[int, int], set[int]] = {}
    for name in entries:
        if m := _PART.match(name):
            parts.setdefault((int(m.group(1)), int(m.group(3))), set()).add(int(m.group(2)))
    partial = {v for (v, n), got in parts.items() if got != set(range(1, n + 1))}
    whole = {v for (v, n), got in parts.items() if got == set(range(1, n + 1))}
    return sorted({v for v in checkpoints if v not in partial} | whole)


def trim_log(store, name: str, oldest_needed: int, *, spare: int = 0, dry_run: bool = False) -> int:
    """Delete table `name`'s log files below its newest whole checkpoint at or before Delta
    version `oldest_needed` (the `spare`-th one before that, with `spare` > 0). Returns how many
    there were (none when no such checkpoint exists)."""
    import obstore

    table_store = store.table_files(name)
    entries = health.log_entries(table_store)
    below = [v for v in complete_checkpoints(entries) if v <= oldest_needed]
    if len(below) <= spare:
        return 0
    floor = below[-1 - spare]
    doomed = sorted(n for n in entries if (m := _VERSIONED.match(n)) and int(m.group(1)) < floor)
    if not dry_run:
        for entry in doomed:  # oldest first: a listing made meanwhile still finds a readable tail
            obstore.delete(table_store, f"{health.LOG}/{entry}")
    return len(doomed)

"""Every Delta commit graphwright makes keeps the table's log whole.

delta-rs writes a checkpoint after every 100th commit of a table and then, by default, deletes
the log files older than the log retention (30 days) up to it. A version whose commits are gone
can no longer be opened ("No files in log segment"), so a published version older than a month
would stop reading once its tables passed a hundred commits, long before vacuum's
`keep_versions` says it may go. Tables are created with log cleanup off, and each write also
says so, for tables made by older versions. Checkpoints themselves come from storage.checkpoints.
"""

from __future__ import annotations

from deltalake import PostCommitHookProperties

KEEP_LOG = PostCommitHookProperties(cleanup_expired_logs=False)
TABLE_PROPERTIES = {"delta.enableExpiredLogCleanup": "false"}

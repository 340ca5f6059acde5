"""Delta checkpoints of an index's tables. Opening a table replays the commits after its newest
checkpoint (about 0.3 ms each here), and health verifies them again, so without checkpoints every
open grows with the nightly runs behind it: after one LLM-path build the embeddings table had 58
commits and took 20 ms to open, 5 ms from a checkpoint. delta-rs checkpoints on its own only every
100 commits (and would then delete old log files, which storage.log_retention turns off); a
checkpoint written here deletes nothing."""

from __future__ import annotations

from graphwright.storage import contracts, health
from graphwright.storage.delta import IndexStore

CHECKPOINT_EVERY = 10  # commits after the newest checkpoint that make one due


def commits_since_checkpoint(store: IndexStore, name: str) -> tuple[int, int] | None:
    """(the table's latest version, how many commits come after its newest checkpoint), from one
    listing of its log; None if the table has no log."""
    commits, checkpoints = health.log_versions(health.log_entries(store.table_files(name)))
    if not commits:
        return None
    latest = max(commits)
    return latest, latest - (max(checkpoints) if checkpoints else -1)


def checkpoint_due(store: IndexStore, every: int = CHECKPOINT_EVERY) -> dict[str, int]:
    """Write a checkpoint of each table whose log has `every` or more commits after its newest
    checkpoint. Returns {table: version checkpointed}."""
    done = {}
    for name in contracts.all_schemas():
        if not store.exists(name):
            continue
        state = commits_since_checkpoint(store, name)
        if state is not None and state[1] >= every:
            store.ensure(name).create_checkpoint()
            done[name] = state[0]
    return done

"""The runs table as `graphwright runs` shows it: a run whose process died (killed, out of
memory, the machine stopped) never recorded an outcome, and stays `running` in the table until
someone who holds the run lock, or sees who holds it, marks it `interrupted`."""

from __future__ import annotations

import pyarrow as pa

from graphwright.storage.delta import IndexStore

INTERRUPTED = ("interrupted: its process ended without recording an outcome (killed, out of memory, or the "
               "machine stopped); what it committed stays, and the next index run finishes the rest")


def stale_runs(store: IndexStore, holder_run_id: str | None) -> list[dict]:
    """Rows still `running` that no process is running: every one but the lock holder's."""
    if not store.exists("runs"):
        return []
    rows = store.read("runs", where="status = 'running'").to_pylist()
    return [r for r in rows if r["run_id"] != holder_run_id]


def mark_interrupted(store: IndexStore, found_by: str) -> int:
    """Mark every `running` row `interrupted`; call only while holding the run lock (so no run is
    running). Returns how many were marked."""
    rows = stale_runs(store, None)
    for row in rows:
        row["status"], row["error"] = "interrupted", f"{INTERRUPTED} (found by {found_by})"
    if rows:
        store.upsert("runs", pa.Table.from_pylist(rows))
    return len(rows)


def settle(store: IndexStore) -> set[str]:
    """Runs left `running` by a dead process: marked `interrupted` in the table when the run lock
    is free (it is taken for the moment), else only reported, since the holder may be writing.
    Returns the run ids that are interrupted."""
    from graphwright.storage.lock import IndexLocked, holder, run_lock

    try:
        with run_lock(store, "graphwright-runs", "runs"):
            ids = {r["run_id"] for r in stale_runs(store, None)}
            mark_interrupted(store, "graphwright runs")
            return ids
    except IndexLocked:
        current = holder(store) or {}
        return {r["run_id"] for r in stale_runs(store, current.get("run_id"))}

"""The record of an index's LLM batches: `llm_batches` (one row per change of a batch's state,
appended; the latest is its state) and `llm_batch_requests` (each batch's request keys, written
before the batch is sent, partitioned by batch).

A batch is recorded `submitting` before anything is sent, so that a run killed between sending
it and recording the provider's id leaves a record that the next run reconciles (by looking the
batch up by our id in the provider's metadata) rather than an orphan it would pay for again.
The requests of live batches (submitting or submitted) are read from their partitions only.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pyarrow as pa

from graphwright.storage.delta import IndexStore, sql_list

LIVE = ("submitting", "submitted")


def _now() -> datetime:
    return datetime.now(UTC)


class BatchLedger:
    def __init__(self, store: IndexStore):
        self.store = store
        self.rows: dict[str, dict] = {}  # batch id -> its latest row, as of the last refresh

    def refresh(self) -> dict[str, dict]:
        rows = sorted(self.store.read("llm_batches").to_pylist(), key=lambda r: r["recorded_at"])
        self.rows = {r["batch_id"]: r for r in rows}
        return self.rows

    def live(self) -> dict[str, dict]:
        return {b: r for b, r in self.rows.items() if r["state"] in LIVE}

    def keys_in(self, batch_ids) -> dict[str, str]:
        """{key: batch id} of the requests of `batch_ids` (one read of their partitions)."""
        batch_ids = sorted(set(batch_ids))
        if not batch_ids or not self.store.exists("llm_batch_requests"):
            return {}
        out: dict[str, str] = {}
        for start in range(0, len(batch_ids), 500):
            table = self.store.read("llm_batch_requests", columns=["batch_id", "key"],
                                    where=f"batch_id IN {sql_list(batch_ids[start:start + 500])}")
            out.update(zip(table.column("key").to_pylist(), table.column("batch_id").to_pylist()))
        return out

    def members(self, batch_id: str) -> dict[str, dict]:
        """{key: {prompt_version, max_tokens}} of one batch's requests."""
        table = self.store.read("llm_batch_requests", columns=["key", "prompt_version", "max_tokens"],
                                where=f"batch_id IN {sql_list([batch_id])}")
        return {r["key"]: r for r in table.to_pylist()}

    def open(self, row: dict, members: list[dict]) -> dict:
        """Record a batch about to be sent: its requests first, then the batch as `submitting`
        (requests without a batch row are never read)."""
        self.store.append("llm_batch_requests", pa.Table.from_pylist([{"batch_id": row["batch_id"], **m} for m in members]))
        full = {**EMPTY_ROW, **row, "state": "submitting", "run_id": row["submitted_by"], "recorded_at": _now()}
        self.store.append("llm_batches", pa.Table.from_pylist([full]))
        self.rows[row["batch_id"]] = full
        return full

    def record(self, batch_id: str, run_id: str, **changes) -> dict:
        """Append the batch's new state (its latest row with `changes`)."""
        previous = self.rows[batch_id]
        at = max(_now(), previous["recorded_at"] + timedelta(microseconds=1))
        row = {**previous, **changes, "run_id": run_id, "recorded_at": at}
        self.store.append("llm_batches", pa.Table.from_pylist([row]))
        self.rows[batch_id] = row
        return row


EMPTY_ROW = {"provider_status": None, "provider_batch_id": None, "input_file_id": None, "output_file_id": None,
             "error_file_id": None, "completed": None, "failed": None, "prompt_tokens": None, "completion_tokens": None,
             "error": None}

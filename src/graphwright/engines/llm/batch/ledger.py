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
        self._keys: dict[str, list[str]] = {}  # batch id -> its request keys (written once, never changed)
        self.opened: dict[str, datetime] = {}  # batch id -> when it was recorded submitting

    def refresh(self) -> dict[str, dict]:
        rows = sorted(self.store.read("llm_batches").to_pylist(), key=lambda r: r["recorded_at"])
        self.rows = {r["batch_id"]: r for r in rows}
        self.opened = {}
        for r in rows:
            self.opened.setdefault(r["batch_id"], r["recorded_at"])
        return self.rows

    def others_running_at(self, batch_id: str) -> list[str]:
        """The batches that were sent, and not yet collected or abandoned, when `batch_id` was."""
        since = self.opened[batch_id]
        return [b for b, r in self.rows.items() if b != batch_id and self.opened[b] <= since
                and (r["state"] in LIVE or r["recorded_at"] >= since)]

    def live(self) -> dict[str, dict]:
        return {b: r for b, r in self.rows.items() if r["state"] in LIVE}

    def keys_in(self, batch_ids) -> dict[str, str]:
        """{key: batch id} of the requests of `batch_ids` (their partitions are read once)."""
        unread = sorted(set(batch_ids) - set(self._keys))
        if unread and self.store.exists("llm_batch_requests"):
            for start in range(0, len(unread), 500):
                table = self.store.read("llm_batch_requests", columns=["batch_id", "key"],
                                        where=f"batch_id IN {sql_list(unread[start:start + 500])}")
                for key, batch_id in zip(table.column("key").to_pylist(), table.column("batch_id").to_pylist()):
                    self._keys.setdefault(batch_id, []).append(key)
        return {k: b for b in set(batch_ids) for k in self._keys.get(b, ())}

    def members(self, batch_id: str) -> dict[str, dict]:
        """{key: {prompt_version, max_tokens}} of one batch's requests."""
        table = self.store.read("llm_batch_requests", columns=["key", "prompt_version", "max_tokens"],
                                where=f"batch_id IN {sql_list([batch_id])}")
        return {r["key"]: r for r in table.to_pylist()}

    def open(self, row: dict, members: list[dict]) -> dict:
        """Record a batch about to be sent: its requests first, then the batch as `submitting`
        (requests without a batch row are never read)."""
        self.store.append("llm_batch_requests", pa.Table.from_pylist([{"batch_id": row["batch_id"], **m} for m in members]))
        self._keys[row["batch_id"]] = [m["key"] for m in members]
        full = {**EMPTY_ROW, **row, "state": "submitting", "run_id": row["submitted_by"], "recorded_at": _now()}
        self.store.append("llm_batches", pa.Table.from_pylist([full]))
        self.rows[row["batch_id"]] = full
        self.opened[row["batch_id"]] = full["recorded_at"]
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

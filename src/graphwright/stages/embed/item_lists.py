"""Embed: a lexical index's item list, (item_id, row_hash) sorted by item id, brought up to date
with what changed. Ids of one length (content hashes) are searched in the sorted list as numpy
bytes: hashing and sorting the 3.5M ids of a 1.2M-chunk index took 3 s of every update. Ids of
mixed lengths, or a list out of order, are matched by Arrow's hash lookups and sorted whole."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graphwright.util.numeric import fixed_bytes, sorted_index


def updated(before: pa.Table, fresh: pa.Table, deleted: pa.Array) -> tuple[pa.Table, pa.Table, pa.Array]:
    """(the list with the items `deleted` removed and `fresh`'s added or replaced, the rows of
    `fresh` (item_id, row_hash, ...) that are new or changed, the ids the list loses: removed or
    changed)."""
    deleted = deleted.cast(pa.string())
    ids, new_ids, gone = (fixed_bytes(c) for c in (before.column("item_id"), fresh.column("item_id"), deleted))
    if (ids is None or new_ids is None or gone is None or not len(ids) or (len(new_ids) and new_ids.dtype != ids.dtype)
            or np.any(ids[1:] < ids[:-1])):
        return _by_hashing(before, fresh, deleted)
    at = sorted_index(ids, new_ids)
    same = at >= 0
    if same.any():
        hashes = before.column("row_hash").take(pa.array(at[same]))
        same[same] = np.asarray(pc.equal(hashes, fresh.column("row_hash").filter(pa.array(same))))
    fresh = fresh.filter(pa.array(~same))
    drop = np.zeros(len(ids), dtype=bool)
    for found in (sorted_index(ids, gone), at[~same]):
        drop[found[found >= 0]] = True
    kept = before.filter(pa.array(~drop))
    return merged(kept, fresh.select(["item_id", "row_hash"]), ids[~drop]), fresh, \
        before.column("item_id").filter(pa.array(drop)).combine_chunks()


def merged(kept: pa.Table, added: pa.Table, kept_ids: np.ndarray | None = None) -> pa.Table:
    """`kept` (sorted by item id) and `added` (items it does not hold) as one list sorted by id,
    `added` merged in; `kept_ids`: kept's ids as fixed_bytes, already checked to be in order."""
    added = added.sort_by("item_id")
    if kept_ids is None:
        kept_ids = fixed_bytes(kept.column("item_id"))
        if kept_ids is not None and np.any(kept_ids[1:] < kept_ids[:-1]):
            kept_ids = None  # out of order: sorted whole below
    added_ids = fixed_bytes(added.column("item_id"))
    both = pa.concat_tables([kept, added])
    if kept_ids is None or added_ids is None or (len(kept_ids) and len(added_ids) and kept_ids.dtype != added_ids.dtype):
        return both.sort_by("item_id")
    at = np.searchsorted(kept_ids, added_ids) + np.arange(len(added_ids))
    order = np.empty(len(kept_ids) + len(added_ids), np.int64)
    placed = np.zeros(len(order), dtype=bool)
    placed[at] = True
    order[at], order[~placed] = len(kept_ids) + np.arange(len(added_ids)), np.arange(len(kept_ids))
    return both.take(pa.array(order))


def _by_hashing(before: pa.Table, fresh: pa.Table, deleted: pa.Array) -> tuple[pa.Table, pa.Table, pa.Array]:
    at = pc.index_in(fresh.column("item_id"), value_set=before.column("item_id").combine_chunks())
    same = pc.fill_null(pc.equal(before.column("row_hash").take(at), fresh.column("row_hash")), False)
    fresh = fresh.filter(pc.invert(same))
    drop = pc.is_in(before.column("item_id"), value_set=pa.concat_arrays([deleted, fresh.column("item_id").combine_chunks()]))
    items = pa.concat_tables([before.filter(pc.invert(drop)), fresh.select(["item_id", "row_hash"])]).sort_by("item_id")
    return items, fresh, before.column("item_id").filter(drop).combine_chunks()

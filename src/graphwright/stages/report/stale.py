"""Which communities an update must plan LLM reports for again, from the Delta log instead of
from every community's rows.

A report plan (report.llm) is a function of the community's row, its members' entity and
relationship rows (a chunk's id derives from its text, so a changed text unit changes the
chunk lists of the rows that cite it), the report settings, and its children's plans. So a
community needs planning again when its row changed, a member row changed or went, its report
is not this generator's LLM report, or a descendant needs it; every other community keeps the
input hash its report was written with. (An update rewrites many community rows whose parent id
or graph hash alone changed; those are compared with their previous version on what a plan
reads, not taken as changed.) `stale_communities` answers None (plan everything)
where the log cannot say what changed since the last run."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graphwright.storage.changes import changes_since
from graphwright.util.numeric import to_numpy

KEYS = {"entities": "entity_id", "relationships": "relationship_id"}
# what a plan reads of its community's row beside the id, which is a hash of level and members
PLANNED = ("children_ids", "relationship_ids")


def stale_communities(store, since: dict[str, int | None] | None, communities: pa.Table, previous: pa.Table,
                      generator: str, min_size: int) -> set[str] | None:
    """The community ids of `communities` to plan again, given the table versions the last
    completed report run read (`since`, from its StageMemo note) and the reports it left
    (`previous`); None when the changes cannot be read. Communities under `min_size` have no
    report and are stale only through their rows."""
    if not since:
        return None
    touched: dict[str, pa.Array] = {}
    for table, key in KEYS.items():
        changes = changes_since(store, table, since.get(table), key, [key])
        if changes is None:
            return None
        touched[table] = pa.concat_arrays([changes.rows.column(key).combine_chunks().cast(pa.string()),
                                           changes.deleted.cast(pa.string())])
    ids = communities.column("community_id").combine_chunks()
    stale = _rows_changed(store, since["communities"], communities)
    if stale is None:
        return None
    for table, column in (("entities", "entity_ids"), ("relationships", "relationship_ids")):
        lists = communities.column(column).combine_chunks()
        hit = to_numpy(pc.is_in(pc.list_flatten(lists), value_set=touched[table]), bool)
        if hit.any():
            stale[np.unique(to_numpy(pc.list_parent_indices(lists), np.int64)[hit])] = True
    # a report this run cannot reuse as it is (missing, another generator's, a fallback) is written again
    reusable = previous.filter(pc.equal(previous.column("generator"), generator)).column("community_id").combine_chunks()
    eligible = to_numpy(pc.greater_equal(communities.column("size"), min_size), bool)
    stale |= eligible & ~to_numpy(pc.is_in(ids, value_set=reusable), bool)
    return _with_ancestors(set(ids.filter(pa.array(stale)).to_pylist()), communities)


def _rows_changed(store, since: int | None, communities: pa.Table) -> np.ndarray | None:
    """Per community: it is new since Delta version `since`, or its children or relationships
    differ from that version's row (an update rewrites many rows whose parent or graph hash
    alone changed, which no plan reads); None when that version cannot be read."""
    if since is None:
        return None
    try:
        old = store.read("communities", version=since, columns=["community_id", *PLANNED])
    except Exception:  # noqa: BLE001 - vacuumed, or never there: plan everything
        return None
    at = pc.index_in(communities.column("community_id").combine_chunks(), value_set=old.column("community_id").combine_chunks())
    changed = to_numpy(pc.is_null(at), bool).copy()
    matched = np.flatnonzero(~changed)
    if not len(matched):
        return changed
    before = old.take(at.drop_null())
    now = communities.take(pa.array(matched))
    for column in PLANNED:
        a, b = before.column(column).combine_chunks(), now.column(column).combine_chunks()
        differs = to_numpy(pc.not_equal(pc.list_value_length(a), pc.list_value_length(b)), bool).copy()
        same = np.flatnonzero(~differs)
        a, b = a.take(pa.array(same)), b.take(pa.array(same))
        unequal = to_numpy(pc.not_equal(pc.list_flatten(a), pc.list_flatten(b)), bool)
        differs[same[np.unique(to_numpy(pc.list_parent_indices(b), np.int64)[unequal])]] = True
        changed[matched[differs]] = True
    return changed


def _with_ancestors(stale: set[str], communities: pa.Table) -> set[str]:
    parent = dict(zip(communities.column("community_id").to_pylist(), communities.column("parent_id").to_pylist()))
    out = set()
    for cid in stale:
        while cid is not None and cid not in out:
            out.add(cid)
            cid = parent.get(cid)
    return out

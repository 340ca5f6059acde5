"""Resolve from coded rows (plain functions for stages.resolve.incremental): the rows an update
changed, chunk ranks, and the entity rows of chosen entities (their description
texts come from stages.resolve.texts)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graphwright.stages.resolve import core
from graphwright.stages.resolve.codes import best_names
from graphwright.stages.resolve.pair_cache import mix, stable_hashes
from graphwright.stages.resolve.state import Advance
from graphwright.util.numeric import distinct_codes, distinct_lists, to_numpy
from graphwright.util.threads import side_by_side


def net_change(adv: Advance, columns: tuple[str, ...]) -> dict[str, np.ndarray]:
    """The rows the update really added or removed: a file that a DELETE rewrote is removed and
    added again with most of its rows, and those cancel out (rows compare by all `columns`).
    Rows are grouped by a hash of all columns (Arrow's hash table), each checked equal to its
    group's first row; only the changed rows are sorted. 600k rows: 0.40 s sorting them all by
    seven columns, 0.09 s so."""
    removed, added = adv.removed.arrays, adv.added.arrays
    if not len(adv.removed):
        return {c: added[c] for c in columns}
    both = {c: np.concatenate([removed[c], added[c]]) for c in columns}
    sign = np.r_[np.full(len(adv.removed), -1, np.int64), np.ones(len(adv.added), np.int64)]
    keys = [both[c].view(np.int64) if both[c].dtype == np.float64 else both[c].astype(np.int64) for c in columns]
    group = to_numpy(pc.dictionary_encode(pa.array(mix(*keys))).indices, np.int64)  # numbered in order of first appearance
    seen = np.maximum.accumulate(group)
    firsts = np.flatnonzero(np.r_[True, seen[1:] > seen[:-1]])  # firsts[g]: group g's first row
    if all(np.array_equal(k, k[firsts[group]]) for k in keys):
        changed = firsts[np.bincount(group, weights=sign, minlength=len(firsts)) != 0]
        changed = changed[np.lexsort([k[changed] for k in keys[::-1]])]
    else:  # two distinct rows share a hash: group them by sorting on every column
        changed = _net_rows_sorted(keys, sign)
    return {c: both[c][changed] for c in columns}


def _net_rows_sorted(keys: list[np.ndarray], sign: np.ndarray) -> np.ndarray:
    order = np.lexsort(keys[::-1])
    sorted_keys = [k[order] for k in keys]
    new_group = np.ones(len(order), dtype=bool)
    if len(order):
        new_group[1:] = np.any([k[1:] != k[:-1] for k in sorted_keys], axis=0)
    group = np.cumsum(new_group) - 1
    net = np.bincount(group, weights=sign[order], minlength=int(group[-1]) + 1 if len(group) else 0)
    return order[new_group][net != 0]


def chunk_ranks(store, chunk_names: pa.Array) -> np.ndarray:
    """Each chunk's rank in corpus order, (source key, chunk index), chunks not in the chunks
    table last by id: what core.corpus_rank computes from a dict, in Arrow."""
    chunks = store.read("chunks", columns=["chunk_id", "doc_id", "chunk_index"])
    docs = store.read("documents", columns=["doc_id", "source_key"])
    n = len(chunk_names)
    at = to_numpy(pc.fill_null(pc.index_in(chunk_names, value_set=chunks.column("chunk_id")), -1), np.int64)
    known = at >= 0
    doc_at = to_numpy(pc.fill_null(pc.index_in(chunks.column("doc_id"), value_set=docs.column("doc_id")), -1), np.int64)
    keys = pa.concat_arrays([pa.array([""], pa.string()), docs.column("source_key").combine_chunks().cast(pa.string())])
    source_rank = to_numpy(pc.rank(keys, sort_keys="ascending", tiebreaker="dense"), np.int64)
    chunk_source = source_rank[doc_at + 1] if len(doc_at) else np.zeros(0, np.int64)
    index = to_numpy(chunks.column("chunk_index"), np.int64)
    safe = np.maximum(at, 0)
    order = np.lexsort((np.arange(n), np.where(known, index[safe] if len(index) else 0, 0),
                        np.where(known, chunk_source[safe] if len(chunk_source) else 0, 0), ~known))
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n)
    return rank


def used_codes(used_chunks: np.ndarray, chunk_code: np.ndarray) -> np.ndarray:
    """Per dictionary code, whether a row uses the chunk (`used_chunks` are sorted positions)."""
    used = np.zeros(len(chunk_code), dtype=bool)
    by_sorted = np.empty(len(chunk_code), dtype=np.int64)
    by_sorted[chunk_code] = np.arange(len(chunk_code))
    used[by_sorted[distinct_codes(used_chunks, len(chunk_code))]] = True
    return used


def order_kept(previous: pa.Table, rank_by_code: np.ndarray, used_now: np.ndarray) -> bool:
    """Whether the chunks that rows used before and use now (`used_now`: used_codes) keep their
    order among themselves. A chunk no row used before (a removed document's, added back) ranked
    last then: where it comes now cannot reorder a description that was kept, since only touched
    entities hold it."""
    before = to_numpy(previous.column("rank"), np.int64)
    common = min(len(before), len(rank_by_code))
    if not common:
        return True
    used = used_now.copy()
    if "used" in previous.column_names:  # states from before this flag compare every chunk used now
        used[:common] &= to_numpy(previous.column("used"), np.bool_)[:common]
    codes = np.flatnonzero(used[:common])
    now = rank_by_code[codes][np.argsort(before[codes], kind="stable")]
    return bool(np.all(now[1:] > now[:-1])) if len(now) > 1 else True


def code_hashes(previous: pa.Table | None, values) -> np.ndarray:
    """stable_hashes of a dictionary's values (a codes.Dictionary, or a list) in code order,
    reusing those of the codes the previous run hashed (`previous`'s "hash" column: a dictionary
    only grows). At 1.2M chunks, hashing every chunk id took 0.9 s of each update; the values
    hashed before are not made Python strings."""
    def tail(start: int) -> list[str]:
        return values.values_from(start) if hasattr(values, "values_from") else values[start:]

    have = np.empty(0, np.int64)
    if previous is not None and "hash" in previous.column_names:
        have = to_numpy(previous.column("hash"), np.int64)
        if len(have) > len(values) or (len(have) and stable_hashes(tail(len(have) - 1)[:1])[0] != have[-1]):
            have = np.empty(0, np.int64)  # not this dictionary's
    return np.concatenate([have, stable_hashes(tail(len(have)))])


def build_entities(chosen: np.ndarray, m: dict, m_entity: np.ndarray, n_entities: int, names, type_names: pa.Array,
                   doc_names: pa.Array, rank: np.ndarray, degree: np.ndarray, entity_ids: list[str],
                   entity_keys: list[str], config, overflow: dict | None, chunk_lists: pa.ListArray,
                   fetch, keep_bytes: int = 0) -> tuple[pa.Table, list[str]]:
    """The entity rows of `chosen` (entity indices), as a full resolve computes them, and their
    names; `chunk_lists`: their chunk_ids (storage.lineage has them); `keep_bytes`: _Parts's."""
    local = np.full(n_entities, -1, dtype=np.int64)
    local[chosen] = np.arange(len(chosen))
    rows = np.flatnonzero(local[m_entity] >= 0) if len(m_entity) else np.empty(0, np.int64)
    group, k = local[m_entity[rows]], len(chosen)
    sub = {c: m[c][rows] for c in ("name", "count", "type", "chunk_id", "doc_id", "description", "length")}
    limit, want = config.description_max_chars, overflow is not None
    ids_ = [entity_ids[i] for i in chosen.tolist()]

    def counted() -> dict:  # sorts and bincounts over the chosen entities' mentions (the hubs' millions)
        return {**core._types(group, sub["type"], sub["count"], type_names.to_pylist(), k),
                "mention_count": pa.array(np.bincount(group, weights=sub["count"], minlength=k).astype(np.int64)),
                "doc_ids": distinct_lists(group, sub["doc_id"], doc_names, k)}

    def described() -> tuple[list[str], list]:
        chosen_names = best_names(group, sub["name"], sub["count"], k, names.values)
        parts = core._Parts(group, k, None, sub, rank, limit, want, keep_bytes)
        wanted, at = parts.needed_at()
        texts = fetch(wanted, rows[at])  # the parts index `sub`, the fetcher `m`
        return chosen_names, core.merged_descriptions(parts, texts, ids_, chosen_names, overflow if want else None)

    # numpy's sorts release the GIL: the counts beside the description plans and their reads
    # (a 0.1% update at 1.2M chunks rebuilds 2,838 entities, whose mentions are 7.7M rows)
    columns, (chosen_names, descriptions) = side_by_side(counted, described, "resolve-entity-counts")
    table = pa.table({
        "entity_id": pa.array(ids_, pa.string()),
        "canonical_key": pa.array([entity_keys[i] for i in chosen.tolist()], pa.string()),
        "name": pa.array(chosen_names, pa.string()),
        "type": columns["type"],
        "types": columns["types"],
        "description": pa.concat_arrays([pa.array([], pa.string()), *descriptions]),
        "mention_count": columns["mention_count"],
        "degree": pa.array(degree[chosen], pa.int64()),
        "chunk_ids": chunk_lists,
        "doc_ids": columns["doc_ids"],
    })
    return table, chosen_names

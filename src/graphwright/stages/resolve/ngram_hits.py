"""Resolve's n-gram candidates as directed hits (each key's neighbours scoring at least
min_ngram_cosine), kept between runs so that an update whose key set changed searches again only
the keys the change can reach, not all of them (about a second at 41k keys).

A key's hits (engines.vectors.count_neighbours) are the best k, by exact cosine, of the keys in
the IVF lists it probes. They can change only where
- its probes change: a centroid (the keys hashing lowest, so a function of the key set) came or
  went among the ones it ranks highest;
- a key arrives in the lists it probes (an added key, or one that moved to another list when the
  centroids changed) scoring at least its threshold: its k-th hit's score where it has k hits,
  else min_ngram_cosine (below it nothing becomes a pair, nor displaces a hit); every key such
  an arrival scores that high against is searched, whichever lists it probes;
- one of its hits leaves (a removed key, or one that moved lists).
Those keys and the added ones are searched again and every other key keeps its hits, which then
equal a search of every key. A change to the settings or to the number of lists, one that is a
large share of the keys, or one that reaches half of them, searches every key.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graphwright.engines.vectors.count_neighbours import BLOCK, CountSpace, count_neighbours, list_of
from graphwright.engines.vectors.neighbours import EXACT_UP_TO, IVF_PROBES, hashed_centroids, ivf_lists, ngram_counts, row_hashes
from graphwright.stages.resolve.pair_cache import keys_digest
from graphwright.util.numeric import to_numpy, unique

FORMAT = 1
REFRESH_SHARE = 0.125  # keys added and removed past this share of the keys: every key is searched
SEARCH_SHARE = 0.5  # keys to search again past this share: every key is searched (the same hits, cheaper)


@dataclass
class NgramHits:
    """Directed hits: `row`'s neighbour `hit` (indices into the sorted keys) scored `score`."""

    row: np.ndarray
    hit: np.ndarray
    score: np.ndarray
    keys: str  # pair_cache.keys_digest of the keys they index
    settings: str
    searched: int  # keys searched to make them

    def valid(self, n: int, k: int) -> bool:
        """Whether these can be the hits of n keys: rows and hits among them, no row its own hit,
        at most k hits a row (a state that is not is searched again, not trusted)."""
        if not len(self.row):
            return True
        return bool(min(self.row.min(), self.hit.min()) >= 0 and max(self.row.max(), self.hit.max()) < n
                    and (self.row != self.hit).all() and np.bincount(self.row).max() <= k)

    def pairs(self, n: int) -> np.ndarray:
        """Sorted codes i * n + j, i < j, of the pairs the hits make."""
        return unique(np.minimum(self.row, self.hit) * n + np.maximum(self.row, self.hit))

    def table(self) -> pa.Table:
        return pa.table({"row": pa.array(self.row, pa.int32()), "hit": pa.array(self.hit, pa.int32()),
                         "score": pa.array(self.score, pa.float64())}).replace_schema_metadata(
            {"keys": self.keys, "settings": self.settings})

    @classmethod
    def from_table(cls, table: pa.Table | None) -> NgramHits | None:
        meta = table.schema.metadata if table is not None else None
        if not meta or not {b"settings", b"keys"} <= set(meta) or not {"row", "hit", "score"} <= set(table.column_names) \
                or any(table.column(c).null_count for c in ("row", "hit", "score")):
            return None
        return cls(to_numpy(table.column("row"), np.int64), to_numpy(table.column("hit"), np.int64),
                   to_numpy(table.column("score"), np.float64), meta[b"keys"].decode(), meta[b"settings"].decode(), 0)


def settings(config, n: int) -> str:
    lists = "flat" if n <= EXACT_UP_TO else f"ivf{ivf_lists(n)}x{IVF_PROBES}"
    return f"{FORMAT}|k{min(config.neighbours_k, n - 1)}|{config.min_ngram_cosine!r}|d{config.ngram_dim}|{lists}"


def ngram_hits(keys: list[str], config, before: NgramHits | None = None, old_keys: list[str] | None = None) -> NgramHits:
    """The hits of sorted `keys`; from `before` (the hits of the sorted `old_keys`) where it
    can, searching again only the keys whose hits the change can reach. Both lists sorted: the
    ties broken by row then fall the same way in both numberings."""
    n, k = len(keys), min(config.neighbours_k, len(keys) - 1)
    space = CountSpace(ngram_counts(keys, config.ngram_dim))
    hashes = row_hashes(space.vectors) if n > EXACT_UP_TO else None
    centroids = hashed_centroids(hashes, EXACT_UP_TO) if hashes is not None else None
    now = settings(config, n)
    plan = None
    if before is not None and old_keys is not None and k >= 1 and before.settings == now and before.keys == keys_digest(old_keys) \
            and before.valid(len(old_keys), k):
        plan = _to_search(before, old_keys, keys, space, centroids, hashes, k, config)
    rows, kept, lists = plan if plan is not None else (None, None, None)
    scores, idx = count_neighbours(space, k, centroids, rows, lists)
    rows = np.arange(n) if rows is None else rows
    good = np.isfinite(scores) & (scores >= config.min_ngram_cosine)
    row, hit, score = np.repeat(rows, good.sum(axis=1)), idx[good], scores[good]
    if kept is not None:
        row, hit, score = (np.concatenate(p) for p in zip((row, hit, score), kept))
    return NgramHits(row, hit, score, keys_digest(keys), now, len(rows))


def _to_search(before: NgramHits, old_keys: list[str], keys: list[str], space: CountSpace, centroids: np.ndarray | None,
               hashes: np.ndarray | None, k: int, config) -> tuple[np.ndarray, tuple, np.ndarray | None] | None:
    """(the keys to search again, the hits of the others as (row, hit, score) in the new
    numbering, each key's IVF list if the centroids changed), or None where every key is to be
    searched. `hashes`: the keys' row_hashes (None for a flat search)."""
    old, new = pa.array(old_keys, pa.string()), pa.array(keys, pa.string())
    new_of_old = to_numpy(pc.fill_null(pc.index_in(old, value_set=new), -1), np.int64)
    added = np.flatnonzero(~to_numpy(pc.is_in(new, value_set=old), bool))
    removed = np.flatnonzero(new_of_old < 0)
    n, n_old = len(keys), len(old_keys)
    if len(added) + len(removed) > REFRESH_SHARE * n:
        return None
    search = np.zeros(n, bool)
    search[added] = True
    left = np.zeros(n_old, bool)  # old rows that left the lists they were in
    left[removed] = True
    came = added  # rows now in lists they were not in
    kept_old = new_of_old >= 0
    lists = None
    if centroids is not None:
        moved, reprobed, lists = _centroid_change(space, centroids, hashes, old_keys, removed, new_of_old, config)
        search |= reprobed
        stayed = np.flatnonzero(kept_old)
        left[stayed] |= moved[new_of_old[stayed]]
        came = np.union1d(added, np.flatnonzero(moved))
    # each kept key's threshold: its k-th hit's score where it has k hits, else min_ngram_cosine
    count = np.bincount(before.row, minlength=n_old)
    kth = np.full(n_old, np.inf)
    np.minimum.at(kth, before.row, before.score)
    threshold = np.full(n, np.inf)
    threshold[new_of_old[kept_old]] = np.where(count >= k, kth, config.min_ngram_cosine)[kept_old]
    lost = before.row[left[before.hit]]
    search[new_of_old[lost[new_of_old[lost] >= 0]]] = True
    for s in range(0, len(came), 64):  # [n, 64] cosines at a time
        search |= (space.cosines(None, came[s:s + 64]) >= threshold[:, None]).any(axis=1)
    if search.sum() > SEARCH_SHARE * n:
        return None
    stay = kept_old[before.row] & ~search[np.maximum(new_of_old[before.row], 0)]
    kept = (new_of_old[before.row[stay]], new_of_old[before.hit[stay]], before.score[stay])
    return np.flatnonzero(search), kept, lists


def _centroid_change(space: CountSpace, centroids: np.ndarray, hashes: np.ndarray, old_keys: list[str], removed: np.ndarray,
                     new_of_old: np.ndarray, config) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(rows whose list changed, rows whose probes changed, every row's list) when the centroids
    did; none and None else. The old key set's centroids are found as the last run found them
    (the same hash of the same vectors: the kept keys' `hashes`, the removed keys' made again)."""
    n = len(space)
    gone = CountSpace(ngram_counts([old_keys[i] for i in removed.tolist()], config.ngram_dim))
    old_hashes = np.empty(len(old_keys), np.uint64)
    old_hashes[new_of_old >= 0] = hashes[new_of_old[new_of_old >= 0]]
    old_hashes[removed] = row_hashes(gone.vectors)
    old_centroids = hashed_centroids(old_hashes, EXACT_UP_TO)
    as_new = new_of_old[old_centroids]  # -1: a removed key
    nothing = np.zeros(n, bool)
    if np.array_equal(as_new, centroids):
        return nothing, nothing, None
    p = min(IVF_PROBES, len(centroids))
    kept_c, gone_c = old_centroids[as_new >= 0], np.searchsorted(removed, old_centroids[as_new < 0])
    came_c = np.flatnonzero(~np.isin(centroids, as_new))  # positions among the new centroids
    left_c = np.flatnonzero(~np.isin(as_new, centroids))  # positions among the old ones
    moved, reprobed, lists = nothing.copy(), nothing.copy(), np.empty(n, np.int64)
    for s in range(0, n, BLOCK):
        rows = np.arange(s, min(s + BLOCK, n))
        # each row's ranks of the old centroids, in the old order: the kept ones, then the removed ones
        ranks_old = np.empty((len(rows), len(old_centroids)), np.float32)
        ranks_old[:, as_new >= 0] = space.centroid_ranks(rows, new_of_old[kept_c])
        ranks_old[:, as_new < 0] = space.centroid_ranks(rows, gone_c, gone)
        ranks_new = space.centroid_ranks(rows, centroids)
        pth = -np.partition(-ranks_old, p - 1, axis=1)[:, p - 1]  # the last probe's rank, before
        reprobed[rows] = (ranks_new[:, came_c] >= pth[:, None]).any(axis=1) | (ranks_old[:, left_c] >= pth[:, None]).any(axis=1)
        lists[rows] = list_of(ranks_new)
        moved[rows] = as_new[list_of(ranks_old)] != centroids[lists[rows]]  # old list as a row of the new numbering (-1: gone)
    return moved, reprobed, lists

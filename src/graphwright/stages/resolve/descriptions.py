"""Resolve: merged descriptions. Each entity and relationship keeps its distinct descriptions,
most frequent first and then in corpus order, within a character budget. Rows hold a 64-bit
hash of their description; the texts are read again only for the descriptions a row keeps."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graphwright.stages.resolve.codes import Scan, text_hashes
from graphwright.util.numeric import pair_order, sorted_index, to_numpy, unique, unique_inverse


def ordered_descriptions(descriptions: list[tuple[object, str]]) -> list[str]:
    """Distinct descriptions, most frequent first, then in corpus order (`position`). Corpus
    order keeps a description stable when later documents add mentions (new text sorts last),
    which is what lets an update reuse reports."""
    counts = Counter(d for _, d in descriptions if d)
    first = {}
    for position, d in sorted((p, d) for p, d in descriptions if d):
        first.setdefault(d, position)
    return sorted(counts, key=lambda d: (-counts[d], first[d], d))


def merge_descriptions(descriptions: list[tuple[object, str]], max_chars: int) -> str:
    """The ordered distinct descriptions, concatenated within a character budget. (The reference
    for `_descriptions`, which computes this for every entity at once.)"""
    out, used = [], 0
    for d in ordered_descriptions(descriptions):
        if out and used + len(d) + 1 > max_chars:
            break
        out.append(d)
        used += len(d) + 1
    return " ".join(out)[:max_chars]


class Texts:
    """Descriptions by their 64-bit hash: one Arrow array in hash order (as a dict of Python
    strings, the texts a million chunks' relationships keep took several GB)."""

    def __init__(self, hashes: np.ndarray, texts: pa.Array):
        self.hashes, self.texts = hashes, texts  # hashes sorted and distinct

    def take(self, wanted: np.ndarray) -> pa.Array:
        at = sorted_index(self.hashes, wanted)
        if np.any(at < 0):
            raise KeyError("a description that was not fetched")
        return self.texts.take(pa.array(at))


def fetch_texts(scan: Scan, wanted: np.ndarray) -> Texts:
    """The description with each hash in `wanted` (a second pass, keeping only those)."""
    found_hashes, found_texts = [np.empty(0, np.int64)], [pa.array([], pa.string())]
    wanted = unique(wanted) if len(wanted) else wanted
    for batch in scan(["description"]) if len(wanted) else ():
        distinct = batch.column("description").dictionary_encode().dictionary
        hashes = text_hashes(distinct.to_pylist())
        found = wanted[np.minimum(np.searchsorted(wanted, hashes), len(wanted) - 1)] == hashes  # (np.isin re-sorts `wanted` per batch)
        if found.any():
            found_hashes.append(hashes[found])
            found_texts.append(distinct.filter(pa.array(found)))
    hashes = np.concatenate(found_hashes)
    order = np.argsort(hashes, kind="stable")  # the first text met with each hash, as before
    order = order[np.r_[True, hashes[order][1:] != hashes[order][:-1]]] if len(order) else order
    return Texts(hashes[order], pa.concat_arrays(found_texts).take(pa.array(order)))


class DescriptionPlan:
    """merge_descriptions for every group at once, from (group, description hash, length, rank)
    per row: distinct descriptions ordered by mentions, then earliest rank, then text, and
    kept while they fit `max_chars`. The order is computed on hashes; only the descriptions that
    can be kept (and those tied with the last kept one, whose text decides the order) are read."""

    def __init__(self, group: np.ndarray, hashes: np.ndarray, lengths: np.ndarray, rank: np.ndarray, n_groups: int,
                 max_chars: int, want_overflow: bool):
        self.n_groups, self.max_chars = n_groups, max_chars
        present = (group >= 0) & (lengths > 0)  # group -1: a row no group takes
        at = np.flatnonzero(present)  # each row's place in the arguments, to say where a text is
        g, h, r = group[present], hashes[present], rank[present]
        # by group, then hash (rows alike in both in any order: they are counted and their
        # earliest rank taken): one sort of a key with the hashes ranked densely, about half of
        # np.lexsort's time (the 7.7M rows of the hubs a 0.1% update rebuilds at 1.2M chunks),
        # its order made by two counting passes (pair_order), not by np.argsort
        distinct, h_rank = unique_inverse(h)
        order = pair_order(g, h_rank, max(n_groups, 1), max(len(distinct), 1))
        g, h, r, length, at = g[order], h[order], r[order], lengths[present][order].astype(np.int64), at[order]
        firsts = np.flatnonzero(np.r_[True, (g[1:] != g[:-1]) | (h[1:] != h[:-1])]) if len(g) else np.empty(0, np.int64)
        count = np.diff(np.r_[firsts, len(g)])
        earliest = np.minimum.reduceat(r, firsts) if len(g) else firsts
        g, h, length, at = g[firsts], h[firsts], length[firsts], at[firsts]
        order = np.lexsort((h, earliest, -count, g))
        self.g, self.h, self.count, self.earliest = g[order], h[order], count[order], earliest[order]
        self.at = at[order]  # a row holding each (group, description)
        cost = length[order] + 1
        self.start = np.searchsorted(self.g, np.arange(n_groups + 1))
        spent = np.cumsum(cost)
        before = np.r_[0, spent][self.start[:-1]]
        within = spent - before[self.g] if len(self.g) else spent
        keep = (within <= max_chars) | (np.arange(len(self.g)) == self.start[self.g])
        # a tie on (mentions, earliest) is broken by the text: read every description tied with
        # a group's last kept one (a kept prefix never reaches past that tie)
        new_tie = np.r_[True, (self.g[1:] != self.g[:-1]) | (self.count[1:] != self.count[:-1])
                        | (self.earliest[1:] != self.earliest[:-1])] if len(self.g) else np.empty(0, bool)
        tie = np.cumsum(new_tie) - 1
        last_kept = np.full(n_groups, -1, dtype=np.int64)
        np.maximum.at(last_kept, self.g[keep], tie[keep])
        self.candidate = tie <= last_kept[self.g]
        totals = spent[self.start[1:] - 1] - before - 1 if len(self.g) else np.zeros(n_groups, np.int64)
        self.over = np.flatnonzero((self.start[1:] > self.start[:-1]) & (totals > max_chars)) if want_overflow else np.empty(0, np.int64)
        self.candidate |= np.isin(self.g, self.over)

    def needed(self) -> np.ndarray:
        return self.h[self.candidate]

    def needed_at(self) -> np.ndarray:
        """For each of needed()'s hashes, a row holding it (its place among the rows given)."""
        return self.at[self.candidate]

    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.g, self.h, self.count, self.earliest, self.at, self.start, self.candidate, self.over))

    def _ordered(self, texts: Texts, rows: np.ndarray) -> pa.Table:
        """The given rows with their texts, in exact order (group, -mentions, earliest, text)."""
        return pa.table({"g": self.g[rows], "c": -self.count[rows], "e": self.earliest[rows],
                         "d": texts.take(self.h[rows])}).sort_by(
            [("g", "ascending"), ("c", "ascending"), ("e", "ascending"), ("d", "ascending")])

    def merge(self, texts: Texts, cut: bool = True) -> pa.Array:
        """Per group, its kept descriptions joined by spaces (and cut to max_chars)."""
        rows = self._ordered(texts, np.flatnonzero(self.candidate))
        g = to_numpy(rows.column("g"), np.int64)
        start = np.searchsorted(g, np.arange(self.n_groups + 1))
        spent = np.cumsum(to_numpy(pc.utf8_length(rows.column("d")), np.int64) + 1)
        within = spent - np.r_[0, spent][start[:-1]][g] if len(g) else spent
        keep = (within <= self.max_chars) | (np.arange(len(g)) == start[g])
        offsets = np.r_[0, np.cumsum(np.bincount(g[keep], minlength=self.n_groups))]
        kept = pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), rows.column("d").filter(pa.array(keep)).combine_chunks())
        joined = pc.binary_join(kept, " ")
        return pc.utf8_slice_codeunits(joined, 0, self.max_chars) if cut else joined

    def overflow(self, texts: Texts) -> dict[int, list[str]]:
        """The ordered descriptions of each group over the budget."""
        rows = self._ordered(texts, np.flatnonzero(np.isin(self.g, self.over)))
        out: dict[int, list[str]] = {}
        for g, d in zip(rows.column("g").to_pylist(), rows.column("d").to_pylist()):
            out.setdefault(g, []).append(d)
        return out

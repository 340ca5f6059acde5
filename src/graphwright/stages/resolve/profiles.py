"""What linking knows of each name key (mentions, types, chunks, related keys), held as arrays.

A key's KeyProfile is made when first asked for: linking scores the candidate pairs whose
profiles changed, and an update's changed pairs name a part of the keys, not all of them (at
145k chunks, making all 41k profiles was 0.6 s of every update). Fingerprints of every key
(pair_cache) come from the arrays."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import numpy as np

from graphwright.stages.resolve.codes import group_sums
from graphwright.stages.resolve.pair_cache import mix, set_hashes, stable_hashes
from graphwright.stages.resolve.scoring import CodeSet, KeyProfile
from graphwright.util.numeric import grouped_distinct
from graphwright.util.threads import in_thread


class Profiles(Mapping):
    """{key: KeyProfile} over `keys` (sorted), each made on first access and kept (so a `text`
    set on it stays)."""

    def __init__(self, keys: list[str], mentions: np.ndarray, types: tuple[np.ndarray, np.ndarray, np.ndarray],
                 type_names: list[str], chunks: tuple[np.ndarray, np.ndarray], neighbours: tuple[np.ndarray, np.ndarray]):
        self.keys, self.mentions, self.type_names = keys, mentions, type_names
        self.type_key, self.type_code, self.type_count = types  # sorted by key, then type
        self.type_bounds = np.searchsorted(self.type_key, np.arange(len(keys) + 1))
        self.chunk_codes, self.chunk_bounds = chunks
        self.neighbour_codes, self.neighbour_bounds = neighbours
        self._index = {k: i for i, k in enumerate(keys)}
        self._made: dict[str, KeyProfile] = {}

    def __getitem__(self, key: str) -> KeyProfile:
        made = self._made.get(key)
        if made is None:
            i = self._index[key]
            lo, hi = self.type_bounds[i], self.type_bounds[i + 1]
            made = self._made[key] = KeyProfile(
                key, int(self.mentions[i]),
                {self.type_names[t]: int(n) for t, n in zip(self.type_code[lo:hi].tolist(), self.type_count[lo:hi].tolist())},
                CodeSet(self.chunk_codes[self.chunk_bounds[i]:self.chunk_bounds[i + 1]]),
                CodeSet(self.neighbour_codes[self.neighbour_bounds[i]:self.neighbour_bounds[i + 1]]), code=i)
        return made

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys)

    def __len__(self) -> int:
        return len(self.keys)

    def made(self) -> int:
        """How many KeyProfiles were made."""
        return len(self._made)

    def fingerprints(self, chunk_hash: np.ndarray, texts: list[str] | None) -> dict[str, int]:
        """Per key, a hash of everything its KeyProfile holds (pair_cache.profile_fingerprints):
        key, mentions, types, chunks (`chunk_hash`: the stable hash of each chunk code), related
        keys, and `texts` when given."""
        n = len(self.keys)
        key_hash = stable_hashes(self.keys)
        types = [[] for _ in range(n)]
        for k, t, c in zip(self.type_key.tolist(), self.type_code.tolist(), self.type_count.tolist()):
            types[k].append((self.type_names[t], int(c)))
        type_text = [repr(sorted(ts)) for ts in types]

        def sets(codes: np.ndarray, bounds: np.ndarray, item_hash: np.ndarray) -> np.ndarray:
            owner = np.repeat(np.arange(n), np.diff(bounds))
            return set_hashes(owner, item_hash[codes[bounds[0]:bounds[-1]]], n)

        parts = [key_hash, self.mentions.astype(np.int64), stable_hashes(type_text),
                 sets(self.chunk_codes, self.chunk_bounds, chunk_hash), sets(self.neighbour_codes, self.neighbour_bounds, key_hash)]
        if texts is not None:
            parts.append(stable_hashes(texts))
        return dict(zip(self.keys, mix(*parts).tolist()))


def key_profiles(keys: list[str], m_key, m_count, m_type, type_names: list[str], m_chunk, src, tgt, keep, step: int) -> Profiles:
    """What linking knows of each key: mentions, types, chunks (as codes) and related keys (from
    the assertions `keep` marks, `step` rows at a time). The related keys (a sort of the
    assertions' pairs) are found in a thread while the mentions are counted and their chunks
    sorted: numpy's sorts release the GIL."""
    k = len(keys)
    neighbours = in_thread(key_neighbours, k, src, tgt, keep, step, name="resolve-neighbours")
    mentions = np.bincount(m_key, weights=m_count, minlength=k).astype(np.int64)
    types = group_sums(m_key, m_type, m_count, max(len(type_names), 1))
    return Profiles(keys, mentions, types, type_names, key_chunks(k, m_key, m_chunk), neighbours.result())


def key_chunks(k: int, m_key: np.ndarray, m_chunk: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each of the `k` keys' distinct chunk codes: (codes, bounds), key i's a slice."""
    indptr, codes = grouped_distinct(m_key, m_chunk, k, int(m_chunk.max()) + 1 if len(m_chunk) else 1)
    return codes, indptr


def key_neighbours(k: int, src, tgt, keep, step: int) -> tuple[np.ndarray, np.ndarray]:
    """Each of the `k` keys' related keys, both directions: (codes, bounds), key i's a slice."""
    lo, hi = [np.empty(0, np.int64)], [np.empty(0, np.int32)]
    for o in range(0, len(src), step):  # each related pair once, a slice of assertions at a time
        s, t = src[o:o + step][keep[o:o + step]], tgt[o:o + step][keep[o:o + step]]
        bounds, codes = grouped_distinct(np.minimum(s, t), np.maximum(s, t), k, k)
        lo.append(np.repeat(np.arange(k), np.diff(bounds)))
        hi.append(codes)
    lo, hi = np.concatenate(lo), np.concatenate(hi)
    bounds, codes = grouped_distinct(np.concatenate([lo, hi]), np.concatenate([hi, lo]), k, k)
    return codes, bounds

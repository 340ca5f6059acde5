"""The chunks that support a community's rows (its text unit candidates), counted as codes.

The members' chunk lists arrive as Arrow list columns and are coded once against their sorted
distinct ids, never turned into Python strings: at 1.2M chunks the lists of the members of the
communities an update plans are millions of ids, and a hub entity's list alone is 461k. A
community's support is then a sort of its members' codes."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graphwright.util.numeric import sorted_dictionary, to_numpy, unique


DENSE = 8  # a community whose items are at least 1/DENSE of the chunks counts them with bincount


@dataclass
class Support:
    """Chunk lists of entities and relationships by id, as codes into `names` (the chunk ids,
    sorted, so that codes sort as the ids do)."""

    names: pa.Array
    entities: dict[str, np.ndarray]
    relationships: dict[str, np.ndarray]

    @classmethod
    def of(cls, entities: pa.Table | None, relationships: pa.Table | None) -> Support:
        """From (entity_id, chunk_ids) and (relationship_id, chunk_ids) tables (None: none)."""
        tables = [t if t is not None else pa.table({"id": pa.array([], pa.string()), "chunk_ids": pa.array([], pa.list_(pa.string()))})
                  for t in (entities, relationships)]
        lists = [t.column("chunk_ids").combine_chunks() for t in tables]
        values = pa.concat_arrays([pc.list_flatten(x).cast(pa.string()) for x in lists])
        codes, names = sorted_dictionary(values)
        out, start = [], 0
        for table, x in zip(tables, lists):
            ends = start + np.cumsum(to_numpy(pc.fill_null(pc.list_value_length(x), 0), np.int64))
            starts = np.r_[start, ends[:-1]] if len(ends) else ends
            keys = table.column(0).to_pylist()
            out.append({k: codes[a:b] for k, a, b in zip(keys, starts.tolist(), ends.tolist())})
            start = int(ends[-1]) if len(ends) else start
        return cls(names, *out)

    @classmethod
    def of_lists(cls, entities: dict[str, list[str]], relationships: dict[str, list[str]]) -> Support:
        """From {id: chunk ids} of entities and of relationships."""
        def table(lists: dict) -> pa.Table:
            return pa.table({"id": pa.array(list(lists), pa.string()), "chunk_ids": pa.array(list(lists.values()), pa.list_(pa.string()))})
        return cls.of(table(entities), table(relationships))

    def _codes(self, community: dict) -> np.ndarray:
        parts = [self.relationships[r] for r in community["relationship_ids"] if r in self.relationships]
        parts += [self.entities[e] for e in community["entity_ids"] if e in self.entities]
        return np.concatenate(parts) if parts else np.zeros(0, np.int32)

    def top(self, community: dict, n: int) -> list[str]:
        """The community's `n` chunks that support most of its rows (ties by id)."""
        codes = self._codes(community)
        if n <= 0 or not len(codes):
            return []
        if len(codes) * DENSE >= len(self.names):  # a hub's community: counted in place, not sorted
            counts = np.bincount(codes)
            chunk = np.flatnonzero(counts)
            count = counts[chunk]
        else:
            ordered = np.sort(codes)
            first = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
            chunk, count = ordered[first], np.diff(np.r_[first, len(ordered)])
        if len(chunk) > n:  # only those counted at least as often as the n-th most are ranked
            # (the counts are small: how many chunks have each count, summed from the top, says
            # the n-th largest, where a partition of each community's counts took 0.85 s of an update)
            at_least = np.cumsum(np.bincount(count)[::-1])
            floor = len(at_least) - 1 - int(np.searchsorted(at_least, n))
            keep = count >= floor
            chunk, count = chunk[keep], count[keep]
        pick = np.lexsort((chunk, -count))[:n]
        return self.names.take(pa.array(chunk[pick])).to_pylist()

    def distinct(self, entity_ids: Iterable[str]) -> int:
        """How many distinct chunks these entities are mentioned in."""
        parts = [self.entities[e] for e in entity_ids if e in self.entities]
        return len(unique(np.concatenate(parts))) if parts else 0


Lineage = Callable[[set[str], set[str]], Support]

"""Coded lineage: each entity's and each relationship's chunk list as integer codes into one
sorted list of chunk ids, written by resolve beside the tables it writes, for the stages after it.

The lists are the entities' and relationships' `chunk_ids` columns. At 1.2M chunks they hold
18M ids, and the hub entities that every update rebuilds hold most of them: cluster (community
chunk counts), report (text unit support) and embed (the passage graph's mention edges) each
read those lists again and coded them against the chunk ids, 3-6 s each in a 0.1% update.
Resolve has them as codes already; here they are 72 MB of int32, read in one get.

A lineage is valid for the table versions it names. A reader asks for the versions it reads,
and reads the tables when the lineage is for other versions or absent (an index written before
it, or a table written since by something else than resolve). Each lineage is its own folder,
named by its versions, with meta.json put last: a reader never sees half of one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graphwright import ids
from graphwright.util.numeric import grouped_distinct, spans, to_numpy

ROOT = "state/lineage"
FORMAT = 1
TABLES = ("entities", "relationships")


@dataclass
class Lineage:
    """`chunk_ids` sorted (a code is a position in it); `entity_ids` sorted; an entity's codes are
    entity_codes[entity_indptr[i]:entity_indptr[i + 1]], sorted and distinct, as its chunk_ids
    list is. Relationships are `pairs`, lo * len(entity_ids) + hi on their endpoints' positions
    (sorted), with their codes in the same way."""

    chunk_ids: pa.Array
    entity_ids: pa.Array
    entity_indptr: np.ndarray
    entity_codes: np.ndarray
    pairs: np.ndarray
    relationship_indptr: np.ndarray
    relationship_codes: np.ndarray
    versions: dict[str, int | None]

    def entity_chunk_ids(self, positions: np.ndarray, limit: int | None = None) -> pa.ListArray:
        """The chunk_ids lists of the entities at these positions (in `entity_ids`), in their order
        (with `limit`, each list's first ids only)."""
        return _list_array(self.entity_indptr, self.entity_codes, positions, self.chunk_ids, limit)

    def relationship_chunk_ids(self, positions: np.ndarray, limit: int | None = None) -> pa.ListArray:
        """The chunk_ids lists of the relationships at these positions (in `pairs`), in their order
        (with `limit`, each list's first ids only)."""
        return _list_array(self.relationship_indptr, self.relationship_codes, positions, self.chunk_ids, limit)

    def entity_positions(self, entity_ids) -> np.ndarray:
        """Each id's position in `entity_ids` (-1 where it holds none)."""
        wanted = entity_ids if isinstance(entity_ids, (pa.Array, pa.ChunkedArray)) else pa.array(entity_ids, pa.string())
        return to_numpy(pc.fill_null(pc.index_in(wanted, value_set=self.entity_ids), -1), np.int64)

    def relationship_positions(self, source_ids, target_ids) -> np.ndarray:
        """Each relationship's position in `pairs`, found by its endpoints (-1 where it holds none)."""
        ends = self.entity_positions(source_ids), self.entity_positions(target_ids)
        lo, hi = np.minimum(*ends), np.maximum(*ends)
        code = lo * max(len(self.entity_ids), 1) + hi
        at = np.minimum(np.searchsorted(self.pairs, code), max(len(self.pairs) - 1, 0))
        found = (lo >= 0) & (self.pairs[at] == code) if len(self.pairs) else np.zeros(len(code), bool)
        return np.where(found, at, -1)

    def entity_items(self) -> tuple[np.ndarray, np.ndarray]:
        """(entity position, chunk code) of every item of every entity's list."""
        lengths = np.diff(self.entity_indptr)
        return np.repeat(np.arange(len(lengths), dtype=np.int32), lengths), self.entity_codes

    def entity_lists(self, entity_ids) -> dict[str, np.ndarray]:
        """{entity id: its codes} of those of `entity_ids` it holds."""
        wanted = pa.array(sorted(entity_ids), pa.string())
        at = self.entity_positions(wanted)
        return {e: self.entity_codes[self.entity_indptr[i]:self.entity_indptr[i + 1]]
                for e, i in zip(wanted.to_pylist(), at.tolist()) if i >= 0}

    def relationship_lists(self, relationship_ids: list[str], source_ids: list[str], target_ids: list[str]) -> dict[str, np.ndarray]:
        """{relationship id: its codes} of those it holds, found by their endpoints."""
        at = self.relationship_positions(source_ids, target_ids)
        return {r: self.relationship_codes[self.relationship_indptr[i]:self.relationship_indptr[i + 1]]
                for r, i in zip(relationship_ids, at.tolist()) if i >= 0}


def entity_lists(id_rank: np.ndarray, m_entity: np.ndarray, m_chunk: np.ndarray, n_chunks: int) -> tuple[np.ndarray, np.ndarray]:
    """The entities' lists (indptr, codes) from each mention's entity (an index into the entity
    ids, whose sorted position is `id_rank`) and chunk (a position among `n_chunks` sorted chunk
    ids): two counting passes over ~10M codes at 1.2M chunks (grouped_distinct), scipy's,
    without the GIL, which resolve makes while it finds the relationships."""
    return grouped_distinct(id_rank[m_entity] if len(m_entity) else m_entity, m_chunk, len(id_rank), n_chunks)


def build(chunk_ids: pa.Array, entity_ids: list[str], id_rank: np.ndarray, entities: tuple[np.ndarray, np.ndarray],
          pairs: np.ndarray, a_pair: np.ndarray, a_chunk: np.ndarray) -> Lineage:
    """From resolve's codes: the entities' lists (entity_lists; `entity_ids`' sorted position is
    `id_rank`), and each supporting assertion's relationship (an index into `pairs`) and chunk (a
    position in the sorted `chunk_ids`)."""
    order = np.argsort(id_rank)
    by_rank = pa.array(entity_ids, pa.string()).take(pa.array(order)) if len(entity_ids) else pa.array([], pa.string())
    rel_indptr, rel_codes = grouped_distinct(a_pair, a_chunk, len(pairs), len(chunk_ids))
    return Lineage(chunk_ids, by_rank, *entities, pairs.astype(np.int64), rel_indptr, rel_codes, {})


def _list_array(indptr: np.ndarray, codes: np.ndarray, positions: np.ndarray, names: pa.Array,
                limit: int | None = None) -> pa.ListArray:
    positions = np.asarray(positions, np.int64)
    starts, lengths = indptr[positions], indptr[positions + 1] - indptr[positions]
    if limit is not None:
        lengths = np.minimum(lengths, limit)
    offsets = np.r_[0, np.cumsum(lengths)]
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), names.take(pa.array(codes[spans(starts, lengths)])))


def folder(versions: dict[str, int | None]) -> str:
    return f"{ROOT}/{ids.stable_id('lineage', FORMAT, *sorted(versions.items()), length=16)}"


def write(files, lineage: Lineage, versions: dict[str, int | None]) -> None:
    """Save `lineage` as that of these table versions, then drop every other one."""
    where = folder(versions)
    lineage.versions = versions
    files.write_arrays(f"{where}/codes.npz", entity_indptr=lineage.entity_indptr, entity_codes=lineage.entity_codes,
                       pairs=lineage.pairs, relationship_indptr=lineage.relationship_indptr,
                       relationship_codes=lineage.relationship_codes)
    for name, ids_ in (("chunks", lineage.chunk_ids), ("entities", lineage.entity_ids)):
        files.write_table(f"{where}/{name}.arrow", pa.table({"id": ids_}))
    files.write_bytes(f"{where}/meta.json", json.dumps({"format": FORMAT, "versions": versions}).encode())
    for path in files.list(ROOT):
        if not path.startswith(where + "/"):
            files.delete(path)
    _last[:] = [(str(files.location), where, lineage)]


# the lineage this process wrote or read last, by (index, folder): one run's cluster, report and
# embed read the one its resolve wrote (a folder's content is a function of the versions it names)
_last: list[tuple[str, str, Lineage]] = []


def read(files, versions: dict[str, int | None]) -> Lineage | None:
    """The lineage of these table versions; None when there is none (the caller reads the lists)."""
    where = folder(versions)
    try:
        meta = json.loads(files.read_bytes(f"{where}/meta.json"))
        if meta.get("format") != FORMAT or meta.get("versions") != versions:
            return None
        for location, path, known in _last:
            if location == str(files.location) and path == where:
                return known
        arrays = files.read_arrays(f"{where}/codes.npz")
        chunk_ids, entity_ids = (files.read_table(f"{where}/{n}.arrow").column("id").combine_chunks() for n in ("chunks", "entities"))
    except Exception:  # noqa: BLE001 - absent, or removed by a newer run while read: the tables say the same
        return None
    lineage = Lineage(chunk_ids, entity_ids, arrays["entity_indptr"], arrays["entity_codes"], arrays["pairs"],
                      arrays["relationship_indptr"], arrays["relationship_codes"], versions)
    _last[:] = [(str(files.location), where, lineage)]
    return lineage


def current(store, pins: dict[str, int] | None = None) -> Lineage | None:
    """The lineage of the tables' versions now (or at `pins`)."""
    pins = pins or {}
    return read(store.files, {t: pins.get(t, store.version(t)) for t in TABLES})

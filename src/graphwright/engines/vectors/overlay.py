"""A large vector index kept as a base file and a small overlay, so that an update writes files
in proportion to what changed (as Lucene's segments and Milvus's growing segments do).

The base is a published faiss index (its .faiss and .ids.parquet files), never rewritten. An
overlay is one parquet file beside it: the vectors of the items the base lacks or holds with an
older text (searched exactly), the keys (item id and text hash) of the base's items that are gone
or changed (skipped), and the base's path in its metadata. Removals are keys, not positions, so
an overlay stays right over a base that a repair rebuilt with another layout (a base's name is
derived from the keys it holds). Each update writes a new overlay from the previous one, and
only reads the base's ids file, not its 2 GB of vectors. When the overlay would pass
`vectors.overlay_max_share` of the base, the update folds it into a new base instead
(vector_files.write_vector_index). A query searches both and merges by score.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from graphwright.engines.vectors import ITEM_KEY, VectorIndex, ids_path, item_keys, load_from
from graphwright.storage.diff import key_column

OVERLAY_SUFFIX = ".overlay.parquet"


def is_overlay(relative: str) -> bool:
    return relative.endswith(OVERLAY_SUFFIX)


def load_index(files, relative: str):
    """A published vector index: a base file (a VectorIndex), or an overlay read with its base (a LayeredIndex)."""
    if is_overlay(relative):
        overlay = read_overlay(files, relative)
        return LayeredIndex(load_from(files, overlay.base), overlay)
    return load_from(files, relative)


def index_files(files, relative: str) -> list[str]:
    """The files of a published vector index: a base's index and ids files; an overlay's own
    file and its base's (only its own while it is missing or unreadable: a check then names it)."""
    if is_overlay(relative):
        base = readable_base(files, relative)
        return [relative] + (index_files(files, base) if base else [])
    return [relative, ids_path(relative)]


def _read(files, relative: str) -> pa.Table:
    return pq.read_table(pa.BufferReader(files.read_bytes(relative)))


def base_of(files, relative: str) -> str:
    """The base index file an overlay lays over."""
    return pq.read_schema(pa.BufferReader(files.read_bytes(relative))).metadata[b"base"].decode()


def readable_base(files, relative: str) -> str | None:
    """base_of, or None when the overlay is missing or cannot be read."""
    try:
        return base_of(files, relative) if files.exists(relative) else None
    except (pa.ArrowException, OSError, KeyError, TypeError, AttributeError, UnicodeDecodeError):
        return None


@dataclass
class Overlay:
    base: str  # the base index's path
    removed_ids: list[str]  # the base's items skipped (with their text hash: the key)
    removed_hashes: list[str]
    ids: list[str]
    text_hashes: list[str]
    vectors: np.ndarray  # float32, a row per id

    def size(self) -> int:
        return len(self.removed_ids) + len(self.ids)


def read_overlay(files, relative: str) -> Overlay:
    """The overlay in `relative`; ValueError naming it when it cannot be read as one."""
    try:
        return _parse(_read(files, relative))
    except (pa.ArrowException, KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{relative} is not a readable vector overlay ({type(exc).__name__}: {exc})") from None


def _parse(table: pa.Table) -> Overlay:
    meta = table.schema.metadata
    gone = table.column("removed").combine_chunks()
    adds, removed = table.filter(pc.invert(gone)), table.filter(gone)
    dim = int(meta[b"dim"])
    flat = adds.column("vector").combine_chunks().flatten().to_numpy(zero_copy_only=False) if adds.num_rows else np.zeros(0, np.float32)
    return Overlay(meta[b"base"].decode(), removed.column("item_id").to_pylist(), removed.column("text_hash").to_pylist(),
                   adds.column("item_id").to_pylist(), adds.column("text_hash").to_pylist(),
                   np.asarray(flat, np.float32).reshape(adds.num_rows, dim))


def write_overlay(files, relative: str, overlay: Overlay) -> dict[str, str]:
    """Write `overlay` to `relative`; returns its sha256 (what the manifest records)."""
    import hashlib

    n, dim = len(overlay.ids), max(overlay.vectors.shape[1], 1) if overlay.vectors.ndim == 2 else 1
    vectors = pa.FixedSizeListArray.from_arrays(pa.array(overlay.vectors.reshape(-1), pa.float32()), dim)
    gone = len(overlay.removed_ids)
    table = pa.table({
        "item_id": pa.array(overlay.ids + overlay.removed_ids, pa.string()),
        "text_hash": pa.array(overlay.text_hashes + overlay.removed_hashes, pa.string()),
        "vector": pa.concat_arrays([vectors, pa.nulls(gone, vectors.type)]),
        "removed": pa.array([False] * n + [True] * gone, pa.bool_()),
    }).replace_schema_metadata({"base": overlay.base, "dim": str(dim)})
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    data = sink.getvalue().to_pybytes()
    files.write_bytes(relative, data)
    return {relative: hashlib.sha256(data).hexdigest()}


def next_overlay(files, previous: str, ids: pa.Array, text_hashes: pa.Array,
                 vectors_of: Callable[[list[str], list[str]], np.ndarray], max_share: float) -> Overlay | None:
    """The overlay that brings the published index `previous` (a base or an overlay) to the items
    `ids` whose vectors embed `text_hashes`: the base's items whose key is gone are removed,
    and every item the base's live positions lack is in the overlay (its vector taken from the
    previous overlay when it was there, else from `vectors_of(ids, text hashes)`). None when the base has no text
    hashes or the overlay would pass `max_share` of the base: then the index is folded."""
    old = read_overlay(files, previous) if is_overlay(previous) else None
    base = old.base if old else previous
    base_ids = _read(files, ids_path(base))
    if "text_hash" not in base_ids.column_names:
        return None
    now = item_keys(ids, text_hashes)
    before = key_column(base_ids, ITEM_KEY)
    # a position an in-place update removed has a null key: the base's ids already skip it.
    # One lookup of the items in the base answers both questions (each lookup hashes its value
    # set: two of 1.3M keys were 1 s an update at 1.2M chunks)
    held = pc.is_valid(before).to_numpy(zero_copy_only=False)
    at = pc.index_in(now, value_set=before)
    alive = np.zeros(len(before), dtype=bool)
    alive[at.drop_null().to_numpy(zero_copy_only=False)] = True
    removed = pa.array(held & ~alive)
    missing = pc.is_null(at)
    add_ids = pa.array(ids, pa.string()).filter(missing)
    add_hashes = pa.array(text_hashes, pa.string()).filter(missing)
    # counted in numpy: Arrow's sum of an empty base (a kind with no items yet) is null
    if int(np.count_nonzero(held & ~alive)) + len(add_ids) > max_share * int(held.sum()):
        return None
    vectors = np.zeros((0, 1), np.float32)
    if len(add_ids):
        add_keys = item_keys(add_ids, add_hashes)
        at = np.full(len(add_ids), -1, np.int64)
        if old is not None and old.ids:  # still current in the previous overlay: its vector is there
            at = pc.index_in(add_keys, value_set=item_keys(old.ids, old.text_hashes)).fill_null(-1).to_numpy(zero_copy_only=False)
        fresh = np.flatnonzero(at < 0)
        got = vectors_of(add_ids.take(pa.array(fresh)).to_pylist(), add_hashes.take(pa.array(fresh)).to_pylist()) if len(fresh) else None
        vectors = np.zeros((len(add_ids), got.shape[1] if got is not None else old.vectors.shape[1]), np.float32)
        if old is not None:
            vectors[at >= 0] = old.vectors[at[at >= 0]]
        if got is not None:
            vectors[fresh] = got
    return Overlay(base, base_ids.column("item_id").combine_chunks().filter(removed).to_pylist(),
                   base_ids.column("text_hash").combine_chunks().filter(removed).to_pylist(),
                   add_ids.to_pylist(), add_hashes.to_pylist(), vectors)


class LayeredIndex:
    """A base VectorIndex with an overlay: `ids` and `text_hashes` per position (the base's,
    removed ones None, then the overlay's), search over both merged by score."""

    def __init__(self, base, overlay: Overlay):
        import faiss

        if base.text_hashes is None:
            raise ValueError(f"the base {overlay.base} of a vector overlay records no text hashes")
        skip = pc.is_in(item_keys(base.ids, base.text_hashes), value_set=item_keys(overlay.removed_ids, overlay.removed_hashes))
        skip = pc.fill_null(skip, False).to_numpy(zero_copy_only=False)
        base_ids = [None if s else i for i, s in zip(base.ids, skip)]
        self.base = VectorIndex(base_ids, base.index, [None if s else h for h, s in zip(base.text_hashes, skip)])
        top = faiss.IndexFlatIP(overlay.vectors.shape[1] if len(overlay.ids) else base.index.d)
        if len(overlay.ids):
            top.add(np.ascontiguousarray(overlay.vectors, dtype=np.float32))
        self.top = VectorIndex(list(overlay.ids), top, list(overlay.text_hashes))
        self.ids = self.base.ids + self.top.ids
        self.text_hashes = self.base.text_hashes + self.top.text_hashes

    def search(self, queries: np.ndarray, k: int) -> list[list[tuple[str, float]]]:
        merged = []
        for a, b in zip(self.base.search(queries, k), self.top.search(queries, k)):
            merged.append(sorted(a + b, key=lambda t: (-t[1], t[0]))[:k])
        return merged

    def reconstruct(self, position: int) -> np.ndarray:
        n = len(self.base.ids)
        return self.base.reconstruct(position) if position < n else self.top.reconstruct(position - n)

    def vectors(self, positions) -> np.ndarray:
        positions = np.asarray(positions, dtype=np.int64)
        n = len(self.base.ids)
        low = positions < n
        out = np.empty((len(positions), self.base.index.d), np.float32)
        if low.any():
            out[low] = self.base.vectors(positions[low])
        if not low.all():
            out[~low] = self.top.vectors(positions[~low] - n)
        return out

    def folded(self):
        """One VectorIndex: the overlay's vectors added to the base's index (what an update does
        when the overlay has grown past its share; update_index then applies to an HNSW base, and
        a flat one is rebuilt)."""
        if len(self.top.ids):
            self.base.index.add(np.ascontiguousarray(self.top.index.reconstruct_n(0, len(self.top.ids)), dtype=np.float32))
        return VectorIndex(self.ids, self.base.index, self.text_hashes)

"""Embed: synonym edges between entities whose names embed alike (HippoRAG 2): each entity's
`search_index.synonym_neighbours` nearest names by the entity-name vector index, kept where the
cosine similarity is at least `search_index.synonym_threshold` and both names have more than two
letters or digits.

Kept incremental: the published version's pairs are kept where both names are unchanged, and
only new or renamed entities are searched (similarity is symmetric, so a new name finds its
older neighbours). Written as `graph/synonyms-<digest>.parquet` (entity_id, other_id,
similarity; entity_id < other_id) with the names it covers beside it (`.covered.parquet`),
whose metadata records the settings and the embedding model the pairs were found with: pairs
found under others are not kept (a file from before they were recorded is taken as found
under the current ones).
"""

from __future__ import annotations

import json
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from graphwright import ids
from graphwright.engines.vectors.overlay import load_index
from graphwright.stages.embed.vector_files import vector_matrix
from graphwright.storage import manifest
from graphwright.storage.delta import IndexStore

MANIFEST_KEY = "synonyms"
NAME_KIND = "entity_name"  # the embeddings kind of entity names
SEARCH_BATCH = 4096
FOUND_WITH = "graphwright.found_with"  # the covered file's metadata: settings and model of the pairs


def covered_path(relative: str) -> str:
    return relative.removesuffix(".parquet") + ".covered.parquet"


def write_synonyms(store: IndexStore, cfg, model: str, name_index: str) -> str | None:
    """The synonym file for the entity-name vector index `name_index` (a path in the index's
    files), built or updated; None when synonyms are off."""
    si = cfg.search_index
    if si.synonym_threshold >= 1:
        return None
    relative = f"graph/synonyms-{ids.stable_id('synonyms', si.synonym_threshold, si.synonym_neighbours, name_index, length=16)}.parquet"
    if store.files.exists(relative):
        return relative
    vi = load_index(store.files, name_index)
    live = [(p, i, h) for p, (i, h) in enumerate(zip(vi.ids, vi.text_hashes or [""] * len(vi.ids))) if i is not None]
    names = _names(store)
    checked: dict[str, bool] = {}

    def eligible(i: str) -> bool:  # asked of the searched names and their hits, not of every name
        if i not in checked:
            checked[i] = i in names and named_enough(names[i])
        return checked[i]

    now = {i: h for _, i, h in live}
    pairs: dict[tuple[str, str], float] = {}
    found_with = {"threshold": si.synonym_threshold, "neighbours": si.synonym_neighbours, "model": model}
    previous = _published(store, found_with)
    unchanged: set[str] = set()
    if previous is not None:
        old_pairs, old_covered = previous
        unchanged = {i for i, h in zip(old_covered.column("entity_id").to_pylist(), old_covered.column("text_hash").to_pylist())
                     if now.get(i) == h}
        for a, b, s in zip(*(old_pairs.column(c).to_pylist() for c in ("entity_id", "other_id", "similarity"))):
            if a in unchanged and b in unchanged:
                pairs[(a, b)] = s
    todo = [(p, i) for p, i, _ in live if i not in unchanged and eligible(i)]
    k = min(si.synonym_neighbours + 1, len(live))
    where = f"kind = '{NAME_KIND}' AND model = '{model}'"
    for start in range(0, len(todo), SEARCH_BATCH):
        part = todo[start:start + SEARCH_BATCH]
        vectors = _query_vectors(store, vi, where, part)
        for (_, item), hits in zip(part, vi.search(vectors, k)):
            for other, score in hits:
                if other != item and score >= si.synonym_threshold and eligible(other):
                    key = (item, other) if item < other else (other, item)
                    pairs[key] = max(pairs.get(key, -1.0), round(score, 6))
    ordered = sorted(pairs.items())
    table = pa.table({"entity_id": pa.array([a for (a, _), _ in ordered], pa.string()),
                      "other_id": pa.array([b for (_, b), _ in ordered], pa.string()),
                      "similarity": pa.array([s for _, s in ordered], pa.float32())})
    covered = pa.table({"entity_id": pa.array(list(now), pa.string()), "text_hash": pa.array(list(now.values()), pa.string())})
    covered = covered.replace_schema_metadata({FOUND_WITH: json.dumps(found_with, sort_keys=True)})
    store.files.write_bytes(covered_path(relative), _parquet(covered))
    store.files.write_bytes(relative, _parquet(table))  # last: its presence means both are complete
    return relative


def named_enough(name: str) -> bool:
    """Whether a name has more than two letters or digits (shorter ones make no synonym edges)."""
    return len(re.sub(r"[\W_]", "", name)) > 2


def _query_vectors(store: IndexStore, vi, where: str, part: list[tuple[int, str]]) -> np.ndarray:
    """The vectors of `part` ((position in the name index, entity id)): the index holds them as
    the embeddings table does, so they are not read again (a scan of the names' partition, 0.2 s
    of a 0.1% update at 145k chunks); an index that cannot give them back (cuVS) has them read."""
    try:
        return vi.vectors([p for p, _ in part])
    except (AttributeError, RuntimeError):  # no reconstruct (cuVS), or one faiss refuses for this index type
        return vector_matrix(store, where, pa.chunked_array([pa.array([i for _, i in part], pa.string())]))


def read_synonyms(files, relative: str | None) -> pa.Table | None:
    if relative is None or not files.exists(relative):
        return None
    return pq.read_table(pa.BufferReader(files.read_bytes(relative)))


def _published(store: IndexStore, found_with: dict) -> tuple[pa.Table, pa.Table] | None:
    """The published version's (pairs, covered names), if they were found with `found_with`."""
    relative = manifest.published(store).get("vector_indexes", {}).get(MANIFEST_KEY)
    if relative is None or not store.files.exists(relative) or not store.files.exists(covered_path(relative)):
        return None
    covered = pq.read_table(pa.BufferReader(store.files.read_bytes(covered_path(relative))))
    recorded = (covered.schema.metadata or {}).get(FOUND_WITH.encode())
    if recorded is not None and json.loads(recorded) != found_with:
        return None
    return pq.read_table(pa.BufferReader(store.files.read_bytes(relative))), covered


def _names(store: IndexStore) -> dict[str, str]:
    ent = store.read("entities", columns=["entity_id", "name"])
    return dict(zip(ent.column("entity_id").to_pylist(), ent.column("name").to_pylist()))


def _parquet(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()


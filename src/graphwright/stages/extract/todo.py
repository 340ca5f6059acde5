"""What the extract stage has to do: the chunks to extract (with their texts) and the rows of
chunks that no longer exist, found one of two ways.

- From the tables: every chunk id against every extraction row (each file's chunk ids, read once),
  the texts of the chunks to do looked up in the chunks table. Always right, and it grows with
  the index: at 1.2M chunks the lookup of the texts alone scans every chunk's text (2.9 s).
- From the log: where the stage's tables are as its last run left them (nothing wrote them since,
  nor was a run of it interrupted), only the chunks added since then need extracting, and only
  the rows of chunks deleted since need removing: storage.changes reads the chunk files added
  since, texts included. Chunks whose extraction failed or was only repaired (status not ok) are
  retried as on the other path.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graphwright.stages.resolve.state import CODED  # the tables resolve codes per data file: their deletions name their moved rows
from graphwright.storage.changes import changes_since
from graphwright.storage.patch import delete_matching, distinct_per_file

TABLES = ("mentions", "assertions", "extractions")


@dataclass
class Work:
    texts: pa.Table  # chunk_id, doc_id, text of the chunks to extract
    retried: set[str]  # those whose last reply needed repairs (asked once more, the reply trusted)
    removed: dict[str, int]  # rows deleted per table: of chunks gone, and what earlier attempts left
    chunks: int  # the chunks table's rows
    found: str  # "log" or "tables"


def from_log(store, key: str, since: int | None) -> Work | None:
    """The work since the chunks table's version `since` (the stage's last run read it), or None
    where the log cannot say."""
    changes = changes_since(store, "chunks", since, "chunk_id", ["chunk_id", "doc_id", "text"])
    if changes is None:
        return None
    added = changes.rows.filter(pc.invert(pc.is_in(changes.rows.column("chunk_id"), value_set=changes.deleted)))
    # a rewritten file brings back rows already extracted (an edited document's unchanged chunks
    # keep their ids): those are done; unfinished ones (status not ok) are done again
    added_ids = added.column("chunk_id").combine_chunks()
    added = added.filter(pc.invert(pc.is_in(added_ids, value_set=_done_among(store, key, added_ids))))
    unfinished = _unfinished(store, key)
    ids = unfinished.column("chunk_id").combine_chunks()
    redo = ids.filter(pc.invert(pc.is_in(ids, value_set=changes.deleted)))
    columns = ["chunk_id", "doc_id", "text"]
    texts = added.select(columns)
    unread = redo.filter(pc.invert(pc.is_in(redo, value_set=added.column("chunk_id").combine_chunks())))
    if len(unread):
        texts = pa.concat_tables([texts, store.rows_in("chunks", "chunk_id", unread.to_pylist(), columns)], promote_options="permissive")
    todo = texts.column("chunk_id").combine_chunks()
    # chunks whose last reply needed repairs are asked once more, the reply trusted: read before
    # their markers go
    retried = _repaired(unfinished) if len(todo) else set()

    # rows of chunks gone, and what an unfinished chunk's last attempt left (its markers of other
    # extractors stay); any other chunk to do has none: an interrupted run would have moved the tables
    def delete(name: str) -> int:
        return delete_matching(store, name, "chunk_id", changes.deleted if name == "extractions" else pa.concat_arrays([changes.deleted, redo]),
                               record_moves=name in CODED)

    with ThreadPoolExecutor(2, thread_name_prefix="extract-delete") as pool:  # each reads every file's chunk ids, in Arrow
        removed = dict(zip(TABLES, pool.map(delete, TABLES)))
    if len(redo):
        removed["extractions"] += delete_matching(store, "extractions", "chunk_id", redo, where={"extractor": key})
    return Work(texts.sort_by("chunk_id"), retried, removed, store.count("chunks"), "log")


def from_tables(store, key: str) -> Work:
    """The work from every chunk id and every extraction row."""
    chunk_ids = store.read("chunks", columns=["chunk_id"]).column("chunk_id").combine_chunks()
    # each file's chunk ids, read once: what the tables hold, and which files a deletion rewrites
    held = {name: distinct_per_file(store, name, "chunk_id") for name in TABLES}
    have = {name: pc.unique(pa.chunked_array(list(files.values()), pa.string())) for name, files in held.items()}
    gone, todo = _against_chunks(chunk_ids, [*have.values()], _done(store, key))
    removed = {name: delete_matching(store, name, "chunk_id", g, known=held[name], record_moves=name in CODED) if g else 0
               for name, g in zip(have, gone)}
    # chunks whose last reply needed repairs (llm.py) are asked once more; the second reply is kept
    retried = _repaired(_unfinished(store, key)) if todo else set()
    # what an interrupted or failed attempt left for the chunks to do goes now, once, so that
    # their new rows can be appended (per-commit deletes and merges scan whole tables)
    todo_ids = pa.array(todo, pa.string())
    for name in ("mentions", "assertions"):
        leftover = _among(have[name], todo_ids)
        removed[name] += delete_matching(store, name, "chunk_id", leftover, record_moves=name in CODED) if leftover else 0
    if unfinished := _among(have["extractions"], todo_ids):
        store.delete_in("extractions", "chunk_id", unfinished, also=f"extractor = '{key}'")
    texts = store.rows_in("chunks", "chunk_id", todo, ["chunk_id", "doc_id", "text"])
    return Work(texts, retried, removed, len(chunk_ids), "tables")


def _done_among(store, key: str, chunk_ids: pa.Array) -> pa.Array:
    """Those of `chunk_ids` that have the extractor's marker of status ok. The markers are read
    whole but only `chunk_ids` are hashed (at 1.2M chunks, hashing the 1.2M ok markers to look up
    an update's 1,826 chunk rows was 0.4-0.6 s; this way 0.16 s, the read included)."""
    done = _done(store, key)
    return done.filter(pc.is_in(done, value_set=chunk_ids))


def _done(store, key: str) -> pa.Array:
    """The chunk ids of the extractor's markers of status ok."""
    return store.read("extractions", columns=["chunk_id"], where=f"extractor = '{key}' AND status = 'ok'").column("chunk_id").combine_chunks()


def _unfinished(store, key: str) -> pa.Table:
    """The extractor's other markers (failed, or partial: a reply that needed repairs): chunk_id, status."""
    return store.read("extractions", columns=["chunk_id", "status"], where=f"extractor = '{key}' AND status <> 'ok'").combine_chunks()


def _repaired(unfinished: pa.Table) -> set[str]:
    """The chunks whose last reply needed repairs: asked once more, the reply trusted (llm.py)."""
    return set(unfinished.filter(pc.equal(unfinished.column("status"), "partial")).column("chunk_id").to_pylist())


def _among(values: pa.Array, others: pa.Array) -> list[str]:
    return sorted(values.filter(pc.is_in(values, value_set=others)).to_pylist())


def _against_chunks(chunk_ids: pa.Array, held: list[pa.Array], done: pa.Array) -> tuple[list[list[str]], list[str]]:
    """(per array of `held`, its ids that are not chunks, sorted; the chunks not in `done`,
    sorted), from one lookup in the chunk ids: each lookup hashes its value set, 1.2M ids four
    times an update at 1.2M chunks."""
    probe = pa.chunked_array([a.cast(pa.string()) for a in (*held, done)], pa.string())
    at = pc.index_in(probe, value_set=chunk_ids)
    gone, start = [], 0
    for array in held:
        part = at.slice(start, len(array))
        gone.append(sorted(array.filter(pc.is_null(part)).to_pylist()))
        start += len(array)
    hit = np.zeros(len(chunk_ids), dtype=bool)
    hit[at.slice(start).drop_null().to_numpy(zero_copy_only=False)] = True
    return gone, sorted(chunk_ids.filter(pa.array(~hit)).to_pylist())

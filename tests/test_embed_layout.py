"""Where the embed stage's vectors land: a window of neighbouring items per data file, so that an
update's DELETE of a document's stale vectors rewrites one file, not every file of the partition."""

from __future__ import annotations

import pyarrow as pa
from _helpers import make_config, run
from deltalake import DeltaTable

from graphwright.stages.embed import _chunks_to_embed, embedding_order
from graphwright.storage import patch

WORDS = "amber birch cedar delta ember fjord grove heath inlet juniper kestrel larch meadow".split()


def test_items_are_sorted_by_length_inside_windows_of_table_order():
    chunks = pa.table({"kind": ["chunk"] * 5, "item_id": list("abcde"), "text": ["xxxx", "x", "xxx", "xx", "xxxxx"]})
    reports = pa.table({"kind": ["report"] * 2, "item_id": list("fg"), "text": ["yy", "y"]})
    todo = embedding_order([chunks, reports], 3)
    assert todo.column("item_id").to_pylist() == ["b", "c", "a", "d", "e", "g", "f"]
    # windows never straddle two kinds: the reports start a window of their own
    assert todo.column("window").to_pylist() == [0, 0, 0, 1, 1, 2, 2]


def _chunk_files(index) -> set[str]:
    table = DeltaTable(str(index / "tables" / "embeddings"))
    return {p for p in table.file_uris() if "kind=chunk" in p}


def test_an_update_rewrites_only_the_file_holding_the_changed_documents_vectors(tmp_path, monkeypatch):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    # one chunk each, of four lengths in turn: sorted by length over the whole table, the four
    # documents edited below would sit in four files
    for i in range(16):
        words = [f"{WORDS[(i + k) % len(WORDS)]}{i}" for k in range(3 + 6 * (i % 4))]
        (corpus / f"doc-{i:02d}.txt").write_text(" ".join(words) + ".\n")
    config = make_config(execution={"commit_every": 4}, embed={"batch_size": 2})
    run([corpus], tmp_path / "index", config)
    before = _chunk_files(tmp_path / "index")
    assert len(before) >= 4
    for i in range(4):
        path = corpus / f"doc-{i:02d}.txt"
        path.write_text(path.read_text().strip() + " An edition added this.\n")
    scanned, read = [], patch.read_data_file

    def spy(store, name, path, columns):  # delete_matching's scan for the rows to delete
        if name == "embeddings" and columns == ["item_id", "model"] and path.startswith("kind=chunk"):
            scanned.append(path)
        return read(store, name, path, columns)

    monkeypatch.setattr(patch, "read_data_file", spy)
    run([corpus], tmp_path / "index", config)
    removed = before - _chunk_files(tmp_path / "index")
    assert len(removed) == 1
    # the ids each file holds were seen when the stored vectors were read: only that file is read again
    assert len(scanned) == 1


class _Lookup:
    """A store whose lookups answer in their own order (a Delta join's, or by key group)."""

    def __init__(self, chunks: pa.Table):
        self.chunks = chunks

    def rows_in(self, name, column, values, columns):
        wanted = set(values)
        return self.chunks.filter(pa.array([c in wanted for c in self.chunks.column(column).to_pylist()])).select(columns)


def test_new_chunks_are_embedded_in_table_order_whatever_order_the_lookup_returns():
    ids = [f"c{i}" for i in range(6)]
    chunks = pa.table({"chunk_id": ids[::-1], "text": [f"text {c}" for c in ids[::-1]]})
    have = pa.table({"item_id": ["c1"], "text_hash": ["h"]})
    todo, stale = _chunks_to_embed(_Lookup(chunks), "m", pa.chunked_array([ids]), have)
    assert stale.to_pylist() == []
    ordered = embedding_order([todo.add_column(0, "kind", pa.array(["chunk"] * todo.num_rows))], 2)
    assert ordered.column("item_id").to_pylist() == ["c0", "c2", "c3", "c4", "c5"]
    assert ordered.column("text").to_pylist() == ["text c0", "text c2", "text c3", "text c4", "text c5"]
    assert ordered.column("window").to_pylist() == [0, 0, 1, 1, 2]
    assert "order" not in ordered.column_names

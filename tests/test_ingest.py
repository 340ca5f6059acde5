import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _helpers import CORPUS, CORPUS_KEYS

from graphwright import ids
from graphwright.stages.ingest.diff import diff_documents
from graphwright.stages.ingest.sources import (
    Document,
    decode_text,
    documents_table,
    read_sources,
)

# ------------------------------------------------------------------ decode_text

@pytest.mark.parametrize(
    "raw, reason",
    [
        (b"", "empty file"),
        (b"  \n\t \r\n", "empty file"),
        (b"\xef\xbb\xbf", "empty file (whitespace only)"),  # a BOM and nothing else
        (b"\xef\xbb\xbf \n ", "empty file (whitespace only)"),
        ("\u00a0\u2003".encode(), "empty file (whitespace only)"),  # Unicode whitespace only
        (b"PK\x03\x04\x00\x00binary", "binary file (contains NUL bytes)"),
        (b"text\x00more", "binary file"),
    ],
)
def test_decode_text_rejects(raw, reason):
    with pytest.raises(ValueError) as exc:
        decode_text(raw)
    assert str(exc.value).startswith(reason)


def test_decode_text_bad_utf8_names_the_byte_and_offset():
    with pytest.raises(ValueError) as exc:
        decode_text(b"caf\xe9 au lait")  # Latin-1, not UTF-8
    message = str(exc.value)
    assert "not valid UTF-8" in message
    assert "byte 3" in message and r"\xe9" in message
    assert "convert it to UTF-8" in message


def test_decode_text_accepts_utf8_and_strips_bom():
    assert decode_text("Zoë in Port Elling".encode()) == "Zoë in Port Elling"
    assert decode_text(b"\xef\xbb\xbfHello") == "Hello"


def test_decode_text_bad_utf8_after_bom_names_the_right_byte():
    with pytest.raises(ValueError) as exc:
        decode_text(b"\xef\xbb\xbfabc\xffdef")
    assert r"\xff" in str(exc.value)
    assert "byte 6" in str(exc.value)


# ------------------------------------------------------------------ read_sources

@pytest.fixture
def mixed_folder(tmp_path):
    root = tmp_path / "src"
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_text("Alpha text about Port Elling.")
    (root / "b.md").write_text("# Bravo\n\nBravo text.")
    (root / "sub" / "c.txt").write_text("Charlie text.")
    (root / ".hidden.txt").write_text("never read")
    (root / "recs.jsonl").write_text("\n".join([
        json.dumps({"id": "r1", "title": "Record one", "text": "First record.", "lang": "en"}),
        "",  # blank lines are skipped
        json.dumps({"title": "Titled only", "text": "Keyed by its title."}),
        json.dumps({"id": "r3", "text": "   "}),  # no text
        "{not json",
        json.dumps({"text": "no key"}),
        json.dumps(["not", "an", "object"]),
        json.dumps({"id": "r4", "text": "With metadata.", "metadata": {"k": 1}, "extra": "dropped"}),
    ]) + "\n")
    pq.write_table(pa.table({"id": ["p1", "p2"], "text": ["Parquet one.", "Parquet two."], "score": [1, 2]}),
                   root / "data.parquet")
    (root / "image.png").write_bytes(b"\x89PNG\r\n")
    (root / "empty.txt").write_bytes(b"")
    (root / "binary.txt").write_bytes(b"abc\x00\x01")
    (root / "latin1.txt").write_bytes("café".encode("latin-1"))
    (root / "broken.parquet").write_bytes(b"not a parquet file at all")
    return root


def test_read_sources_mixed_folder(mixed_folder):
    batch = read_sources([mixed_folder])
    docs = {d.source_key: d for d in batch.documents}
    assert set(docs) == {"a.txt", "b.md", "sub/c.txt", "r1", "Titled only", "r4", "p1", "p2"}
    assert docs["a.txt"].text == "Alpha text about Port Elling."
    assert docs["a.txt"].source == str(mixed_folder / "a.txt")
    assert docs["a.txt"].title == "a"
    assert docs["sub/c.txt"].doc_id == ids.doc_id("sub/c.txt")
    assert docs["r1"].title == "Record one"
    assert docs["r1"].metadata == {"lang": "en"}
    assert docs["r4"].metadata == {"k": 1}  # an explicit metadata object wins
    assert docs["p2"].text == "Parquet two." and docs["p2"].metadata == {"score": 2}

    errors = {e.source: e.reason for e in batch.errors}
    recs = str(mixed_folder / "recs.jsonl")
    assert errors[f"{recs}:4"] == "record 'r3' has no text"
    assert errors[f"{recs}:5"].startswith("invalid JSON line")
    assert errors[f"{recs}:6"] == "record has neither 'id' nor 'title'"
    assert errors[f"{recs}:7"] == "record is not an object"
    assert errors[str(mixed_folder / "image.png")].startswith("unsupported file type .png")
    assert errors[str(mixed_folder / "empty.txt")] == "empty file"
    assert errors[str(mixed_folder / "binary.txt")].startswith("binary file")
    assert "not valid UTF-8" in errors[str(mixed_folder / "latin1.txt")]
    assert str(mixed_folder / "broken.parquet") in errors
    assert not any(".hidden" in s for s in errors)
    assert len(batch.errors) == 9
    # files that lost something are protected from deletion; fully read files are not
    assert batch.failed_sources == {
        recs, *(str(mixed_folder / n) for n in ("image.png", "empty.txt", "binary.txt", "latin1.txt", "broken.parquet"))
    }


def test_read_sources_single_files_and_missing_path(tmp_path):
    (tmp_path / "one.md").write_text("One.")
    batch = read_sources([tmp_path / "one.md", tmp_path / "missing.txt"])
    assert [d.source_key for d in batch.documents] == ["one.md"]
    assert [(e.source, e.reason) for e in batch.errors] == [(str(tmp_path / "missing.txt"), "no such file or directory")]
    assert batch.failed_sources == {str(tmp_path / "missing.txt")}


def test_read_sources_unsupported_extension(tmp_path):
    (tmp_path / "table.csv").write_text("a,b\n1,2\n")
    (tmp_path / "noext").write_text("text")
    batch = read_sources([tmp_path / "table.csv", tmp_path / "noext"])
    assert batch.documents == []
    reasons = [e.reason for e in batch.errors]
    assert reasons[0].startswith("unsupported file type .csv; expected .txt, .md, .jsonl or .parquet")
    assert reasons[1].startswith("unsupported file type (none)")


def test_read_sources_duplicate_keys_keep_the_first(tmp_path):
    (tmp_path / "a.jsonl").write_text(json.dumps({"id": "x", "text": "first"}) + "\n")
    (tmp_path / "b.jsonl").write_text(json.dumps({"id": "x", "text": "second"}) + "\n")
    batch = read_sources([tmp_path])
    assert [(d.source_key, d.text) for d in batch.documents] == [("x", "first")]
    assert len(batch.errors) == 1 and "duplicate document key 'x'" in batch.errors[0].reason


def test_read_sources_test_corpus():
    batch = read_sources([CORPUS])
    assert batch.errors == [] and batch.failed_sources == set()
    assert {d.source_key for d in batch.documents} == CORPUS_KEYS
    letter = next(d for d in batch.documents if d.source_key == "letter-1")
    assert letter.title == "A letter from Kestrel Island" and letter.metadata == {"author": "Hollis Wren"}


def test_documents_table():
    docs = [Document("k1", "s1", "T1", "text one", {"b": 2, "a": 1}), Document("k2", "s2", "T2", "two")]
    table = documents_table(docs, "run-1")
    rows = table.to_pylist()
    assert rows[0]["doc_id"] == ids.doc_id("k1")
    assert rows[0]["content_hash"] == ids.content_hash("text one")
    assert rows[0]["metadata"] == '{"a": 1, "b": 2}'
    assert rows[1]["metadata"] is None
    assert rows[1]["n_chars"] == 3 and rows[1]["run_id"] == "run-1"
    from graphwright.storage import contracts

    contracts.schema("documents").validate(table)


# ------------------------------------------------------------------ diff_documents

def _docs(rows):
    return pa.table({
        "doc_id": [r[0] for r in rows], "content_hash": [r[1] for r in rows], "source": [r[2] for r in rows],
    })


INDEXED = _docs([("a", "h1", "f1"), ("b", "h2", "f1"), ("c", "h3", "f2"), ("d", "h4", "f3")])
INCOMING = _docs([("a", "h1", "f1"), ("b", "CHANGED", "f1"), ("e", "h5", "f4")])


def test_diff_documents_mirror():
    diff = diff_documents(INCOMING, INDEXED, mirror=True)
    assert (diff.new, diff.changed, diff.unchanged, diff.deleted) == (["e"], ["b"], ["a"], ["c", "d"])
    assert {k: v for k, v in diff.as_counts().items() if k in ("new", "changed", "unchanged", "deleted")} == \
        {"new": 1, "changed": 1, "unchanged": 1, "deleted": 2}


def test_diff_documents_append_never_deletes():
    diff = diff_documents(INCOMING, INDEXED, mirror=False)
    assert (diff.new, diff.changed, diff.unchanged, diff.deleted) == (["e"], ["b"], ["a"], [])


def test_diff_documents_protects_failed_sources():
    diff = diff_documents(INCOMING, INDEXED, mirror=True, protected_sources={"f2"})
    assert diff.deleted == ["d"]  # c came from f2, which failed to read this time


def test_diff_documents_against_empty_index():
    diff = diff_documents(INCOMING, INCOMING.slice(0, 0), mirror=True)
    assert diff.new == ["a", "b", "e"] and diff.deleted == [] and diff.changed == diff.unchanged == []


def test_read_sources_skips_hidden_folders(tmp_path):
    (tmp_path / "notes.txt").write_text("Mara Voss sailed.")
    (tmp_path / ".ipynb_checkpoints").mkdir()
    (tmp_path / ".ipynb_checkpoints" / "notes-checkpoint.txt").write_text("Mara Voss sailed.")
    (tmp_path / ".git" / "objects").mkdir(parents=True)
    (tmp_path / ".git" / "objects" / "ab12").write_bytes(b"x\x01\x00binary")
    batch = read_sources([tmp_path])
    assert [d.source_key for d in batch.documents] == ["notes.txt"]
    assert batch.errors == []


@pytest.mark.parametrize("batch", [1, 2, 1000])
def test_document_tables_equal_the_documents_read_one_by_one(mixed_folder, monkeypatch, batch):
    from graphwright.stages.ingest import sources as ingest

    monkeypatch.setattr(ingest, "TABLE_BATCH_DOCUMENTS", batch)
    errors, failed = [], set()
    parts = list(ingest.document_tables([mixed_folder, mixed_folder / "a.txt"], "run-1", errors, failed))
    assert all(0 < p.num_rows <= batch for p in parts)
    whole = read_sources([mixed_folder, mixed_folder / "a.txt"])
    assert pa.concat_tables(parts).equals(documents_table(whole.documents, "run-1"))
    assert errors == whole.errors and failed == whole.failed_sources
    assert any("duplicate document key 'a.txt'" in e.reason for e in errors)
    assert list(ingest.document_tables([mixed_folder / "missing.txt"], "run-1", [], set())) == []


# ------------------------------------------------------------------ hostile inputs (issue 22)

@pytest.mark.parametrize("codec", ["utf-16", "utf-16-be", "utf-32"])
def test_decode_text_reads_utf16_and_utf32_with_a_byte_order_mark(codec):
    text = "Zoë sailed to Port Elling.\n"
    raw = text.encode(codec)
    if codec == "utf-16-be":
        raw = b"\xfe\xff" + raw
    assert decode_text(raw) == text


def test_decode_text_names_utf16_without_a_byte_order_mark():
    with pytest.raises(ValueError, match="looks like UTF-16LE text without a byte-order mark"):
        decode_text("Mara Voss sailed.".encode("utf-16-le"))
    with pytest.raises(ValueError, match=r"^binary file"):
        decode_text(b"\x89PNG\x00\x00\x01\xff\x00")


def test_every_odd_path_in_a_folder_gets_a_message(tmp_path):
    import os

    (tmp_path / "ok.txt").write_text("Mara Voss sailed.")
    (tmp_path / "gone.txt").symlink_to(tmp_path / "nowhere.txt")
    (tmp_path / "loop-a.txt").symlink_to(tmp_path / "loop-b.txt")
    (tmp_path / "loop-b.txt").symlink_to(tmp_path / "loop-a.txt")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "deep.md").write_text("Deep text.")
    (tmp_path / "sub" / "up").symlink_to(tmp_path)  # a folder loop
    (tmp_path / "linked").symlink_to(tmp_path / "sub")  # the same folder again, not a loop
    os.mkfifo(tmp_path / "pipe.txt")  # reading it would block for ever
    batch = read_sources([tmp_path])
    assert sorted(d.source_key for d in batch.documents) == ["ok.txt", "sub/deep.md"]
    errors = {e.source: e.reason for e in batch.errors}
    assert errors[str(tmp_path / "gone.txt")].startswith("dangling symlink: gone.txt ->")
    assert errors[str(tmp_path / "loop-a.txt")].startswith("symlink loop")
    assert errors[str(tmp_path / "loop-b.txt")].startswith("symlink loop")
    assert errors[str(tmp_path / "sub" / "up")].startswith("symlink loop: up ->")
    assert errors[str(tmp_path / "linked")].startswith("symlink to a folder already read as")
    assert errors[str(tmp_path / "pipe.txt")].startswith("not a regular file")
    assert len(batch.errors) == 6


def test_a_record_never_displaces_a_file_with_its_key(tmp_path):
    """The record is refused with a message naming both, whichever is read first."""
    (tmp_path / "with space.txt").write_text("The file's own text.")
    (tmp_path / "a-records.jsonl").write_text(json.dumps({"id": "with space.txt", "text": "A record's text."}) + "\n")
    batch = read_sources([tmp_path])
    assert [(d.source_key, d.text) for d in batch.documents] == [("with space.txt", "The file's own text.")]
    (error,) = batch.errors
    assert error.source == str(tmp_path / "a-records.jsonl")
    assert "record id 'with space.txt' is also the path of the file" in error.reason
    assert str(tmp_path / "with space.txt") in error.reason


def test_an_append_run_keeps_a_file_document_a_record_would_replace(tmp_path):
    from _helpers import run

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "with space.txt").write_text("Mara Voss keeps the harbor of Port Elling.")
    run([corpus], tmp_path / "index")
    records = tmp_path / "records.jsonl"
    records.write_text(json.dumps({"id": "with space.txt", "text": "Something else entirely."}) + "\n"
                       + json.dumps({"id": "other", "text": "Hollis Wren wrote a letter."}) + "\n")
    summary = run([records], tmp_path / "index", mirror=False)
    from graphwright.storage.delta import IndexStore

    docs = IndexStore(tmp_path / "index").read("documents", columns=["source_key", "text", "source"]).sort_by("source_key").to_pylist()
    assert docs == [{"source_key": "other", "text": "Hollis Wren wrote a letter.", "source": str(records)},
                    {"source_key": "with space.txt", "text": "Mara Voss keeps the harbor of Port Elling.",
                     "source": str(corpus / "with space.txt")}]
    (error,) = summary["source_errors"]
    assert error["source"] == str(records) and str(corpus / "with space.txt") in error["reason"]


def test_a_parquet_file_without_a_text_column_gets_one_message(tmp_path):
    pq.write_table(pa.table({"id": [f"r{i}" for i in range(500)], "body": ["x"] * 500}), tmp_path / "no-text.parquet")
    pq.write_table(pa.table({"text": ["x"] * 3}), tmp_path / "no-id.parquet")
    pq.write_table(pa.table({"id": ["a"], "text": [7]}), tmp_path / "int-text.parquet")
    batch = read_sources([tmp_path])
    assert batch.documents == []
    errors = {e.source: e.reason for e in batch.errors}
    assert len(batch.errors) == 3
    assert errors[str(tmp_path / "no-text.parquet")].startswith("no 'text' column (it has: id, body)")
    assert errors[str(tmp_path / "no-id.parquet")].startswith("no id (or title) column")
    assert "holds int64, not strings" in errors[str(tmp_path / "int-text.parquet")]


def test_jsonl_records_with_lone_surrogates_or_a_bom_or_many_errors(tmp_path):
    lines = ['{"id": "bad", "text": "who \\ud800 is"}', '{"id": "good", "text": "Fine text."}']
    (tmp_path / "a.jsonl").write_bytes(b"\xef\xbb\xbf" + "\n".join(lines).encode() + b"\n")
    (tmp_path / "b.jsonl").write_text("{broken\n" * 200)
    (tmp_path / "c.jsonl").write_bytes('{"id": "x", "text": "y"}\n'.encode("utf-16"))
    batch = read_sources([tmp_path])
    assert [d.source_key for d in batch.documents] == ["good"]  # the BOM did not cost line 1 ...
    errors = [(e.source, e.reason) for e in batch.errors]
    assert (f"{tmp_path / 'a.jsonl'}:1", "record 'bad': its text is not valid Unicode (a lone surrogate \\ud800 at "
            "character 4); fix the record's \\u escapes") in errors  # ... and the surrogate did not kill the run
    from_b = [r for s, r in errors if s.startswith(str(tmp_path / "b.jsonl"))]
    assert len(from_b) == 51 and from_b[-1] == "150 more problems in this file (the first 50 are listed)"
    assert (str(tmp_path / "c.jsonl"), "UTF-16 text (it starts with a UTF-16 byte-order mark); JSONL must be UTF-8: convert it") in errors


def test_an_update_spills_only_the_documents_that_differ_from_their_indexed_rows(tmp_path, monkeypatch):
    """A document read exactly as it is indexed is not written to the spill (its text was 0.4 s
    of a 0.1% update at 145k chunks); a new text, title or metadata is, separators and nulls
    in the values included, and the documents table equals a fresh ingest's."""
    from _helpers import make_config

    from graphwright.pipeline import definition
    from graphwright.pipeline.context import Request, Run
    from graphwright.pipeline.progress import StageProgress
    from graphwright.stages import ingest as ingest_stage
    from graphwright.storage.delta import IndexStore
    from graphwright.storage.diff import exact_keys

    spilled, write = [], ingest_stage.write_parquet
    monkeypatch.setattr(ingest_stage, "write_parquet", lambda table, where: spilled.extend(table.column("source_key").to_pylist())
                        or write(table, where))
    source = tmp_path / "records.jsonl"

    def ingest(index, rows):
        source.write_text("".join(json.dumps(r) + "\n" for r in rows))
        spilled.clear()
        store = IndexStore(index)
        store.root.mkdir(parents=True, exist_ok=True)
        run = Run(store, make_config(), "run-test", StageProgress(False), lambda m: None, Request(sources=[str(source)]))
        with run.stage("ingest") as metrics:
            definition.by_name("ingest").execute(run, metrics)
        return sorted(store.read("documents", columns=["source_key", "title", "text", "metadata", "content_hash"]).to_pylist(),
                      key=lambda r: r["source_key"])

    rows = [{"id": f"r{i}", "text": f"Record {i} tells of Port Elling.", "title": f"T{i}"} for i in range(6)]
    rows[4]["title"], rows[5]["tag"] = "a\x1fb", "x"
    ingest(tmp_path / "index", rows)
    assert len(spilled) == 6
    rows[1]["text"] = "Record 1 now tells of Kestrel Island."
    rows[2]["title"] = "T2, renamed"
    rows[3]["tag"] = "new metadata"
    rows[5].pop("tag")
    # parts of two documents: the indexed rows are looked up by id, not hashed again per part
    from graphwright.stages.ingest import sources

    monkeypatch.setattr(sources, "TABLE_BATCH_DOCUMENTS", 2)
    whole_index, is_in = [], pa.compute.is_in
    monkeypatch.setattr(pa.compute, "is_in", lambda values, value_set, **kw: (
        whole_index.append(len(value_set)) if len(value_set) == len(rows) else None, is_in(values, value_set=value_set, **kw))[1])
    after = ingest(tmp_path / "index", rows)
    assert whole_index == []
    assert sorted(spilled) == ["r1", "r2", "r3", "r5"]
    assert after == ingest(tmp_path / "fresh", rows)
    keys = exact_keys(pa.table({"a": ["a\x1fb", "a", None, ""], "b": ["c", "b\x1fc", "", None]}), ("a", "b"))
    assert len(set(keys.to_pylist())) == 4 and keys.null_count == 0

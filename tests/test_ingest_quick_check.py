"""Ingest's quick check: unchanged local files are taken from the index unread, and an ingest with
it writes what an ingest reading every file writes."""

import json
import os
import shutil
import time
from types import SimpleNamespace

import pytest
from _helpers import make_config

from graphwright.stages import ingest
from graphwright.stages.ingest import sources
from graphwright.storage.delta import IndexStore

PAST = time.time() - 3600  # files modified long before they are read: not racy


@pytest.fixture
def reads(monkeypatch) -> list:
    """The names of the files read, in order."""
    names, original = [], sources.read_path

    def read_path(path, *args):
        names.append(path.name)
        yield from original(path, *args)

    monkeypatch.setattr(sources, "read_path", read_path)
    return names


def _ingest(corpus, index, quick: bool = True, mirror: bool = True):
    store = IndexStore(index)
    for name in ("documents", "source_errors"):
        store.ensure(name)
    run = SimpleNamespace(request=SimpleNamespace(sources=[str(corpus)], mirror=mirror, force=True), store=store,
                          config=make_config(ingest={"quick_check": quick}), run_id=f"run-{time.monotonic_ns()}",
                          log=lambda *_: None)
    m: dict = {}
    out = ingest.execute(run, m)
    return m, out


def _touch(path, text: str, at: float) -> None:
    path.write_text(text)
    os.utime(path, (at, at))


def _records(*pairs) -> str:
    return "".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in pairs)


def _count_parses(monkeypatch) -> list:
    """The lines ingest's reader parses from now on (its own json module replaced, no other's)."""
    parsed: list = []
    monkeypatch.setattr(sources, "json", SimpleNamespace(loads=lambda raw: parsed.append(raw) or json.loads(raw),
                                                         dumps=json.dumps, JSONDecodeError=json.JSONDecodeError))
    return parsed


def _documents(index) -> list[dict]:
    table = IndexStore(index).read("documents", columns=["doc_id", "source_key", "source", "title", "text", "content_hash", "metadata"])
    return table.sort_by("doc_id").to_pylist()


def test_an_unchanged_file_is_not_read_again(tmp_path, reads):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for n in range(3):
        _touch(corpus / f"part-{n}.jsonl", _records(*((f"d{n}-{i}", f"Document {i} of part {n}.") for i in range(4))), PAST)
    _touch(corpus / "note.md", "# A note\nMara Voss keeps the harbor.", PAST)
    m, _ = _ingest(corpus, tmp_path / "index")
    assert sorted(reads) == ["note.md", "part-0.jsonl", "part-1.jsonl", "part-2.jsonl"]
    assert m["files_recorded"] == 4 and m["files_unread"] == 0

    _touch(corpus / "part-1.jsonl", _records(("d1-0", "Edited."), ("d1-9", "New one.")), PAST + 10)
    reads.clear()
    m, out = _ingest(corpus, tmp_path / "index")
    assert reads == ["part-1.jsonl"]  # the others are taken from the index
    assert m["files_unread"] == 3 and m["rows_in"] == 11
    assert out["diff"] == {"new": 1, "changed": 1, "unchanged": 9, "deleted": 3, "relabeled": 0}

    reads.clear()  # a rerun reads nothing
    m, out = _ingest(corpus, tmp_path / "index")
    assert reads == [] and m["files_unread"] == 4 and out["diff"]["unchanged"] == 11


def test_files_just_written_with_problems_or_after_another_writer_are_read(tmp_path, reads):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    _touch(corpus / "good.jsonl", _records(("a", "Alpha text.")), PAST)
    _touch(corpus / "broken.jsonl", _records(("b", "Beta text.")) + "{not json\n", PAST)
    (corpus / "fresh.jsonl").write_text(_records(("c", "Gamma text.")))  # modified just now: racy
    m, _ = _ingest(corpus, tmp_path / "index")
    assert m["files_recorded"] == 1
    reads.clear()
    _ingest(corpus, tmp_path / "index")
    assert sorted(reads) == ["broken.jsonl", "fresh.jsonl"]

    store = IndexStore(tmp_path / "index")  # another writer: the record no longer describes the table
    import pyarrow as pa

    store.delete_in("documents", "doc_id", pa.array([r["doc_id"] for r in _documents(tmp_path / "index") if r["source_key"] == "c"]))
    reads.clear()
    _ingest(corpus, tmp_path / "index")
    assert sorted(reads) == ["broken.jsonl", "fresh.jsonl", "good.jsonl"]

    reads.clear()  # switched off: every file is read
    _ingest(corpus, tmp_path / "index", quick=False)
    assert sorted(reads) == ["broken.jsonl", "fresh.jsonl", "good.jsonl"]


EDITS = [
    ("edit a file", lambda c, t: _touch(c / "b.jsonl", _records(("b1", "Changed text."), ("b2", "Same two.")), t)),
    ("a file takes a later file's key", lambda c, t: _touch(c / "a.jsonl", _records(("a1", "One."), ("b2", "Claimed.")), t)),
    ("the text file's key claimed by a record", lambda c, t: _touch(c / "a.jsonl", _records(("notes/n.md", "Clash.")), t)),
    ("delete a file", lambda c, t: (c / "b.jsonl").unlink()),
    ("relabel", lambda c, t: _touch(c / "c.jsonl", json.dumps({"id": "c1", "text": "Three.", "title": "New"}) + "\n", t)),
    ("move the folder's text file", lambda c, t: shutil.move(c / "notes", c / "elsewhere")),
    ("a bad line", lambda c, t: _touch(c / "c.jsonl", _records(("c1", "Three.")) + "oops\n", t)),
    # lines of a changed file, some known byte for byte
    ("a long file", lambda c, t: _touch(c / "d.jsonl", _records(*((f"d{i}", f"Line {i}.") for i in range(8))), t)),
    ("one line edited, one gone, one new", lambda c, t: _touch(
        c / "d.jsonl", _records(*((f"d{i}", f"Line {i}." if i != 3 else "Edited.") for i in range(8) if i != 5), ("d9", "New.")), t)),
    ("lines swapped, the first one moved, CRLF endings", lambda c, t: _touch(
        c / "d.jsonl", _records(("d2", "Line 2."), ("d1", "Line 1."), ("d0", "Line 0."), ("d4", "Line 4.")).replace("\n", "\r\n"), t)),
    ("a known line's key taken by an earlier file", lambda c, t: (
        _touch(c / "a.jsonl", _records(("a1", "One."), ("d1", "Taken.")), t),
        _touch(c / "d.jsonl", _records(("d2", "Line 2."), ("d1", "Line 1."), ("d0", "Line 0."), ("d4", "Line 4."), ("d7", "7.")), t + 1))),
    ("a known line's key freed again", lambda c, t: _touch(c / "a.jsonl", _records(("a1", "One.")), t)),
    ("a known line repeated", lambda c, t: _touch(c / "d.jsonl", _records(("d0", "Line 0."), ("d1", "Line 1."), ("d1", "Line 1.")), t)),
    ("keyed by title, metadata from other fields, no newline at the end", lambda c, t: _touch(
        c / "f.jsonl", json.dumps({"title": "F one", "text": "F text.", "year": 1999}) + "\n"
        + json.dumps({"id": "f2", "text": "F two.", "metadata": "not a dict", "tags": ["x"]}), t)),
    ("a line added after the one without a newline", lambda c, t: _touch(
        c / "f.jsonl", json.dumps({"title": "F one", "text": "F text.", "year": 1999}) + "\n"
        + json.dumps({"id": "f2", "text": "F two.", "metadata": "not a dict", "tags": ["x"]}) + "\n" + _records(("f3", "F three.")), t)),
    ("a byte-order mark", lambda c, t: _touch(c / "e.jsonl", "\ufeff" + _records(("e1", "E one."), ("e2", "E two.")), t)),
    ("a line put above the byte-order mark", lambda c, t: _touch(
        c / "e.jsonl", _records(("e0", "E zero.")) + "\ufeff" + _records(("e1", "E one."), ("e2", "E two.")), t)),
]


@pytest.mark.parametrize("mirror", [True, False])
def test_quick_check_writes_what_reading_every_file_writes(tmp_path, mirror):
    """Over a series of edits, an index ingested with the quick check holds the same documents and
    reports the same diff and problems as one that reads every file each time."""
    corpus = tmp_path / "corpus"
    (corpus / "notes").mkdir(parents=True)
    _touch(corpus / "a.jsonl", _records(("a1", "One."), ("a2", "Two.")), PAST)
    _touch(corpus / "b.jsonl", _records(("b1", "Alpha."), ("b2", "Same two.")), PAST)
    _touch(corpus / "c.jsonl", _records(("c1", "Three.")), PAST)
    _touch(corpus / "notes" / "n.md", "A note on the harbor.", PAST)
    for step, (what, edit) in enumerate([("first load", lambda c, t: None), *EDITS]):
        edit(corpus, PAST + 10 * (step + 1))
        quick = _ingest(corpus, tmp_path / "quick", quick=True, mirror=mirror)
        full = _ingest(corpus, tmp_path / "full", quick=False, mirror=mirror)
        assert quick[1] == full[1], what
        assert _documents(tmp_path / "quick") == _documents(tmp_path / "full"), what
        assert quick[0]["rows_in"] == full[0]["rows_in"], what
    assert quick[0]["files_unread"] > 0


def test_in_a_changed_jsonl_file_only_the_lines_that_changed_are_parsed(tmp_path, monkeypatch):
    """A file of 40 records with one edited, one deleted and one added: the two new lines are
    parsed, the other 38 are the indexed rows; the index holds what an ingest reading every line
    holds."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    _touch(corpus / "part.jsonl", _records(*((f"r{i}", f"Record {i} of the part.") for i in range(40))), PAST)
    _ingest(corpus, tmp_path / "quick")
    parsed = _count_parses(monkeypatch)
    _touch(corpus / "part.jsonl", _records(*((f"r{i}", "Edited." if i == 7 else f"Record {i} of the part.")
                                             for i in range(40) if i != 20), ("r40", "Added.")), PAST + 10)
    m, out = _ingest(corpus, tmp_path / "quick")
    assert len(parsed) == 2 and m["lines_unread"] == 38
    assert out["diff"] == {"new": 1, "changed": 1, "unchanged": 38, "deleted": 1, "relabeled": 0}
    _ingest(corpus, tmp_path / "full", quick=False)
    assert _documents(tmp_path / "quick") == _documents(tmp_path / "full")


def test_a_file_written_just_before_its_ingest_has_its_lines_reused_next_time(tmp_path, monkeypatch):
    """A file modified within the racy window is read again whatever its size and time, but the
    lines it was read with are recorded: the next ingest parses only the lines that changed."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    records = [(f"r{i}", f"Record {i}.") for i in range(30)]
    (corpus / "part.jsonl").write_text(_records(*records))  # just written: racy
    m, _ = _ingest(corpus, tmp_path / "index")
    assert m["files_recorded"] == 0
    parsed = _count_parses(monkeypatch)
    (corpus / "part.jsonl").write_text(_records(*records, ("r30", "Added.")))
    m, out = _ingest(corpus, tmp_path / "index")
    assert len(parsed) == 1 and m["lines_unread"] == 30
    assert out["diff"]["new"] == 1 and out["diff"]["unchanged"] == 30

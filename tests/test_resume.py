"""Resumability: a run killed in the extract stage, rerun, ends exactly where an uninterrupted run
ends, with no duplicate rows."""

import shutil

import pytest
from _helpers import CORPUS, make_config, make_extraction_fail, run, sorted_rows

from graphwright.pipeline.errors import TooManyFailures
from graphwright.stages import extract as extract_stage
from graphwright.storage import contracts
from graphwright.storage.delta import IndexStore

# small batches and a commit per batch, so the extract stage commits many times
SMALL = dict(extract={"batch_size": 2}, execution={"commit_every": 2})
GRAPH = ("mentions", "assertions", "entities", "entity_aliases", "relationships")


class Crash(RuntimeError):
    pass


def assert_same_result(store, reference, names=GRAPH + ("communities",)):
    for name in names:
        table = store.read(name)
        contracts.schema(name).validate(table)  # includes: no duplicate primary keys
        assert sorted_rows(table, name) == sorted_rows(reference.read(name), name), name
    marks = store.read("extractions").to_pylist()
    assert len(marks) == store.count("chunks") and {m["status"] for m in marks} == {"ok"}
    ids_ = [m["mention_id"] for m in store.read("mentions").to_pylist()]
    assert len(ids_) == len(set(ids_))


@pytest.fixture
def corpus(tmp_path):
    shutil.copytree(CORPUS, tmp_path / "corpus")
    return tmp_path / "corpus"


def test_crash_between_extract_commits_then_resume(indexed, corpus, tmp_path, monkeypatch):
    index = tmp_path / "index"
    real = extract_stage._commit_extractions
    calls = []

    def crash_on_second(run_, results):
        calls.append(len(results))
        if len(calls) == 2:
            raise Crash("killed during the extract stage")
        return real(run_, results)

    monkeypatch.setattr(extract_stage, "_commit_extractions", crash_on_second)
    with pytest.raises(Crash):
        run([corpus], index, make_config(**SMALL))
    monkeypatch.setattr(extract_stage, "_commit_extractions", real)

    store = IndexStore(index)
    done = store.count("extractions")
    assert 0 < done < store.count("chunks")  # the premise: a partial extraction was committed
    assert [r["status"] for r in store.read("runs").to_pylist()] == ["failed"]

    s = run([corpus], index, make_config(**SMALL))
    assert s["chunks_extracted"] == store.count("chunks") - done  # only the missing part
    assert s["version"] == 1
    assert_same_result(store, indexed.store)


def test_crash_inside_a_commit_before_the_markers_then_resume(indexed, corpus, tmp_path, monkeypatch):
    """Mentions and assertions of a batch are written but its completion markers are not."""
    index = tmp_path / "index"
    real = IndexStore.append
    marker_writes = []

    def append(self, name, table):
        if name == "extractions":
            marker_writes.append(table.num_rows)
            if len(marker_writes) == 3:
                raise Crash("killed between the rows and their markers")
        return real(self, name, table)

    monkeypatch.setattr(IndexStore, "append", append)
    with pytest.raises(Crash):
        run([corpus], index, make_config(**SMALL))
    monkeypatch.setattr(IndexStore, "append", real)

    store = IndexStore(index)
    marked = set(store.read("extractions").column("chunk_id").to_pylist())
    orphaned = set(store.read("mentions").column("chunk_id").to_pylist()) - marked
    assert orphaned  # the premise: rows without markers were left behind

    s = run([corpus], index, make_config(**SMALL))
    assert s["chunks_extracted"] == store.count("chunks") - len(marked)
    assert_same_result(store, indexed.store)


def test_failed_chunks_are_retried_on_the_next_run(indexed, corpus, tmp_path, monkeypatch):
    make_extraction_fail(monkeypatch, "Hollis Wren", "extractor fell over")
    index = tmp_path / "index"
    # above the failure threshold the run fails and publishes nothing, but keeps what it extracted
    with pytest.raises(TooManyFailures, match="max_failed_fraction"):
        run([corpus], index)
    assert IndexStore(index).count("index_manifest") == 0
    assert IndexStore(index).count("extractions") == IndexStore(index).count("chunks")
    first = run([corpus], index, make_config(extract={"max_failed_fraction": 1.0}))
    assert first["chunks_extracted"] == first["chunks_failed"]  # only the failed chunks were retried
    store = IndexStore(index)
    failed = [m for m in store.read("extractions").to_pylist() if m["status"] == "failed"]
    assert first["chunks_failed"] == len(failed) > 0
    assert all(m["error"] == "RuntimeError: extractor fell over" and m["n_mentions"] == 0 for m in failed)
    monkeypatch.undo()  # the extractor works again

    second = run([corpus], index)
    assert second["chunks_extracted"] == len(failed) and second["chunks_failed"] == 0
    assert second["new_version"] and second["version"] == 2  # the failing run published nothing
    # (communities are left out: Leiden is warm-started from the first run's partial graph)
    assert_same_result(store, indexed.store, GRAPH)

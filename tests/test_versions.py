"""Deletion guard, explicit deletes, rollback and retention of published versions."""

import json

import pytest
from _helpers import data_table_versions, index_fresh, make_config, run
from typer.testing import CliRunner

from graphwright import ids
from graphwright.cli import app
from graphwright.pipeline import runner as P
from graphwright.pipeline.errors import RefusedDeletion
from graphwright.query import query
from graphwright.storage.manifest import NoPublishedVersion, PublishedIndex, manifests


@pytest.fixture
def fresh(tmp_path):
    return index_fresh(tmp_path / "fresh")


def test_mirror_run_that_would_delete_most_documents_is_refused(fresh):
    for name in ("harbor.txt", "festival.md", "council.txt", "notes/river.txt"):
        (fresh.corpus / name).unlink()
    before = data_table_versions(fresh.store)
    with pytest.raises(RefusedDeletion, match="would delete 4 of the 6"):
        run([fresh.corpus], fresh.index)
    assert data_table_versions(fresh.store) == before
    assert [m["version"] for m in manifests(fresh.store)] == [1]
    s = P.run_index([str(fresh.corpus)], fresh.index, make_config(), force=True, show_progress=False, log=lambda m: None)
    assert s["documents"] == 2 and s["documents_diff"]["deleted"] == 4


def test_delete_documents_by_key_and_glob(fresh):
    s = P.run_delete(fresh.index, doc_ids=["letter-1", "no-such-doc"], source_globs=["notes/*"],
                     show_progress=False, log=lambda m: None)
    gone = {ids.doc_id("letter-1"), ids.doc_id("notes/river.txt")}
    assert s["documents_diff"]["deleted"] == 2 and s["documents"] == 4 and s["version"] == 2
    store = fresh.store
    for name in ("documents", "chunks", "mentions", "assertions", "extractions"):
        assert not gone & set(store.read(name).column("doc_id").to_pylist()), name
    for name in ("entities", "relationships"):
        assert not any(gone & set(r["doc_ids"]) for r in store.read(name).to_pylist()), name


def test_rollback_restores_a_published_version(fresh):
    (fresh.corpus / "notes" / "river.txt").unlink()
    assert run([fresh.corpus], fresh.index)["version"] == 2
    from graphwright.ops.versions import rollback

    manifest = rollback(fresh.store, 1, "run-rollback")
    assert manifest["version"] == 3 and manifest["counts"]["documents"] == 6
    assert fresh.store.count("documents") == 6
    v1, v3 = PublishedIndex(fresh.store, 1), PublishedIndex(fresh.store, 3)
    for name in ("documents", "chunks", "entities", "relationships", "communities"):
        key = "doc_id" if name == "documents" else None
        a, b = v1.read(name), v3.read(name)
        assert a.num_rows == b.num_rows, name
        if key:
            assert sorted(a.column(key).to_pylist()) == sorted(b.column(key).to_pylist())
    assert query(str(fresh.index), "Greywater River depths", mode="naive", top_k=20)["version"] == 3


def test_retention_drops_old_versions(fresh):
    (fresh.corpus / "notes" / "river.txt").unlink()
    run([fresh.corpus], fresh.index)
    from graphwright.ops.versions import retain

    leftover = fresh.index / "staging" / "killed-run" / "extract-0" / "000000.arrow"  # a killed run's stage input
    leftover.parent.mkdir(parents=True)
    leftover.write_bytes(b"staged")
    dry = retain(fresh.store, 1, dry_run=True)
    assert dry["kept"] == [2] and dry["dropped"] == [1]
    assert [m["version"] for m in manifests(fresh.store)] == [1, 2]  # a dry run changes nothing
    assert leftover.exists()
    result = retain(fresh.store, 1)
    assert result["kept"] == [2] and result["dropped"] == [1]
    assert not (fresh.index / "staging").exists() and result["files_removed"] == dry["files_removed"]
    assert [m["version"] for m in manifests(fresh.store)] == [2]
    with pytest.raises(NoPublishedVersion):
        PublishedIndex(fresh.store, 1)
    latest = PublishedIndex(fresh.store)
    for rel in latest.manifest["vector_indexes"].values():
        assert (fresh.index / rel).exists()
    assert query(str(fresh.index), "Tobias Reed", mode="local")["evidence"]
    with pytest.raises(ValueError):
        retain(fresh.store, 0)


def test_cli_versions_delete_rollback(fresh):
    runner = CliRunner()
    result = runner.invoke(app, ["delete", "--index", str(fresh.index), "--doc-id", "letter-2", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["documents"] == 5
    result = runner.invoke(app, ["versions", "--index", str(fresh.index), "--json"])
    assert [v["version"] for v in json.loads(result.stdout)] == [1, 2]
    result = runner.invoke(app, ["rollback", "--index", str(fresh.index), "--to", "1", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["version"] == 3
    result = runner.invoke(app, ["delete", "--index", str(fresh.index)])
    assert result.exit_code == 1

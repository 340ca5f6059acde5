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


KILLED_PATCH = """
import os, sys
from graphwright.storage import patch
from graphwright.storage.delta import IndexStore

store = IndexStore(sys.argv[1])
patch.commit_files = lambda *args, **kwargs: os._exit(9)  # killed after writing its files, before the commit
patch.patch_table(store, "entities", [], [store.read("entities")])
"""


def test_retention_removes_the_files_a_writer_killed_before_its_commit_left(fresh):
    import os
    import subprocess
    import sys
    import time

    from graphwright.ops.versions import retain
    from graphwright.storage.manifest import DATA_TABLES
    from graphwright.storage.orphans import ORPHAN_AGE_S

    (fresh.corpus / "notes" / "river.txt").unlink()
    assert run([fresh.corpus], fresh.index)["version"] == 2  # version 1 reads files version 2 removed
    tables = fresh.index / "tables"
    listed = set(tables.rglob("*.parquet"))

    def rows(version: int) -> dict:
        published = PublishedIndex(fresh.store, version)
        return {name: published.read(name).num_rows for name in DATA_TABLES}

    before = {v: rows(v) for v in (1, 2)}
    for _ in range(2):
        killed = subprocess.run([sys.executable, "-c", KILLED_PATCH, str(fresh.index)], capture_output=True, text=True)
        assert killed.returncode == 9, killed.stderr
    left = sorted(set(tables.rglob("*.parquet")) - listed)
    assert len(left) >= 2 and all(p.parent == tables / "entities" for p in left)
    old, young = left[:-1], left[-1:]
    aged = time.time() - ORPHAN_AGE_S - 60
    for path in listed | set(old):  # every file old enough: only what the log names keeps a file
        os.utime(path, (aged, aged))

    dry = retain(fresh.store, 10, dry_run=True)  # no version to drop: the orphans go all the same
    assert dry["orphans_removed"] == len(old) and all(p.exists() for p in left)
    result = retain(fresh.store, 10)
    assert result["orphans_removed"] == len(old) and result["files_removed"] >= len(old)
    assert set(tables.rglob("*.parquet")) == listed | set(young)  # a young one may be a commit still being made
    assert {v: rows(v) for v in (1, 2)} == before
    assert query(str(fresh.index), "Tobias Reed", mode="local")["evidence"]

    # version 1 dropped: the files version 2 removed are vacuum's to keep for the hour since
    # their removal, however old the files themselves; orphans they are not
    pinned = manifests(fresh.store)[0]["table_versions"]
    assert retain(fresh.store, 1)["orphans_removed"] == 0
    assert {name: fresh.store.read(name, version=pinned[name]).num_rows for name in DATA_TABLES} == before[1]

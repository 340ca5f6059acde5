"""A patch or a deletion rewrites the files that hold its keys, listed at one version and committed
at a later one: another writer that removed one of those files meanwhile (a compaction, another
deletion) must not get its rows back into the table beside the rewrite's copy."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from graphwright.storage import patch
from graphwright.storage.file_commits import COMMIT_ATTEMPTS, ConcurrentRewrite
from graphwright.storage.delta import IndexStore


def aliases(keys: list[str]) -> pa.Table:
    n = len(keys)
    return pa.table({"alias": keys, "entity_id": ["e"] * n, "method": ["m"] * n, "evidence": ["x"] * n,
                     "mention_count": pa.array([1] * n, pa.int64())})


def two_files(tmp_path) -> IndexStore:
    store = IndexStore(tmp_path / "index")
    store.append("entity_aliases", aliases(["a", "b"]))
    store.append("entity_aliases", aliases(["c", "d"]))
    return store


def keys(store) -> list[str]:
    return sorted(DeltaTable(store.path("entity_aliases")).to_pyarrow_table().column("alias").to_pylist())


def table_files(store) -> set[str]:
    from pathlib import Path

    return {p.name for p in Path(store.path("entity_aliases")).glob("*.parquet")}


def meanwhile(monkeypatch, other, times: int = 1):
    """Run `other()` right after the patch lists the files it will rewrite, `times` times."""
    listing, left = patch._data_files, [times]

    def listed(*args, **kwargs):
        files = listing(*args, **kwargs)
        if left[0]:
            left[0] -= 1
            other()
        return files

    monkeypatch.setattr(patch, "_data_files", listed)


def compact(store):
    return lambda: DeltaTable(store.path("entity_aliases")).optimize.compact()


def test_a_patch_whose_files_a_compaction_replaced_meanwhile_is_made_again_from_the_new_version(tmp_path, monkeypatch):
    store = two_files(tmp_path)
    meanwhile(monkeypatch, compact(store))
    stats = patch.patch_table(store, "entity_aliases", ["a"], [aliases(["e"])])
    assert keys(store) == ["b", "c", "d", "e"]  # not a, b, b, c, d, e
    assert stats["rows_removed"] == 1 and stats["rows_added"] == 1


def test_a_deletion_whose_files_a_compaction_replaced_meanwhile_is_made_again_from_the_new_version(tmp_path, monkeypatch):
    store = two_files(tmp_path)
    meanwhile(monkeypatch, compact(store))
    assert patch.delete_matching(store, "entity_aliases", "alias", ["a"]) == 1
    assert keys(store) == ["b", "c", "d"]


def test_two_patches_deleting_from_the_same_file_both_hold(tmp_path, monkeypatch):
    store = two_files(tmp_path)

    def other_writer():
        monkeypatch.undo()  # the other process's patch reads its files plainly
        patch.patch_table(IndexStore(tmp_path / "index"), "entity_aliases", ["b"], [])

    meanwhile(monkeypatch, other_writer)
    patch.patch_table(store, "entity_aliases", ["a"], [aliases(["e"])])
    assert keys(store) == ["c", "d", "e"]


def test_a_patch_that_keeps_losing_its_files_stops_naming_the_table_and_leaves_nothing(tmp_path, monkeypatch):
    store = two_files(tmp_path)
    before = table_files(store)

    def rewrite_every_file():  # another writer that rewrites the files each time they are listed
        from deltalake import write_deltalake

        table = DeltaTable(store.path("entity_aliases"))
        write_deltalake(table, table.to_pyarrow_table().sort_by("alias"), mode="overwrite")

    meanwhile(monkeypatch, rewrite_every_file, times=COMMIT_ATTEMPTS)
    with pytest.raises(ConcurrentRewrite, match="table entity_aliases: another writer removed"):
        patch.patch_table(store, "entity_aliases", ["a"], [aliases(["e"])])
    assert keys(store) == ["a", "b", "c", "d"]
    written_by_others = table_files(store) - before
    assert len(written_by_others) == COMMIT_ATTEMPTS  # the overwrites' files; none of the patch's


def test_a_deletion_committed_by_another_writer_just_before_the_patchs_commit_holds_too(tmp_path, monkeypatch):
    """After the check: delta-rs's own conflict check refuses the commit, and the patch is made again."""
    store = two_files(tmp_path)
    commit, calls = patch.commit_files, []

    def late(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            monkeypatch.setattr(patch, "commit_files", commit)
            patch.patch_table(IndexStore(tmp_path / "index"), "entity_aliases", ["b"], [])
            monkeypatch.setattr(patch, "commit_files", late)
        return commit(*args, **kwargs)

    monkeypatch.setattr(patch, "commit_files", late)
    patch.patch_table(store, "entity_aliases", ["a"], [aliases(["e"])])
    assert keys(store) == ["c", "d", "e"] and len(calls) == 2

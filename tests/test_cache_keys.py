"""The LLM cache's key index: a lookup reads only the data files that hold its keys, whatever the
size of the cache, and the index kept beside the table follows its appends and compactions."""

import hashlib

import numpy as np
import pyarrow as pa
import pytest

from graphwright.engines.llm import cache, cache_keys
from graphwright.storage.delta import IndexStore


def _key(i: int) -> str:
    return hashlib.sha256(str(i).encode()).hexdigest()


def _answers(start: int, n: int, tag: str = "") -> pa.Table:
    keys = [_key(i) for i in range(start, start + n)]
    return pa.table({"key": keys, "model": ["m"] * n, "prompt_version": ["v"] * n,
                     "response": [f"{k}{tag}" for k in keys], "prompt_tokens": [1] * n, "completion_tokens": [1] * n,
                     "run_id": ["r"] * n})


@pytest.fixture
def reads(monkeypatch):
    """The data files of llm_cache read through the index: (file, columns) per read."""
    seen, real = [], cache_keys.read_data_file

    def counted(store, name, path, columns):
        seen.append((path, tuple(columns)))
        return real(store, name, path, columns)

    monkeypatch.setattr(cache_keys, "read_data_file", counted)
    cache_keys._kept.clear()
    yield seen
    cache_keys._kept.clear()


def _responses(table: pa.Table) -> dict:
    return dict(zip(table.column("key").to_pylist(), table.column("response").to_pylist()))


def test_a_lookup_reads_only_the_files_that_hold_its_keys(tmp_path, reads):
    store = IndexStore(tmp_path / "index")
    for part in range(5):
        store.append("llm_cache", _answers(part * 100, 100))
    wanted = [_key(i) for i in (3, 150, 151)] + ["absent", _key(10_000)]
    found = cache.lookup(store, wanted)
    assert _responses(found) == {_key(i): _key(i) for i in (3, 150, 151)}
    assert _responses(found) == _responses(cache._joined(store, pa.array(wanted)))
    assert sum(columns == ("key",) for _, columns in reads) == 5  # the index made once: each file's keys
    reads.clear()
    assert cache.lookup(store, ["absent", _key(10_000)]).num_rows == 0 and reads == []  # misses read no file
    assert cache.lookup(store, [_key(420)]).num_rows == 1 and len(reads) == 1  # one file, the one that holds it


def test_the_index_is_kept_and_follows_appends_compactions_and_a_broken_state(tmp_path, reads):
    store = IndexStore(tmp_path / "index")
    store.append("llm_cache", _answers(0, 50))
    store.append("llm_cache", _answers(50, 50))
    cache.lookup(store, [_key(1)])
    cache_keys._kept.clear()  # another process: the index from its file
    store.append("llm_cache", _answers(100, 50))
    store.append("llm_cache", _answers(0, 1, tag=" again"))  # a key stored twice: one row comes back
    reads.clear()
    found = cache.lookup(store, [_key(0), _key(120), _key(60)])
    assert sorted(found.column("key").to_pylist()) == sorted([_key(0), _key(120), _key(60)])
    assert sum(columns == ("key",) for _, columns in reads) == 2  # only the two new files' keys
    store.ensure("llm_cache").optimize.compact()  # every file replaced
    store.ensure("llm_cache").vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    found = cache.lookup(store, [_key(i) for i in range(0, 150, 7)])
    assert sorted(found.column("key").to_pylist()) == sorted(_key(i) for i in range(0, 150, 7))
    store.files.write_bytes(cache_keys.STATE, b"not an arrow file")
    cache_keys._kept.clear()
    assert cache.lookup(store, [_key(149)]).num_rows == 1


def test_keys_whose_codes_collide_are_told_apart_by_the_key(tmp_path, monkeypatch, reads):
    store = IndexStore(tmp_path / "index")
    store.append("llm_cache", _answers(0, 20))
    monkeypatch.setattr(cache_keys, "id_codes", lambda keys: pa.array([7] * len(keys), pa.int64()))
    found = cache.lookup(store, [_key(4), "absent"])
    assert _responses(found) == {_key(4): _key(4)}


def test_a_file_gone_since_it_was_listed_falls_back_to_the_join_and_says_so(tmp_path, monkeypatch, reads):
    store = IndexStore(tmp_path / "index")
    store.append("llm_cache", _answers(0, 30))
    cache.lookup(store, [_key(1)])  # the index made

    def gone(store, name, path, columns):
        raise FileNotFoundError(path)

    monkeypatch.setattr(cache_keys, "read_data_file", gone)
    stats = {}
    assert _responses(cache.lookup(store, [_key(2), _key(3)], stats)) == {_key(2): _key(2), _key(3): _key(3)}
    assert stats["lookup_fallbacks"] == 1


def test_an_index_that_does_not_hold_together_is_made_again_and_a_failed_save_is_no_failure(tmp_path, monkeypatch, reads):
    store = IndexStore(tmp_path / "index")
    store.append("llm_cache", _answers(0, 30))
    cache.lookup(store, [_key(1)])
    broken = cache_keys.KeyIndex(["part-none.parquet"], *(np.array(a) for a in ([1, 2], [0, 5], [0, 1])))
    store.files.write_table(cache_keys.STATE, broken.table())  # a file index past its files
    cache_keys._kept.clear()
    assert cache.lookup(store, [_key(7)]).num_rows == 1

    def refused(relative, table):
        raise PermissionError("a read-only index")

    monkeypatch.setattr(store.files, "write_table", refused)
    cache_keys._kept.clear()
    store.files.delete(cache_keys.STATE)
    assert cache.lookup(store, [_key(8)]).num_rows == 1


def test_a_few_rows_appended_are_kept_in_memory_and_saved_once_there_are_enough(tmp_path, monkeypatch, reads):
    store = IndexStore(tmp_path / "index")
    store.append("llm_cache", _answers(0, 30))
    cache.lookup(store, [_key(1)])
    saved = store.files.read_table(cache_keys.STATE).num_rows
    store.append("llm_cache", _answers(30, 5))  # a serving process's few answers
    assert cache.lookup(store, [_key(32)]).num_rows == 1
    assert store.files.read_table(cache_keys.STATE).num_rows == saved  # not written for 5 rows
    monkeypatch.setattr(cache_keys, "SAVE_ROWS", 8)
    store.append("llm_cache", _answers(35, 5))
    assert cache.lookup(store, [_key(37)]).num_rows == 1
    assert store.files.read_table(cache_keys.STATE).num_rows == 40  # 10 rows since the save: saved

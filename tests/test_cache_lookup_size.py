"""A cache lookup whose answers pass the 2 GB one Arrow string array holds (a round of 1.2M
cached extractions does) returns them; it used to fail joining them into one array."""

import hashlib

import pyarrow as pa
import pytest

from graphwright.engines.llm.cache import lookup
from graphwright.storage.delta import IndexStore


def _answers(start: int, n: int, size: int) -> pa.Table:
    keys = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(start, start + n)]
    return pa.table({"key": keys, "model": ["m"] * n, "prompt_version": ["v"] * n,
                     "response": pa.array([f"{k}:" + "x" * size for k in keys], pa.string()),
                     "prompt_tokens": [1] * n, "completion_tokens": [1] * n, "run_id": ["r"] * n})


@pytest.mark.slow
def test_a_lookup_of_more_than_2_gb_of_answers_returns_them_all(tmp_path):
    store = IndexStore(tmp_path / "index")
    n, size = 12_000, 64 << 10  # three commits of 12,000 answers of 64 KB: 2.4 GB
    for part in range(3):
        store.append("llm_cache", _answers(part * n, n, size))
    store.append("llm_cache", _answers(0, 2, 10))  # two keys stored twice: one row each comes back
    keys = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(3 * n)]
    found = lookup(store, keys + ["absent"])
    assert found.num_rows == 3 * n
    assert sorted(found.column("key").to_pylist()) == sorted(keys)
    assert found.slice(0, 1).column("response")[0].as_py().startswith(found.column("key")[0].as_py())


def test_a_key_stored_twice_comes_back_once(tmp_path):
    store = IndexStore(tmp_path / "index")
    store.append("llm_cache", _answers(0, 3, 5))
    store.append("llm_cache", _answers(1, 3, 7))
    keys = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(4)]
    found = lookup(store, keys)
    assert sorted(found.column("key").to_pylist()) == sorted(keys)

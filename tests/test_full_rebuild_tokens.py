"""What a full rebuild's extraction would cost, in tokens: each current chunk's calls from the
latest run that extracted it, each prompt counted once, from the calls' own token counts."""

from __future__ import annotations

import pyarrow as pa

from graphwright.stages.extract import rebuild_tokens
from graphwright.stages.extract.rebuild_tokens import full_rebuild_tokens as _full_rebuild_tokens
from graphwright.storage.delta import IndexStore

TOKENS = {"a1": (100, 10), "a2": (50, 5), "b1": (200, 20), "b2": (70, 7), "c1": (1000, 100), "s1": (9, 9), "x1": (3, 3)}


def _call(run_id, key, item, status="ok", stage="extract"):
    prompt, completion = TOKENS[key]
    return {"run_id": run_id, "stage": stage, "key": key, "item_id": item, "engine": "openai", "model": "m", "cache_hit": False,
            "status": status, "prompt_tokens": prompt, "completion_tokens": completion, "latency_s": 0.0, "attempts": 1,
            "error": None, "batch_id": None}


def test_full_rebuild_tokens_count_each_current_chunks_latest_calls_once(tmp_path):
    """The calls carry their own token counts (a cache hit's are what the call cost when it was
    made): the count reads no cache, which holds no partial answer and took 2.6 s a run to look
    1.2M keys up in."""
    store = IndexStore(tmp_path / "index")
    store.append("llm_calls", pa.Table.from_pylist([
        _call("run-1", "a1", "chunk-a"), _call("run-1", "a2", "chunk-a"),  # chunk-a: extracted once, two rounds
        _call("run-1", "b1", "chunk-b"), _call("run-2", "b2", "chunk-b"),  # chunk-b: run 2 extracted it again
        _call("run-1", "b2", "chunk-d"),  # the same prompt for another chunk: its answer counts once
        _call("run-1", "c1", "chunk-c"),  # chunk-c is gone
        _call("run-2", "x1", "chunk-a", status="failed"), _call("run-2", "s1", "chunk-a", stage="summarize"),
    ]))
    chunks = pa.chunked_array([pa.array(["chunk-a", "chunk-b"]), pa.array(["chunk-d", "chunk-e"])])
    assert _full_rebuild_tokens(store, chunks) == (100 + 10) + (50 + 5) + (70 + 7)
    assert _full_rebuild_tokens(store, pa.chunked_array([pa.array([], pa.string())])) == 0


def _counted_from_the_table(store, chunks) -> int:
    store.files.write_bytes(rebuild_tokens.STATE, b"")  # no usable record: every call is read
    return _full_rebuild_tokens(store, chunks)


def test_an_update_reads_only_the_calls_appended_since_and_counts_what_a_full_read_counts(tmp_path, monkeypatch):
    """The calls counted are kept between runs: a run reads the calls appended since from the
    Delta log (a compaction moves them, which changes nothing), and counts what reading every
    call counts; where rows were removed it reads the table."""
    import deltalake

    store = IndexStore(tmp_path / "index")
    store.append("llm_calls", pa.Table.from_pylist([_call("run-1", "a1", "chunk-a"), _call("run-1", "b1", "chunk-b"),
                                                    _call("run-1", "c1", "chunk-c"), _call("run-1", "b2", "chunk-d")]))
    chunks = pa.chunked_array([pa.array(["chunk-a", "chunk-b", "chunk-c", "chunk-d"])])
    assert _full_rebuild_tokens(store, chunks) == 110 + 220 + 1100 + 77
    reads = []
    original = store.read
    monkeypatch.setattr(store, "read", lambda name, *a, **k: (reads.append(name), original(name, *a, **k))[1])
    store.append("llm_calls", pa.Table.from_pylist([_call("run-1", "s1", "chunk-a", stage="summarize")]))  # the same run's report calls
    store.append("llm_calls", pa.Table.from_pylist([  # run 2: chunk-b again, chunk-e new, one failure, chunk-c gone
        _call("run-2", "a2", "chunk-b"), _call("run-2", "x1", "chunk-e"), _call("run-2", "c1", "chunk-e", status="failed")]))
    deltalake.DeltaTable(store.path("llm_calls")).optimize.compact()
    chunks = pa.chunked_array([pa.array(["chunk-a", "chunk-b", "chunk-d", "chunk-e"])])
    counted = _full_rebuild_tokens(store, chunks)
    assert "llm_calls" not in reads and counted == 110 + 55 + 77 + 6
    assert counted == _counted_from_the_table(store, chunks)

    store.delete("llm_calls", "key = 'b2'")  # rows removed: the table is read again
    reads.clear()
    assert _full_rebuild_tokens(store, chunks) == 110 + 55 + 6 and "llm_calls" in reads


def _chunks(*ids: str) -> pa.Table:
    return pa.Table.from_pylist([{"chunk_id": c, "doc_id": "d", "doc_hash": "h", "chunk_index": i, "text": c, "n_tokens": 1,
                                  "start_char": 0, "end_char": 1} for i, c in enumerate(ids)])


def test_the_sum_is_brought_up_to_date_from_the_chunks_deleted_and_the_calls_appended(tmp_path, monkeypatch):
    """With the chunks table's version kept beside the counted calls and their sum, an update
    reads neither every chunk id nor every call, and recounts only the prompts whose calls were
    dropped or added: the sum equals the full count. Where the chunks' log cannot say, the
    chunk ids are read."""
    store = IndexStore(tmp_path / "index")
    store.append("chunks", _chunks("chunk-a", "chunk-b", "chunk-c", "chunk-d"))
    store.append("llm_calls", pa.Table.from_pylist([_call("run-1", "a1", "chunk-a"), _call("run-1", "b1", "chunk-b"),
                                                    _call("run-1", "c1", "chunk-c"), _call("run-1", "b2", "chunk-d")]))
    assert _full_rebuild_tokens(store) == 110 + 220 + 1100 + 77
    reads = []
    original = store.read
    monkeypatch.setattr(store, "read", lambda name, *a, **k: (reads.append(name), original(name, *a, **k))[1])
    # run 2: chunk-c gone, chunk-e new, chunk-b extracted again with the prompt chunk-d shares
    store.delete("chunks", "chunk_id = 'chunk-c'")
    store.append("chunks", _chunks("chunk-e"))
    store.append("llm_calls", pa.Table.from_pylist([_call("run-2", "b2", "chunk-b"), _call("run-2", "x1", "chunk-e"),
                                                    _call("run-2", "c1", "chunk-e", status="failed")]))
    counted = _full_rebuild_tokens(store)
    assert reads == [] and counted == 110 + 77 + 6
    store.delete("chunks", "chunk_id = 'chunk-d'")  # the prompt chunk-b shares stays counted once
    assert _full_rebuild_tokens(store) == 110 + 77 + 6 and reads == []
    full = _counted_from_the_table(store, original("chunks", columns=["chunk_id"]).column("chunk_id"))
    assert full == 110 + 77 + 6
    # the kept state predates a chunks commit the log no longer has: the chunk ids are read
    store.append("chunks", _chunks("chunk-f"))
    monkeypatch.setattr(rebuild_tokens, "changes_since", lambda *a, **k: None)
    assert _full_rebuild_tokens(store) == 110 + 77 + 6 and "chunks" in reads


def test_a_state_kept_as_text_by_an_earlier_version_is_counted_again_from_the_table(tmp_path):
    """An index whose kept calls name their ids as text (format 1) is counted from every call once,
    and keeps codes from then on; the sum is what a full count gives."""
    import json

    store = IndexStore(tmp_path / "index")
    store.append("chunks", _chunks("chunk-a", "chunk-b"))
    store.append("llm_calls", pa.Table.from_pylist([_call("run-1", "a1", "chunk-a"), _call("run-1", "b1", "chunk-b")]))
    old = pa.schema([("item_id", pa.string()), ("key", pa.string()), ("run_id", pa.string()),
                     ("prompt_tokens", pa.int64()), ("completion_tokens", pa.int64())],
                    metadata={"graphwright": json.dumps({"format": 1, "llm_calls": store.version("llm_calls"),
                                                         "chunks": store.version("chunks"), "total": 5})})
    store.files.write_table(rebuild_tokens.STATE, pa.table({"item_id": ["chunk-a"], "key": ["a1"], "run_id": ["run-1"],
                                                            "prompt_tokens": [1], "completion_tokens": [4]}, schema=old))
    assert _full_rebuild_tokens(store) == 110 + 220
    assert store.files.read_table(rebuild_tokens.STATE).schema.field("item_id").type == pa.int64()
    store.append("llm_calls", pa.Table.from_pylist([_call("run-2", "b2", "chunk-b")]))
    assert _full_rebuild_tokens(store) == 110 + 77

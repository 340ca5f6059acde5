"""What a full rebuild's extraction would cost, in tokens: each current chunk's calls from the
latest run that extracted it, each prompt counted once, from the calls' own token counts."""

from __future__ import annotations

import pyarrow as pa

from graphwright.stages.extract import _full_rebuild_tokens
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

"""Answering requests through the index's `llm_cache` table: cached answers come back with the
token counts recorded when they were made; only the misses reach the engine. `record_calls`
writes the new answers and one `llm_calls` row per call (the index driver and lazy reports)."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa

from graphwright.engines.llm.interface import LLMRequest, LLMResponse
from graphwright.storage.delta import IndexStore, sql_list


def cached_answers(store: IndexStore, keys: list[str]) -> dict[str, dict]:
    if not keys or not store.exists("llm_cache"):
        return {}
    found = {}
    for o in range(0, len(keys), 1000):
        rows = store.read("llm_cache", columns=["key", "response", "prompt_tokens", "completion_tokens"],
                          where=f"key IN {sql_list(keys[o:o + 1000])}")
        found.update({r["key"]: r for r in rows.to_pylist()})
    return found


def complete_through_cache(store: IndexStore, engine: Callable[[], object], requests: list[LLMRequest],
                           model: str) -> list[tuple[str, LLMResponse, bool]]:
    """(key, response, cache_hit) per request. `engine` is called only if some request misses
    (loading a local model takes seconds)."""
    keys = [r.cache_key(model) for r in requests]
    cached = cached_answers(store, keys)
    misses = [i for i, k in enumerate(keys) if k not in cached]
    fresh = dict(zip(misses, engine().complete([requests[i] for i in misses]))) if misses else {}
    out = []
    for i, key in enumerate(keys):
        if key in cached:
            c = cached[key]
            out.append((key, LLMResponse(text=c["response"], prompt_tokens=c["prompt_tokens"],
                                         completion_tokens=c["completion_tokens"], attempts=0), True))
        else:
            out.append((key, fresh[i], False))
    return out


def record_calls(store: IndexStore, llm, run_id: str, stage: str, calls: list[dict]) -> list[dict]:
    """New answers into the cache (failures and unusable answers are not cached, so the next run
    asks again); every call, cache hit or not, into llm_calls. `calls` are dicts with key, item_id,
    prompt_version, response, cache_hit, prompt_tokens, completion_tokens, latency_s, attempts and
    error. Returns the llm_calls rows written (one per key)."""
    if not calls:
        return []
    fresh = {r["key"]: r for r in calls if not r["cache_hit"] and r["error"] is None and r["response"] is not None}
    if fresh:
        store.upsert("llm_cache", pa.Table.from_pylist([
            {"key": k, "model": llm.model, "prompt_version": r["prompt_version"], "response": r["response"],
             "prompt_tokens": r["prompt_tokens"], "completion_tokens": r["completion_tokens"], "run_id": run_id}
            for k, r in fresh.items()]))
    records = {}
    for r in calls:  # identical inputs share a request: one record per key
        records.setdefault(r["key"], {
            "run_id": run_id, "stage": stage, "key": r["key"], "item_id": r["item_id"], "engine": llm.engine,
            "model": llm.model, "cache_hit": r["cache_hit"], "status": "ok" if r["error"] is None else "failed",
            "prompt_tokens": r["prompt_tokens"], "completion_tokens": r["completion_tokens"],
            "latency_s": r["latency_s"], "attempts": r["attempts"], "error": r["error"],
        })
    store.upsert("llm_calls", pa.Table.from_pylist(list(records.values())))
    return list(records.values())

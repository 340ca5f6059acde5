"""Answering requests through the index's `llm_cache` table: cached answers come back with the
token counts recorded when they were made; only the misses reach the engine. Read-only: the
driver writes new answers (pipeline._record_llm_calls)."""

from __future__ import annotations

from collections.abc import Callable

from graphwright.llm import LLMRequest, LLMResponse
from graphwright.store import IndexStore, sql_list


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

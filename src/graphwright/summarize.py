"""Description summarization: when an entity's or relationship's distinct descriptions exceed
the budget, an LLM (if `resolve.summarize` is on) condenses all of them instead of keeping only
those that fit. Requests go through the index's cache; the driver runs them once per row per
run, however many documents changed."""

from __future__ import annotations

from graphwright.llm import LLMRequest, LLMResponse, make_llm
from graphwright.store import IndexStore, sql_list

PROMPT_VERSION = "summarize-v1"


def summary_request(name: str, descriptions: list[str], max_chars: int, config) -> LLMRequest:
    joined, used = [], 0
    for d in descriptions:  # most frequent and earliest first; the input itself is bounded too
        if joined and used + len(d) > 12_000:
            break
        joined.append(f"- {d}")
        used += len(d)
    return LLMRequest(
        messages=(
            ("system", f"Write one paragraph of at most {max_chars // 6} words that combines the descriptions below "
                       "into a single description of the subject. Use only what they say; keep names, dates and numbers."),
            ("user", f"Subject: {name}\nDescriptions:\n" + "\n".join(joined)),
        ),
        max_tokens=min(config.max_tokens, max_chars // 3 + 16),
        temperature=config.temperature,
        prompt_version=PROMPT_VERSION,
    )


def summarize(store: IndexStore, overflow: dict, max_chars: int, config) -> tuple[dict, list[dict]]:
    """{(table, id): summary} and one call record per request (cache hits included)."""
    items = sorted(overflow.items())
    requests = [summary_request(name, descs, max_chars, config) for _, (name, descs) in items]
    keys = [r.cache_key(config.model) for r in requests]
    cached = {}
    if keys and store.exists("llm_cache"):
        for o in range(0, len(keys), 1000):
            rows = store.read("llm_cache", columns=["key", "response", "prompt_tokens", "completion_tokens"],
                              where=f"key IN {sql_list(keys[o:o + 1000])}")
            cached.update({r["key"]: r for r in rows.to_pylist()})
    misses = [i for i, k in enumerate(keys) if k not in cached]
    fresh = dict(zip(misses, make_llm(config).complete([requests[i] for i in misses]) if misses else []))
    summaries, calls = {}, []
    for i, ((row_key, _), key) in enumerate(zip(items, keys)):
        hit = key in cached
        resp = (LLMResponse(text=cached[key]["response"], prompt_tokens=cached[key]["prompt_tokens"],
                            completion_tokens=cached[key]["completion_tokens"], attempts=0) if hit else fresh[i])
        if resp.ok:
            summaries[row_key] = " ".join(resp.text.split())[:max_chars]
        calls.append({"key": key, "chunk_id": row_key[1], "prompt_version": PROMPT_VERSION, "response": resp.text,
                      "cache_hit": hit, "prompt_tokens": resp.prompt_tokens, "completion_tokens": resp.completion_tokens,
                      "latency_s": resp.latency_s, "attempts": resp.attempts, "error": resp.error})
    return summaries, calls

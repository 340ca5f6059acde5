"""Description summarization: when an entity's or relationship's distinct descriptions exceed
the budget, an LLM (if `resolve.summarize` is on) condenses all of them instead of keeping only
those that fit. Requests go through the index's cache; the driver runs them once per row per
run, however many documents changed."""

from __future__ import annotations

from graphwright.engines.llm.cache import complete_through_cache
from graphwright.engines.llm.interface import LLMRequest
from graphwright.storage.delta import IndexStore

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


def summarize(store: IndexStore, overflow: dict, max_chars: int, config, engine) -> tuple[dict, list[dict]]:
    """{(table, id): summary} and one call record per request (cache hits included). `engine`
    gives the run's engine (started on the first request the cache cannot answer)."""
    items = sorted(overflow.items())
    requests = [summary_request(name, descs, max_chars, config) for _, (name, descs) in items]
    summaries, calls = {}, []
    for (row_key, _), (key, resp, hit) in zip(items, complete_through_cache(store, engine, requests, config.model)):
        if resp.ok:
            summaries[row_key] = " ".join(resp.text.split())[:max_chars]
        calls.append({"key": key, "chunk_id": row_key[1], "prompt_version": PROMPT_VERSION, "response": resp.text,
                      "cache_hit": hit, "prompt_tokens": resp.prompt_tokens, "completion_tokens": resp.completion_tokens,
                      "latency_s": resp.latency_s, "attempts": resp.attempts, "error": resp.error})
    return summaries, calls

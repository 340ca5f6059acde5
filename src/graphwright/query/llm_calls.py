"""LLM calls made while querying: answered through the index's `llm_cache`
(llm.cache.complete_through_cache); new successful answers are added to the cache so the same
question costs nothing the next time. Published versions do not pin `llm_cache`, so this changes
no version."""

from __future__ import annotations

import pyarrow as pa

from graphwright.engines.llm import make_llm
from graphwright.engines.llm.cache import complete_through_cache
from graphwright.engines.llm.interface import LLMRequest, LLMResponse


def complete(searcher, requests: list[LLMRequest]) -> list[tuple[str, LLMResponse, bool]]:
    llm = searcher.llm
    calls = complete_through_cache(searcher.index.store, lambda: make_llm(llm), requests, llm.model)
    fresh = {key: (request, response) for (key, response, hit), request in zip(calls, requests) if not hit and response.ok}
    if fresh:
        searcher.index.store.upsert("llm_cache", pa.Table.from_pylist([
            {"key": key, "model": llm.model, "prompt_version": request.prompt_version, "response": response.text,
             "prompt_tokens": response.prompt_tokens, "completion_tokens": response.completion_tokens,
             "run_id": f"query@v{searcher.index.version}"}
            for key, (request, response) in fresh.items()]))
    return calls

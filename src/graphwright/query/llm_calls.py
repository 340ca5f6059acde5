"""LLM calls made while querying: answered through the index's `llm_cache` with this process's
query session (one engine, however many questions), and new answers appended to the cache so the
same question costs nothing the next time. Published versions do not pin `llm_cache`, so this
changes no version, and appends never conflict with an index run's."""

from __future__ import annotations

from graphwright.engines.llm.cache import CallLog, complete_through_cache
from graphwright.engines.llm.interface import LLMRequest, LLMResponse
from graphwright.engines.llm.session import query_session


def complete(searcher, requests: list[LLMRequest]) -> list[tuple[str, LLMResponse, bool]]:
    llm = searcher.llm
    calls = complete_through_cache(searcher.index.store, query_session(llm).engine, requests, llm.model)
    log = CallLog(searcher.index.store, llm, f"query@v{searcher.index.version}")
    log.record_answers([(key, request, response) for (key, response, hit), request in zip(calls, requests) if not hit and response.ok])
    return calls

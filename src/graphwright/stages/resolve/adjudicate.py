"""LLM adjudication of borderline pairs (`resolve.adjudicate`): pairs whose score falls between
`borderline_threshold` and `accept_threshold` are put to the LLM as a yes/no question, through the
index's cache (an unchanged pair is asked once, ever) and accounted in llm_calls like every call."""

from __future__ import annotations

import json

from graphwright.engines.llm.cache import complete_through_cache
from graphwright.engines.llm.interface import LLMRequest
from graphwright.stages.resolve.scoring import KeyProfile, PairEvidence
from graphwright.storage.delta import IndexStore

PROMPT_VERSION = "resolve-adjudicate-v1"
SYSTEM = ("You decide whether two names extracted from one corpus refer to the same real-world entity. "
          'Answer with JSON {"same": true} or {"same": false}. When unsure, answer false.')
SCHEMA = {"type": "object", "properties": {"same": {"type": "boolean"}}, "required": ["same"]}


def adjudication_request(a: KeyProfile, b: KeyProfile, config) -> LLMRequest:
    def show(p: KeyProfile) -> str:
        types = ", ".join(t for t in sorted(p.types) if t) or "unknown"
        return f"{p.text} (types: {types}; {p.mentions} mentions)"

    return LLMRequest(
        messages=(
            ("system", SYSTEM),
            ("user", f"A: {show(a)}\nB: {show(b)}"),
        ),
        json_schema=SCHEMA,
        max_tokens=min(config.max_tokens, 16),
        temperature=0.0,
        prompt_version=PROMPT_VERSION,
    )


def parse_verdict(text: str | None) -> bool:
    try:
        return bool(json.loads(text or "").get("same") is True)
    except (ValueError, AttributeError):
        return False


def adjudicate(store: IndexStore, pairs: list[tuple[PairEvidence, KeyProfile, KeyProfile]], config, engine) -> tuple[dict, list[dict]]:
    """({(a, b): same?}, one call record per pair, cache hits included). `engine` gives the run's
    engine (started on the first pair the cache cannot answer)."""
    requests = [adjudication_request(pa_, pb, config) for _, pa_, pb in pairs]
    verdicts, calls = {}, []
    for (e, _, _), (key, resp, hit) in zip(pairs, complete_through_cache(store, engine, requests, config.model)):
        verdicts[(e.a, e.b)] = resp.ok and parse_verdict(resp.text)
        calls.append({"key": key, "chunk_id": f"{e.a}\x1f{e.b}", "prompt_version": PROMPT_VERSION, "response": resp.text,
                      "cache_hit": hit, "prompt_tokens": resp.prompt_tokens, "completion_tokens": resp.completion_tokens,
                      "latency_s": resp.latency_s, "attempts": resp.attempts, "error": resp.error})
    return verdicts, calls

"""Iterative retrieval interleaved with reasoning (IRCoT, Trivedi et al. 2023), for the `graph`
and `local` modes: retrieve for the question; then, at most `steps` times (3 at most), the LLM
writes the next sentence of reasoning from the question, the reasoning so far and the paragraphs
retrieved so far; a sentence saying "the answer is" ends it, any other is the next retrieval
query. The final evidence fuses every step's ranking by reciprocal rank, so what the first step
and later steps agree on ranks first.

Every call goes through the index's llm_cache (query.llm_calls); the result's `ircot` lists the
steps and their token counts, cached or not, so a caller can cost them.
"""

from __future__ import annotations

import re

from graphwright.engines.llm.interface import LLMRequest
from graphwright.query.fusion import reciprocal_rank_fusion
from graphwright.query.llm_calls import complete

PROMPT_VERSION = "ircot-v1"
MAX_STEPS = 3
MODES = ("graph", "local")
PARAGRAPH_CHARS = 800
CONTEXT_PARAGRAPHS = 15
SYSTEM = """You answer a question that may need several facts, one step at a time, from the numbered paragraphs below.
Write only the next sentence of your reasoning: one fact from the paragraphs that helps answer the question.
When you can answer, write the sentence "So the answer is: <answer>."

Paragraphs:
"""
_DONE = re.compile(r"\banswer is\b", re.IGNORECASE)


def first_sentence(text: str, limit: int = 300) -> str:
    """The first sentence of an LLM reply, one line, at most `limit` characters (replies are hostile)."""
    text = " ".join((text or "").split())[: 4 * limit]
    match = re.match(r"(.+?[.!?])(\s|$)", text)
    return (match.group(1) if match else text)[:limit].strip()


def search(searcher, question: str, mode: str, top_k: int, steps: int, **options) -> dict:
    if mode not in MODES:
        raise ValueError(f"iterative retrieval (steps) is for the {' and '.join(MODES)} modes, not {mode!r}")
    if not 1 <= steps <= MAX_STEPS:
        raise ValueError(f"steps must be between 1 and {MAX_STEPS}, got {steps}")
    if not searcher.llm.model:
        raise ValueError("iterative retrieval needs an LLM: set llm.model (or GRAPHWRIGHT_LLM__MODEL and GRAPHWRIGHT_LLM__BASE_URL)")
    result = searcher.search(question, mode, top_k, **options)
    rankings = [[e["chunk_id"] for e in result["evidence"]]]
    by_chunk = {e["chunk_id"]: e for e in result["evidence"]}
    done, usage = [], {"calls": 0, "cache_hits": 0, "prompt_tokens": 0, "completion_tokens": 0}
    for _ in range(steps):
        fused = [c for c, _ in reciprocal_rank_fusion(rankings)][:CONTEXT_PARAGRAPHS]
        ((_, response, hit),) = complete(searcher, [_request(searcher, question, [by_chunk[c] for c in fused], done)])
        usage["calls"] += 1
        usage["cache_hits"] += int(hit)
        usage["prompt_tokens"] += response.prompt_tokens
        usage["completion_tokens"] += response.completion_tokens
        if not response.ok:
            usage["error"] = response.error
            break
        thought = first_sentence(response.text)
        if not thought:
            break
        step = {"thought": thought}
        done.append(step)
        if _DONE.search(thought):
            break
        found = searcher.search(thought, mode, top_k, **options)["evidence"]
        step["retrieved"] = [e["chunk_id"] for e in found]
        rankings.append(step["retrieved"])
        for e in found:
            by_chunk.setdefault(e["chunk_id"], e)
    ranked = reciprocal_rank_fusion(rankings)[:top_k]
    result["evidence"] = [by_chunk[c] | {"score": round(s, 6)} for c, s in ranked]
    result["ircot"] = {"steps": done, "model": searcher.llm.model, **usage}
    return result


def _request(searcher, question: str, evidence: list[dict], done: list[dict]) -> LLMRequest:
    paragraphs = "\n".join(f"[{n}] ({e.get('title') or e['doc_id']}) {' '.join(e['text'].split())[:PARAGRAPH_CHARS]}"
                           for n, e in enumerate(evidence, 1))
    reasoning = " ".join(s["thought"] for s in done)
    user = f"Question: {question}\nReasoning so far: {reasoning or '(none)'}\nNext sentence:"
    llm = searcher.llm
    return LLMRequest(messages=(("system", SYSTEM + paragraphs), ("user", user)), max_tokens=min(llm.max_tokens, 120),
                      temperature=llm.temperature, prompt_version=PROMPT_VERSION)

"""Answer synthesis: an LLM writes the answer from the retrieved evidence only, citing it by
number ([1], [2], ...). Calls go through the same request cache as extraction."""

from __future__ import annotations

import re

from graphwright.llm import LLMRequest, make_llm

PROMPT_VERSION = "answer-v1"
SYSTEM = (
    "Answer the question using only the numbered evidence below. Cite the evidence you use by its "
    "number in square brackets, like [2]. If the evidence does not contain the answer, say so. Be brief."
)


def answer_request(question: str, evidence: list[dict], config, max_chars: int = 6000) -> LLMRequest:
    blocks, used = [], 0
    for n, e in enumerate(evidence, 1):
        text = " ".join(e["text"].split())
        block = f"[{n}] ({e.get('title') or e['doc_id']}) {text}"
        if blocks and used + len(block) > max_chars:
            break
        blocks.append(block)
        used += len(block)
    return LLMRequest(
        messages=(("system", SYSTEM + "\n\nEvidence:\n" + "\n".join(blocks)), ("user", question)),
        max_tokens=min(config.max_tokens, 512),
        temperature=config.temperature,
        prompt_version=PROMPT_VERSION,
    )


def synthesize(question: str, result: dict, config, store=None) -> dict:
    """Add `answer`, `citations` (evidence numbers the answer cites) and `llm` usage to `result`."""
    request = answer_request(question, result["evidence"], config)
    key = request.cache_key(config.model)
    cached = None
    if store is not None and store.exists("llm_cache"):
        rows = store.read("llm_cache", where=f"key = '{key}'").to_pylist()
        cached = rows[0] if rows else None
    if cached:
        text, usage, hit = cached["response"], (cached["prompt_tokens"], cached["completion_tokens"]), True
    else:
        response = make_llm(config).complete([request])[0]
        if not response.ok:
            result["answer"], result["answer_error"] = None, response.error
            return result
        text, usage, hit = response.text, (response.prompt_tokens, response.completion_tokens), False
    cited = sorted({int(n) for n in re.findall(r"\[(\d+)\]", text) if 0 < int(n) <= len(result["evidence"])})
    result["answer"] = text.strip()
    result["citations"] = [{"n": n, "doc_id": result["evidence"][n - 1]["doc_id"], "chunk_id": result["evidence"][n - 1]["chunk_id"]} for n in cited]
    result["llm"] = {"model": config.model, "cache_hit": hit, "prompt_tokens": usage[0], "completion_tokens": usage[1], "key": key}
    return result

"""Answer synthesis: an LLM writes the answer from the retrieved evidence only, citing it by
number ([1], [2], ...). Calls go through the same request cache as extraction."""

from __future__ import annotations

import re

from graphwright.llm import LLMRequest, make_llm
from graphwright.llm.cache import complete_through_cache

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


def synthesize(question: str, result: dict, config, store) -> dict:
    """Add `answer`, `citations` (evidence numbers the answer cites) and `llm` usage to `result`."""
    request = answer_request(question, result["evidence"], config)
    ((key, response, hit),) = complete_through_cache(store, lambda: make_llm(config), [request], config.model)
    if not response.ok:
        result["answer"], result["answer_error"] = None, response.error
        return result
    text, usage = response.text, (response.prompt_tokens, response.completion_tokens)
    cited = sorted({int(n) for n in re.findall(r"\[(\d+)\]", text) if 0 < int(n) <= len(result["evidence"])})
    result["answer"] = text.strip()
    result["citations"] = [{"n": n, "doc_id": result["evidence"][n - 1]["doc_id"], "chunk_id": result["evidence"][n - 1]["chunk_id"]} for n in cited]
    result["llm"] = {"model": config.model, "cache_hit": hit, "prompt_tokens": usage[0], "completion_tokens": usage[1], "key": key}
    return result

"""Answer synthesis: an LLM writes the answer from the retrieved evidence only, citing it by
number ([1], [2], ...). Calls go through the same request cache as extraction."""

from __future__ import annotations

import re

from graphwright.engines.llm.cache import CallLog, complete_through_cache
from graphwright.engines.llm.interface import LLMRequest
from graphwright.engines.llm.session import query_session

PROMPT_VERSION = "answer-v1"
SYSTEM = (
    "Answer the question using only the numbered evidence below. Cite the evidence you use by its "
    "number in square brackets, like [2]. If the evidence does not contain the answer, say so. Be brief."
)


def background(result: dict, limit: int = 20) -> str:
    """The mode's graph context (reports, entities, relationships) as text; the local mode has
    already fitted these to its token budget."""
    parts = []
    if result.get("reports"):
        parts.append("Community reports:\n" + "\n".join(f"- {r['title']}: {r['summary']}" for r in result["reports"][:limit]))
    if result.get("entities"):
        parts.append("Entities:\n" + "\n".join(f"- {e['name']} ({e['type']}): {e['description']}" for e in result["entities"][:limit]))
    if result.get("relationships"):
        parts.append("Relationships:\n" + "\n".join(f"- {r['source']} - {r['target']}: {r['description']}" for r in result["relationships"][:limit]))
    return "\n\n".join(parts)


def answer_request(question: str, evidence: list[dict], config, max_chars: int = 6000, context: str = "") -> LLMRequest:
    blocks, used = [], 0
    for n, e in enumerate(evidence, 1):
        text = " ".join(e["text"].split())
        block = f"[{n}] ({e.get('title') or e['doc_id']}) {text}"
        if blocks and used + len(block) > max_chars:
            break
        blocks.append(block)
        used += len(block)
    return LLMRequest(
        messages=(("system", SYSTEM + ("\n\nBackground (not citable):\n" + context if context else "")
                   + "\n\nEvidence:\n" + "\n".join(blocks)), ("user", question)),
        max_tokens=min(config.max_tokens, 512),
        temperature=config.temperature,
        prompt_version=PROMPT_VERSION,
    )


def synthesize(question: str, result: dict, config, store) -> dict:
    """Add `answer`, `citations` (evidence numbers the answer cites) and `llm` usage to `result`."""
    # a token-budgeted context (local) is used whole
    max_chars = 10**9 if "context_tokens" in result else 6000
    request = answer_request(question, result["evidence"], config, max_chars, context=background(result))
    ((key, response, hit),) = complete_through_cache(store, query_session(config).engine, [request], config.model)
    if not response.ok:
        result["answer"], result["answer_error"] = None, response.error
        return result
    if not hit:  # the same question over the same evidence costs nothing next time
        CallLog(store, config, "query").record_answers([(key, request, response)])
    text, usage = response.text, (response.prompt_tokens, response.completion_tokens)
    cited = sorted({int(n) for n in re.findall(r"\[(\d+)\]", text) if 0 < int(n) <= len(result["evidence"])})
    result["answer"] = text.strip()
    result["citations"] = [{"n": n, "doc_id": result["evidence"][n - 1]["doc_id"], "chunk_id": result["evidence"][n - 1]["chunk_id"]} for n in cited]
    result["llm"] = {"model": config.model, "cache_hit": hit, "prompt_tokens": usage[0], "completion_tokens": usage[1], "key": key}
    return result

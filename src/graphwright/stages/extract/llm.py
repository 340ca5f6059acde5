"""Extraction with an LLM: one request per chunk (plus optional gleaning rounds), answered from
the index's request cache when it can be, parsed leniently. A chunk whose request or answer
still fails after retries comes back with status 'failed' and the reason; nothing is dropped
silently. Workers only read the cache; the driver writes new answers and the call records."""

from __future__ import annotations

import pyarrow as pa

from graphwright.config import ExtractConfig, LLMConfig
from graphwright.engines.llm import make_llm
from graphwright.engines.llm.cache import complete_through_cache
from graphwright.engines.llm.interface import LLMRequest
from graphwright.stages.extract.parse import ParseError, parse_extraction
from graphwright.stages.extract.prompts import (
    EXTRACTION_SCHEMA,
    GLEANING_PROMPT,
    PROMPT_VERSION,
    system_prompt,
)
from graphwright.stages.extract.rows import EXTRACTION_BATCH_SCHEMA
from graphwright.storage.delta import IndexStore


def extraction_request(system: str, history: tuple[tuple[str, str], ...], config: LLMConfig) -> LLMRequest:
    return LLMRequest(
        messages=(("system", system),) + history,
        json_schema=EXTRACTION_SCHEMA,
        max_tokens=config.max_tokens,
        temperature=config.temperature,
        prompt_version=PROMPT_VERSION,
    )


def merge_relationships(relationships: list[dict]) -> list[dict]:
    """One assertion per (source, target): models repeat a relationship (small ones loop, and
    gleaning rounds restate); keep the strongest weight and every distinct description."""
    merged: dict[tuple[str, str], dict] = {}
    for r in relationships:
        key = (r["source"], r["target"])
        if key not in merged:
            merged[key] = dict(r)
            continue
        m = merged[key]
        m["weight"] = max(m["weight"], r["weight"])
        if r["description"] and r["description"] not in m["description"]:
            m["description"] = (m["description"] + " " + r["description"]).strip()
    return list(merged.values())


class LLMExtractor:
    def __init__(self, config: ExtractConfig, llm: LLMConfig, index_root: str, key: str):
        self.config, self.llm_config = config, llm
        self.key = key  # extractors.extractor_key: what the completion markers name
        self.engine = make_llm(llm)
        self.store = IndexStore(index_root)
        self.system = system_prompt(config.entity_types)

    def __call__(self, chunks: pa.Table) -> pa.Table:
        ids = list(zip(chunks.column("chunk_id").to_pylist(), chunks.column("doc_id").to_pylist()))
        texts = chunks.column("text").to_pylist()
        histories = [(("user", text),) for text in texts]
        results = [{"chunk_id": c, "doc_id": d, "extractor": self.key, "status": "ok", "error": None,
                    "mentions": {}, "assertions": [], "calls": []} for c, d in ids]
        active = list(range(len(results)))
        for round_ in range(1 + self.config.gleanings):
            if not active:
                break
            answers = complete_through_cache(self.store, lambda: self.engine,
                                             [extraction_request(self.system, histories[i], self.llm_config) for i in active],
                                             self.llm_config.model)
            still = []
            for i, (key, resp, hit) in zip(active, answers):
                res = results[i]
                res["calls"].append({
                    "key": key, "prompt_version": PROMPT_VERSION, "response": resp.text, "cache_hit": hit,
                    "prompt_tokens": resp.prompt_tokens, "completion_tokens": resp.completion_tokens,
                    "latency_s": resp.latency_s, "attempts": resp.attempts, "error": resp.error,
                })
                if not resp.ok:
                    if round_ == 0:  # a failed gleaning round keeps what the first round found
                        res["status"], res["error"] = "failed", f"LLM request failed: {resp.error}"
                    continue
                try:
                    entities, relationships = parse_extraction(resp.text, self.config.entity_types, texts[i])
                except ParseError as exc:
                    if round_ == 0:
                        res["status"], res["error"] = "failed", f"unusable answer: {exc}"
                        res["calls"][-1]["error"] = str(exc)  # not cached: the next run asks again
                    continue
                for e in entities:
                    prior = res["mentions"].setdefault(e["name"], {**e, "count": 0})
                    prior["count"] += e["count"]
                res["assertions"].extend(relationships)
                histories[i] = histories[i] + (("assistant", resp.text), ("user", GLEANING_PROMPT))
                still.append(i)
            active = still
        for res in results:
            ok = res["status"] == "ok"
            res["mentions"] = sorted(res["mentions"].values(), key=lambda m: m["name"]) if ok else []
            res["assertions"] = merge_relationships(res["assertions"]) if ok else []
        return pa.Table.from_pylist(results, schema=EXTRACTION_BATCH_SCHEMA)

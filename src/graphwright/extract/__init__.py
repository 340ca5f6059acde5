"""Extraction engines. Each is a batch function: chunks (chunk_id, doc_id, text) -> one row per
chunk with its status and its mentions and assertions as nested lists (EXTRACTION_BATCH_SCHEMA).
Engines are chosen by configuration and imported only when chosen."""

from __future__ import annotations

import pyarrow as pa

from graphwright.config import ExtractConfig, LLMConfig

MENTION_STRUCT = pa.struct(
    [("name", pa.string()), ("type", pa.string()), ("description", pa.string()), ("count", pa.int32())]
)
ASSERTION_STRUCT = pa.struct(
    [("source", pa.string()), ("target", pa.string()), ("description", pa.string()), ("weight", pa.float64())]
)
CALL_STRUCT = pa.struct(
    [("key", pa.string()), ("prompt_version", pa.string()), ("response", pa.string()), ("cache_hit", pa.bool_()),
     ("prompt_tokens", pa.int64()), ("completion_tokens", pa.int64()), ("latency_s", pa.float64()),
     ("attempts", pa.int32()), ("error", pa.string())]
)
EXTRACTION_BATCH_SCHEMA = pa.schema(
    [
        ("chunk_id", pa.string()),
        ("doc_id", pa.string()),
        ("extractor", pa.string()),
        ("status", pa.string()),
        ("error", pa.string()),
        ("mentions", pa.list_(MENTION_STRUCT)),
        ("assertions", pa.list_(ASSERTION_STRUCT)),
        ("calls", pa.list_(CALL_STRUCT)),  # LLM requests made (or answered by the cache) for the chunk
    ]
)


def extractor_key(config: ExtractConfig, llm: LLMConfig | None = None) -> str:
    """Identifies what produced an extraction; a chunk is extracted once per key."""
    if config.engine == "nlp":
        from graphwright.extract.nlp import RULES_VERSION

        return f"nlp@{RULES_VERSION}"
    if config.engine == "llm":
        from graphwright.extract.prompts import PROMPT_VERSION

        if llm is None or not llm.model:
            raise ValueError("extract.engine is 'llm' but llm.model is not set (config file or GRAPHWRIGHT_LLM__MODEL)")
        return f"llm:{llm.model}@{PROMPT_VERSION}+g{config.gleanings}"
    raise ValueError(f"unknown extraction engine {config.engine!r}")


def extractor_stage(config: ExtractConfig, llm: LLMConfig | None, index_root: str):
    """(batch function class, constructor args, on_driver) for the configured engine. The vllm
    engine runs on the driver: each call starts its own Ray Data job over the GPU replicas."""
    if config.engine == "nlp":
        from graphwright.extract.nlp import NlpExtractor

        return NlpExtractor, (config,), False
    if config.engine == "llm":
        from graphwright.extract.llm import LLMExtractor

        extractor_key(config, llm)  # fail early on a missing model
        # vllm starts its own Ray Data job per call; llamacpp holds one in-process model
        return LLMExtractor, (config, llm, index_root), llm.engine in ("vllm", "llamacpp")
    raise ValueError(f"unknown extraction engine {config.engine!r}")

"""The extractors behind one interface. Each is a batch function: chunks (chunk_id, doc_id, text) ->
one row per chunk with its status and its mentions and assertions as nested lists (rows).
Engines are chosen by configuration and imported only when chosen."""

from __future__ import annotations

from graphwright.config import ExtractConfig, LLMConfig


def extractor_key(config: ExtractConfig, llm: LLMConfig | None = None) -> str:
    """Identifies what produced an extraction; a chunk is extracted once per key."""
    if config.engine == "nlp":
        from graphwright.stages.extract.nlp import RULES_VERSION

        return f"nlp@{RULES_VERSION}"
    if config.engine == "llm":
        from graphwright.stages.extract.prompts import PROMPT_VERSION

        if llm is None or not llm.model:
            raise ValueError("extract.engine is 'llm' but llm.model is not set (config file or GRAPHWRIGHT_LLM__MODEL)")
        return f"llm:{llm.model}@{PROMPT_VERSION}+g{config.gleanings}"
    raise ValueError(f"unknown extraction engine {config.engine!r}")


def extractor_stage(config: ExtractConfig, llm: LLMConfig | None, index_root: str):
    """(batch function class, constructor args, on_driver) for the configured engine. The vllm
    engine runs on the driver: each call starts its own Ray Data job over the GPU replicas."""
    if config.engine == "nlp":
        from graphwright.stages.extract.nlp import NlpExtractor

        return NlpExtractor, (config,), False
    if config.engine == "llm":
        from graphwright.stages.extract.llm import LLMExtractor

        # vllm starts its own Ray Data job per call; llamacpp holds one in-process model
        return LLMExtractor, (config, llm, index_root, extractor_key(config, llm)), llm.engine in ("vllm", "llamacpp")
    raise ValueError(f"unknown extraction engine {config.engine!r}")

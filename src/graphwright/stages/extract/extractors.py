"""What identifies an extractor. Each extractor is a batch function: chunks (chunk_id, doc_id,
text) -> one row per chunk with its status and its mentions and assertions as nested lists
(rows.EXTRACTION_BATCH_SCHEMA): the `nlp` rules (nlp.NlpExtractor) or an LLM (llm.LLMExtractor,
fed by requests.plan_extraction)."""

from __future__ import annotations

from graphwright.config import ExtractConfig, LLMConfig


def extractor_key(config: ExtractConfig, llm: LLMConfig | None = None) -> str:
    """Identifies what produced an extraction; a chunk is extracted once per key."""
    if config.engine == "nlp":
        from graphwright.stages.extract.nlp import RULES_VERSION

        return f"nlp@{RULES_VERSION}"
    if config.engine == "llm":
        from graphwright.stages.extract.prompts import PROMPT_VERSION
        from graphwright.stages.extract.validate import bounds_tag

        if llm is None or not llm.model:
            raise ValueError("extract.engine is 'llm' but llm.model is not set (config file or GRAPHWRIGHT_LLM__MODEL)")
        # the reply bounds too: answers older rules accepted are checked again (from the cache)
        return f"llm:{llm.model}@{PROMPT_VERSION}+g{config.gleanings}+{bounds_tag(config)}"
    raise ValueError(f"unknown extraction engine {config.engine!r}")

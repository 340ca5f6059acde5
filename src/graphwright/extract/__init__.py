"""Extraction engines. Each is a batch function: chunks (chunk_id, doc_id, text) -> one row per
chunk with its status and its mentions and assertions as nested lists (EXTRACTION_BATCH_SCHEMA).
Engines are chosen by configuration and imported only when chosen."""

from __future__ import annotations

import pyarrow as pa

from graphwright.config import ExtractConfig

MENTION_STRUCT = pa.struct(
    [("name", pa.string()), ("type", pa.string()), ("description", pa.string()), ("count", pa.int32())]
)
ASSERTION_STRUCT = pa.struct(
    [("source", pa.string()), ("target", pa.string()), ("description", pa.string()), ("weight", pa.float64())]
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
    ]
)


def extractor_key(config: ExtractConfig) -> str:
    """Identifies what produced an extraction; a chunk is extracted once per key."""
    if config.engine == "nlp":
        from graphwright.extract.nlp import RULES_VERSION

        return f"nlp@{RULES_VERSION}"
    raise ValueError(f"unknown extraction engine {config.engine!r}")


def make_extractor(config: ExtractConfig):
    if config.engine == "nlp":
        from graphwright.extract.nlp import NlpExtractor

        return NlpExtractor(config)
    raise ValueError(f"unknown extraction engine {config.engine!r}")

"""What an extractor returns: one row per chunk with its status, its mentions and assertions as
nested lists, and the LLM calls made for it (EXTRACTION_BATCH_SCHEMA)."""

from __future__ import annotations

import pyarrow as pa

MENTION_STRUCT = pa.struct(
    [("name", pa.string()), ("type", pa.string()), ("description", pa.string()), ("count", pa.int32())]
)


ASSERTION_STRUCT = pa.struct(
    [("source", pa.string()), ("target", pa.string()), ("description", pa.string()), ("weight", pa.float64())]
)


CALL_STRUCT = pa.struct(
    [("key", pa.string()), ("prompt_version", pa.string()), ("response", pa.string()), ("cache_hit", pa.bool_()),
     ("prompt_tokens", pa.int64()), ("completion_tokens", pa.int64()), ("latency_s", pa.float64()),
     ("attempts", pa.int32()), ("error", pa.string()), ("cache", pa.bool_())]
)


EXTRACTION_BATCH_SCHEMA = pa.schema(
    [
        ("chunk_id", pa.string()),
        ("doc_id", pa.string()),
        ("extractor", pa.string()),
        ("status", pa.string()),  # ok | partial (a repaired reply, asked once more next run) | failed
        ("error", pa.string()),
        ("mentions", pa.list_(MENTION_STRUCT)),
        ("assertions", pa.list_(ASSERTION_STRUCT)),
        ("calls", pa.list_(CALL_STRUCT)),  # LLM requests made (or answered by the cache) for the chunk
        ("notes", pa.string()),  # JSON: what reply validation dropped, by reason (llm); null when nothing
    ]
)

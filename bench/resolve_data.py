"""Mentions and assertions of a development corpus (../shared/data/<name>/corpus.jsonl) as the
default nlp extractor produces them, without building an index; optionally with controlled
misspellings injected into the text first. Used by bench/resolve_quality.py and to make the
labeled set bench/data/resolve_labels.jsonl."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa

from graphwright import ids
from graphwright.config import ChunkConfig, ExtractConfig
from graphwright.stages.chunk import chunk_text
from graphwright.stages.extract.nlp import extract_chunk

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"  # ../shared/data beside the repo


def load_corpus(name: str) -> list[dict]:
    path = DATA / name / "corpus.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.open()]


def perturb(text: str, replacements: dict[str, str], every: int = 3) -> str:
    """Replace every `every`-th whole-word occurrence of each name (the 2nd, 5th, ...) with its
    misspelling, so the correct spelling stays in the text too."""
    for original, variant in sorted(replacements.items()):
        seen = [0]

        def swap(m, seen=seen, variant=variant):
            seen[0] += 1
            return variant if seen[0] % every == 2 else m.group(0)

        text = re.sub(rf"(?<![\w']){re.escape(original)}(?![\w])", swap, text)
    return text


def extract_corpus(docs: list[dict], replacements: dict[str, str] | None = None) -> tuple[pa.Table, pa.Table]:
    chunk_cfg, extract_cfg = ChunkConfig(), ExtractConfig()
    mentions, assertions = [], []
    for doc in docs:
        text = perturb(doc["text"], replacements) if replacements else doc["text"]
        doc_id = ids.doc_id(doc["id"])
        for chunk in chunk_text(doc_id, text, chunk_cfg.size_tokens, chunk_cfg.overlap_tokens):
            ms, as_ = extract_chunk(chunk["text"], extract_cfg)
            extra = {"chunk_id": chunk["chunk_id"], "doc_id": doc_id}
            mentions += [{**m, **extra} for m in ms]
            assertions += [{**a, **extra} for a in as_]
    m_schema = pa.schema([("name", pa.string()), ("type", pa.string()), ("description", pa.string()), ("count", pa.int32()),
                          ("chunk_id", pa.string()), ("doc_id", pa.string())])
    a_schema = pa.schema([("source", pa.string()), ("target", pa.string()), ("description", pa.string()),
                          ("weight", pa.float64()), ("chunk_id", pa.string()), ("doc_id", pa.string())])
    return pa.Table.from_pylist(mentions, schema=m_schema), pa.Table.from_pylist(assertions, schema=a_schema)

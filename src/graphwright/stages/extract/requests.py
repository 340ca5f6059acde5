"""LLM extraction, the driver's part: every chunk to extract gets its requests computed here,
answered from the cache with one lookup per round for the whole stage, and chunks whose first
request is identical (the same text) are sent once. The workers then only ask the engine for
what the cache does not hold, and never read the cache themselves.

A gleaning round's request holds the previous round's answer, so its key is known only once that
answer is: round r+1 is looked up for the chunks whose round r was a cache hit."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from graphwright.config import ExtractConfig, LLMConfig
from graphwright.engines.llm.cache import lookup
from graphwright.engines.llm.interface import LLMRequest
from graphwright.stages.extract.prompts import (
    EXTRACTION_SCHEMA,
    GLEANING_PROMPT,
    PROMPT_VERSION,
    system_prompt,
)
from graphwright.storage.delta import IndexStore

CACHED_ROUND = pa.struct([("key", pa.string()), ("response", pa.string()), ("prompt_tokens", pa.int64()),
                          ("completion_tokens", pa.int64())])
# what the extraction workers receive per chunk: its text and the answers of its first rounds the cache holds
WORK_SCHEMA = pa.schema([("chunk_id", pa.string()), ("doc_id", pa.string()), ("text", pa.string()),
                         ("cached", pa.list_(CACHED_ROUND)),
                         ("retried", pa.bool_())])  # its last reply needed repairs: this one is trusted as it is


def extraction_request(system: str, history: tuple[tuple[str, str], ...], config: LLMConfig) -> LLMRequest:
    return LLMRequest(
        messages=(("system", system),) + history,
        json_schema=EXTRACTION_SCHEMA,
        max_tokens=config.max_tokens,
        temperature=config.temperature,
        prompt_version=PROMPT_VERSION,
    )


def next_history(history: tuple[tuple[str, str], ...], answer: str) -> tuple[tuple[str, str], ...]:
    """The conversation of the next gleaning round, after `answer`."""
    return history + (("assistant", answer), ("user", GLEANING_PROMPT))


@dataclass
class ExtractionPlan:
    work: pa.Table  # WORK_SCHEMA: one row per distinct first request
    copies: dict[str, list[tuple[str, str]]]  # a sent chunk id -> the (chunk_id, doc_id) of chunks with the same text
    stats: dict


def plan_extraction(store: IndexStore, chunks: pa.Table, config: ExtractConfig, llm: LLMConfig,
                    retried: set[str] = frozenset()) -> ExtractionPlan:
    """`chunks` (chunk_id, doc_id, text) to extract -> the rows to send and the copies to make.
    `retried`: chunks whose last reply needed repairs (status partial)."""
    stats = {"lookup_s": 0.0, "lookup_keys": 0, "duplicates": 0}
    system = system_prompt(config.entity_types)
    ids, docs, texts = (chunks.column(c).to_pylist() for c in ("chunk_id", "doc_id", "text"))
    histories = [(("user", t),) for t in texts]
    keys = [extraction_request(system, h, llm).cache_key(llm.model) for h in histories]
    first: dict[str, int] = {}
    copies: dict[str, list[tuple[str, str]]] = {}
    sent = []
    for i, key in enumerate(keys):
        if key in first:
            copies.setdefault(ids[first[key]], []).append((ids[i], docs[i]))
        else:
            first[key] = i
            sent.append(i)
    stats["duplicates"] = len(keys) - len(sent)
    cached: dict[int, list[dict]] = {i: [] for i in sent}
    active = {i: keys[i] for i in sent}
    for round_ in range(1 + config.gleanings):
        found = lookup(store, list(active.values()), stats)
        if not found.num_rows:
            break
        where = pc.index_in(pa.array(list(active.values()), pa.string()), value_set=found.column("key")).to_pylist()
        rows = found.to_pylist()
        following = {}
        for (i, key), at in zip(active.items(), where):
            if at is None:
                continue
            cached[i].append(rows[at])
            if round_ < config.gleanings:
                histories[i] = next_history(histories[i], rows[at]["response"])
                following[i] = extraction_request(system, histories[i], llm).cache_key(llm.model)
        active = following
        if not active:
            break
    stats["cached_rounds"] = sum(len(c) for c in cached.values())
    work = pa.table({
        "chunk_id": pa.array([ids[i] for i in sent], pa.string()),
        "doc_id": pa.array([docs[i] for i in sent], pa.string()),
        "text": pa.array([texts[i] for i in sent], pa.string()),
        "cached": pa.array([cached[i] for i in sent], pa.list_(CACHED_ROUND)),
        "retried": pa.array([ids[i] in retried for i in sent], pa.bool_()),
    }, schema=WORK_SCHEMA)
    return ExtractionPlan(work, copies, stats)


def with_copies(results: pa.Table, copies: dict[str, list[tuple[str, str]]]) -> pa.Table:
    """Extraction results plus one row per chunk whose text another sent chunk had (its findings
    are that chunk's; it made no call of its own)."""
    if not copies or not results.num_rows:
        return results
    originals = results.filter(pc.is_in(results.column("chunk_id"), value_set=pa.array(list(copies), pa.string())))
    extra = []
    for row in originals.to_pylist():
        for chunk_id, doc_id in copies.get(row["chunk_id"], ()):
            extra.append({**row, "chunk_id": chunk_id, "doc_id": doc_id, "calls": []})
    if not extra:
        return results
    return pa.concat_tables([results, pa.Table.from_pylist(extra, schema=results.schema)])

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
    `retried`: chunks whose last reply needed repairs (status partial). Texts stay in Arrow: a
    slice at a time becomes Python strings, to hash their requests."""
    stats = {"lookup_s": 0.0, "lookup_keys": 0, "duplicates": 0}
    system = system_prompt(config.entity_types)
    ids, docs, texts = (chunks.column(c) for c in ("chunk_id", "doc_id", "text"))
    first: dict[str, int] = {}
    copies: dict[str, list[tuple[str, str]]] = {}
    sent: list[int] = []
    keys: list[str] = []
    for start in range(0, chunks.num_rows, SLICE):
        for offset, text in enumerate(texts.slice(start, SLICE).to_pylist()):
            i, key = start + offset, extraction_request(system, (("user", text),), llm).cache_key(llm.model)
            if key in first:
                copies.setdefault(ids[first[key]].as_py(), []).append((ids[i].as_py(), docs[i].as_py()))
            else:
                first[key] = i
                sent.append(i)
                keys.append(key)
    del first
    stats["duplicates"] = chunks.num_rows - len(sent)
    cached: dict[int, list[dict]] = {}  # position in `sent` -> the cached answers of its first rounds
    active = dict(enumerate(keys))
    for round_ in range(1 + config.gleanings):
        found = lookup(store, list(active.values()), stats)
        if not found.num_rows:
            break
        where = pc.index_in(pa.array(list(active.values()), pa.string()), value_set=found.column("key")).to_pylist()
        rows = found.to_pylist()
        following = {}
        for (n, _), at in zip(active.items(), where):
            if at is None:
                continue
            cached.setdefault(n, []).append(rows[at])
            if round_ < config.gleanings:  # the next round's request holds this answer
                history = (("user", texts[sent[n]].as_py()),)
                for answer in cached[n]:
                    history = next_history(history, answer["response"])
                following[n] = extraction_request(system, history, llm).cache_key(llm.model)
        active = following
        if not active:
            break
    stats["cached_rounds"] = sum(len(c) for c in cached.values())
    work = chunks.select(["chunk_id", "doc_id", "text"])
    if len(sent) < chunks.num_rows:  # some texts repeat: only the first of each is sent (a copy of its rows)
        work = work.take(pa.array(sent, pa.int64()))
    work = work.append_column("cached", pa.array([cached.get(n, []) for n in range(len(sent))], pa.list_(CACHED_ROUND)))
    work = work.append_column("retried", pc.is_in(work.column("chunk_id"), value_set=pa.array(sorted(retried), pa.string())))
    return ExtractionPlan(work.cast(WORK_SCHEMA), copies, stats)


SLICE = 65_536  # texts turned into Python strings at a time


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

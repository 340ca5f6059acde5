"""LLM community reports for some communities of an index: all of them at index time
(`report.mode: llm`, leaves first), or, in lazy mode, those a query touches and the children
their contexts need (`ensure_reports`). Planning, prompts and parsing are in report.llm."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pyarrow as pa

from graphwright.config import ReportConfig
from graphwright.stages.report.extractive import (
    GENERATOR,
    extractive_report,
    report_context,
)
from graphwright.stages.report.row_tokens import RowTokens
from graphwright.stages.report.support import Support
from graphwright.storage import contracts
from graphwright.storage import lineage as lineage_codes
from graphwright.storage.delta import IndexStore
from graphwright.util.laps import Laps
from graphwright.util.rows import RowMap, row_dicts
from graphwright.util.threads import side_by_side

# without their chunk lists, which only the communities that take text units read (lineage)
ENTITY_COLUMNS = ["entity_id", "name", "type", "description", "degree", "mention_count"]
RELATIONSHIP_COLUMNS = ["relationship_id", "source", "target", "description", "weight", "source_id", "target_id"]


def _subtree(communities: dict[str, dict], roots: list[str]) -> list[dict]:
    out, stack = {}, [r for r in roots if r in communities]
    while stack:
        cid = stack.pop()
        if cid not in out:
            out[cid] = communities[cid]
            stack.extend(k for k in communities[cid]["children_ids"] if k in communities)
    return list(out.values())


class LLMReports:
    """Plans and writes LLM reports for some communities of an index (all of them at index time;
    those a query touches, and the children they need, in lazy mode), reading the graph at `pins`
    (a published version's table versions; the current ones by default)."""

    def __init__(self, store: IndexStore, config: ReportConfig, llm, communities: list[dict], pins: dict[str, int] | None = None,
                 engine: Callable[[], object] | None = None, known: RowTokens | None = None,
                 fixed: dict[str, str] | None = None):
        """`engine`: the engine to write with, started on the first request the cache cannot
        answer (the run's session; by default this process's query session). `known`: row
        token counts of earlier runs (row_tokens). `fixed`: {community id: input hash} of
        communities whose reports are reused unplanned (llm.plan_reports)."""
        from graphwright.stages.report.llm import plan_reports, with_chunk_counts

        self.store, self.config, self.llm = store, config, llm
        laps = self.laps = Laps()
        self.engine = engine or (lambda: _query_engine(llm))
        pins = pins or {}

        def rows(name: str, column: str, values, columns: list[str]) -> pa.Table:  # one scan for many keys
            return store.rows_in(name, column, values, columns, version=pins.get(name))

        fixed = fixed or {}
        planned = [c for c in communities if c["community_id"] not in fixed]
        members = {e for c in planned for e in c["entity_ids"]}  # children's members are their parent's
        ent, rel = side_by_side(lambda: rows("entities", "entity_id", members, ENTITY_COLUMNS),
                                 lambda: rows("relationships", "relationship_id", {r for c in planned for r in c["relationship_ids"]},
                                              RELATIONSHIP_COLUMNS), "report-rows")
        self.ent, self.rel = RowMap(ent, "entity_id"), RowMap(rel, "relationship_id")
        laps.lap("rows_s")

        def chunk_text(wanted: set[str]) -> dict[str, str]:
            return {r["chunk_id"]: r["text"] for r in row_dicts(rows("chunks", "chunk_id", wanted, ["chunk_id", "text"]))}

        coded = lineage_codes.current(store, pins)  # resolve's codes of the chunk lists, if they are of these versions

        def lineage(entity_ids: set[str], relationship_ids: set[str]) -> Support:  # as Arrow lists, coded once
            if coded is not None:
                return Support(coded.chunk_ids, coded.entity_lists(entity_ids), coded.relationship_lists(
                    *self.rel.columns_of(relationship_ids, ["relationship_id", "source_id", "target_id"])))

            def lists(name: str, key: str, wanted: set[str]) -> Callable:
                return lambda: store.rows_in(name, key, wanted, [key, "chunk_ids"], version=pins.get(name)) if wanted else None
            # the entities' and the relationships' chunk lists (0.8 GB at 1.2M chunks), scanned in DataFusion
            return Support.of(*side_by_side(lists("entities", "entity_id", entity_ids),
                                            lists("relationships", "relationship_id", relationship_ids), "report-lineage"))

        communities = with_chunk_counts(communities, lineage, fixed)  # the plans and fallbacks rate by the count
        self.communities = {c["community_id"]: c for c in communities}
        laps.lap("chunk_counts_s")
        self.plans = plan_reports(communities, self.ent, self.rel, chunk_text, config, llm.model, known, fixed, lineage,
                                  answer=llm.answer_settings())
        laps.lap("plan_s")
        self.lookup_stats: dict = {}

    def _fallback(self, cid: str, rows: dict[str, dict]) -> dict:
        c = self.communities[cid]
        context = report_context(c, self.ent, self.rel, [rows[k] for k in c["children_ids"] if k in rows], self.config)
        return {**extractive_report(context, self.config), "generator": GENERATOR}

    def write(self, targets: list[str], existing: dict[str, dict]) -> tuple[dict[str, dict], list[dict], dict]:
        """({community_id: report row}, call records, counts) for `targets` and what they need."""
        from graphwright.engines.llm.cache import cached_answers
        from graphwright.engines.llm.session import in_flight
        from graphwright.stages.report.schedule import write_reports

        self.llm.require(f"report.mode {self.config.mode}")
        stream = _LazyStream(self.engine, in_flight(self.llm))
        self.laps.restart()
        try:
            return write_reports(self.plans, targets, existing, lambda keys: cached_answers(self.store, keys, self.lookup_stats),
                                 stream, self._fallback, self.config, self.llm)
        finally:
            stream.close()
            self.laps.lap("write_s")  # the LLM calls, the cache lookups and the fallbacks


class _LazyStream:
    """A Stream whose engine is started on the first submission (a run whose reports are all
    reused or cached starts none)."""

    def __init__(self, engine: Callable[[], object], in_flight: int):
        self._engine, self._in_flight, self._stream = engine, in_flight, None

    def _get(self):
        from graphwright.engines.llm.session import Stream

        if self._stream is None:
            engine = self._engine()
            if getattr(engine, "batched", False):  # a wave of reports is one batch
                from graphwright.engines.llm.batch.engine import Waves

                self._stream = Waves(engine)
            else:
                self._stream = Stream(engine, self._in_flight)
        return self._stream

    def submit(self, tag, request, check=None) -> None:
        self._get().submit(tag, request, check)

    def completed(self):
        return self._stream.completed() if self._stream is not None else iter(())

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()


def _query_engine(llm):
    from graphwright.engines.llm.session import query_session

    return query_session(llm).engine()


def to_table(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(sorted(rows, key=lambda r: r["community_id"]), schema=contracts.schema("community_reports").arrow)


_LAZY_WRITES = threading.Lock()
REPORT_COLUMNS = contracts.schema("community_reports").arrow.names


def reports_by_hash(store: IndexStore, hashes) -> dict[str, dict]:
    """Reports with these input hashes, from the index's reports and the ones queries wrote."""
    found = {}
    for name in ("lazy_reports", "community_reports"):  # an index run's copy wins
        found.update({r["input_hash"]: r for r in row_dicts(store.rows_in(name, "input_hash", hashes, REPORT_COLUMNS))})
    return found


def ensure_reports(store: IndexStore, community_ids: list[str], config: ReportConfig, llm, *,
                   pins: dict[str, int] | None = None, run_id: str | None = None) -> list[dict]:
    """Reports of `community_ids` (those of at least `min_size` entities), writing the missing
    ones (and the children reports their contexts need, first) for lazy mode.

    The graph is read at `pins` (a published version's table versions); reports are looked up by
    input hash in the latest `community_reports` and `lazy_reports`, so a report written for any
    version serves every version whose community has the same inputs. New reports are appended
    to `lazy_reports` (a failed one is returned as its extractive fallback but not stored, so a
    later query retries it), never merged: a query and an index run never fail each other, and
    the next index run copies them into `community_reports`. The calls are recorded in llm_calls
    with stage 'report' under `run_id`."""
    def read(name, **kw):
        return store.read(name, version=(pins or {}).get(name), **kw)

    everything = {c["community_id"]: c for c in row_dicts(read("communities"))}
    targets = [c for c in dict.fromkeys(community_ids) if c in everything and everything[c]["size"] >= config.min_size]
    if not targets:
        return []
    # the row token counts the index run left: a query tokenizes only rows it has not seen
    reports = LLMReports(store, config, llm, _subtree(everything, targets), pins, known=RowTokens.load(store.files))
    from graphwright.stages.report.llm import needed

    hashes = [reports.plans[c].input_hash for c in needed(reports.plans, targets)]
    # one writer at a time in this process: a report written meanwhile by another query is found,
    # not paid twice (across processes the LLM cache answers a request another process made)
    with _LAZY_WRITES:
        existing = reports_by_hash(store, hashes)
        rows, calls, _ = reports.write(targets, existing)
        return _store_lazy(store, targets, rows, calls, existing, llm, run_id)


def _store_lazy(store: IndexStore, targets: list[str], rows: dict, calls: list, existing: dict, llm, run_id: str | None) -> list[dict]:
    from graphwright.engines.llm.cache import record_calls

    gen = generator_of(llm)
    run_id = run_id or _query_run_id()
    fresh = [r for cid, r in rows.items() if r["generator"] == gen and existing.get(r["input_hash"], {}).get("community_id") != cid]
    if fresh:
        table = to_table(fresh)
        store.append("lazy_reports", table.append_column("run_id", pa.array([run_id] * table.num_rows, pa.string())))
    if calls:
        record_calls(store, llm, run_id, "report", calls)
    return [rows[c] for c in targets]


def generator_of(llm) -> str:
    from graphwright.stages.report.llm import generator

    return generator(llm.model)


def _query_run_id() -> str:
    from datetime import UTC, datetime

    return datetime.now(UTC).strftime("query-%Y%m%dT%H%M%S%fZ")

"""The index pipeline: stages over tables. Each stage reads named tables, derives its work from
what they hold (so a stage killed halfway and rerun redoes exactly the missing part), and writes
only its own tables. The computations are the plain functions of the stage modules; this module
does the I/O, the batching to executors, and the accounting."""

from __future__ import annotations

import fnmatch
import json
import os
import resource
import tempfile
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from graphwright import ids, memory, publish, tables
from graphwright.chunking import DOCUMENTS_PER_BATCH, Chunker
from graphwright.cluster import ChunkLists, cluster_parts, graph_hash
from graphwright.config import PipelineConfig
from graphwright.costs import stage_cost
from graphwright.embed import EmbedBatch, make_embedder, model_name
from graphwright.executors import BatchStage, LocalExecutor, make_executor
from graphwright.extract import extractor_key, extractor_stage
from graphwright.ingest import SourceError, diff_documents, document_tables
from graphwright.lock import run_lock
from graphwright.numeric import to_numpy
from graphwright.progress import StageProgress, stderr_console
from graphwright.reports import LLMReports, build_reports, generator_of, to_table
from graphwright.resolve import resolve_parts
from graphwright.store import IndexStore, spill, sql_list
from graphwright.vectors import (
    VectorIndex,
    build_index,
    load_from,
    may_update,
    save_to,
    update_index,
)

ENTITY_TEXT_CHARS = 600
STAGES = ("ingest", "chunk", "extract", "resolve", "cluster", "report", "embed", "publish")


class NothingToIndex(RuntimeError):
    """No source could be read; the index was left as it was."""


class TooManyFailures(RuntimeError):
    """More chunks failed extraction than extract.max_failed_fraction allows; nothing was published.
    What was extracted is kept, and the next run retries the failed chunks."""


class RefusedDeletion(RuntimeError):
    """A run would delete more of the index than configured; nothing was changed."""


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@dataclass
class Run:
    store: IndexStore
    config: PipelineConfig
    run_id: str
    progress: StageProgress
    log: Callable[[str], None]
    executor: object = None
    metrics: list[dict] = field(default_factory=list)
    llm_totals: dict = field(default_factory=lambda: dict(calls=0, cache_hits=0, failed=0, prompt_tokens=0, completion_tokens=0,
                                                          full_rebuild_tokens=0))

    @contextmanager
    def stage(self, name: str):
        """Measure a stage into one stage_metrics row. The body fills `details` with counters;
        `rows_in`/`rows_out` and `work_unit`/`work_done`/`work_total` (the units this run
        processed, and what a full rebuild would) become columns, the rest goes to JSON."""
        details: dict = {"rows_in": 0, "rows_out": 0}
        wall, cpu = time.perf_counter(), _cpu_seconds()
        self.store.journal = {}
        llm_before, worker_before = dict(self.llm_totals), self.worker_cpu_s()
        try:
            yield details
        except BaseException as exc:  # what a failed stage used (LLM calls included) still counts
            details["failed"] = f"{type(exc).__name__}: {exc}"[:500]
            raise
        finally:
            memory.release()
            self._record_stage(name, details, wall, cpu, llm_before, worker_before)

    def _record_stage(self, name: str, details: dict, wall: float, cpu: float, llm_before: dict, worker_before: float) -> None:
        wall_s = time.perf_counter() - wall
        written, self.store.journal = self.store.journal, None
        llm = {k: self.llm_totals[k] - llm_before[k] for k in ("calls", "cache_hits", "prompt_tokens", "completion_tokens")}
        work_done = details.pop("work_done", None)
        gpus = details.pop("gpus", 0) if work_done else 0
        row = {
            "run_id": self.run_id,
            "stage": name,
            "wall_s": wall_s,
            "cpu_s": _cpu_seconds() - cpu,
            "rows_in": int(details.pop("rows_in")),
            "rows_out": int(details.pop("rows_out")),
            # the executor's workers, and the processes a stage ran itself (the cluster stage's pool)
            "worker_cpu_s": self.worker_cpu_s() - worker_before + details.pop("worker_cpu_s", 0.0),
            "gpu_s": wall_s * gpus,
            "llm_calls": llm["calls"],
            "cache_hits": llm["cache_hits"],
            "prompt_tokens": llm["prompt_tokens"],
            "completion_tokens": llm["completion_tokens"],
            "bytes_written": sum(self.store.bytes_added(t, before) for t, before in written.items()),
            "work_unit": details.pop("work_unit", None),
            "work_done": work_done,
            "work_total": details.pop("work_total", None),
        }
        row["cost"] = stage_cost(row, self.config.cost, self.config.llm.model)
        # the driver's peak resident memory so far: the stage that raises it is the one to look at
        details["driver_peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
        row["details"] = json.dumps(details, sort_keys=True, default=str)
        self.metrics.append(row)
        self.log(f"[bold]{name:<8}[/] {row['wall_s']:6.1f}s  " + ", ".join(f"{k}={v}" for k, v in details.items() if not isinstance(v, (dict, list))))

    def worker_cpu_s(self) -> float:
        return getattr(self.executor, "worker_cpu_s", 0.0)

    def map_batches(self, label: str, table: pa.Table, stage: BatchStage, count: Callable[[pa.Table], int] = len):
        """Run a per-row stage, yielding result batches; progress advances by `count(batch)`."""
        if not table.num_rows:
            return
        if stage.on_driver:
            executor = LocalExecutor()
        else:
            if self.executor is None:  # started on first use: a no-op run never starts Ray
                self.executor = make_executor(self.config.execution)
                self.log(f"executor: {self.executor.describe()}")
            executor = self.executor
        with self.progress.task(label, table.num_rows) as advance:
            for batch in executor.map_batches(table, stage):
                advance(count(batch))
                yield batch


def _gpus(cfg: PipelineConfig, stage: str) -> float:
    """GPUs a stage holds while it runs (what a GPU-second price is paid for)."""
    if stage == "extract" and cfg.extract.engine == "llm" and cfg.llm.engine == "vllm":
        return cfg.llm.replicas * cfg.llm.tensor_parallel_size
    if stage == "embed" and cfg.embed.engine == "vllm":
        return cfg.embed.concurrency
    if stage == "cluster" and cfg.cluster.engine == "cugraph":
        return 1
    return 0


def _pairs(table: pa.Table, a: str, b: str) -> set[tuple[str, str]]:
    return set(zip(table.column(a).to_pylist(), table.column(b).to_pylist()))


# ---------------------------------------------------------------- stages


def stage_ingest(run: Run, sources: list[str], mirror: bool, force: bool = False) -> dict:
    with run.stage("ingest") as m, tempfile.TemporaryDirectory(prefix="graphwright-ingest-") as folder:
        columns = ["doc_id", "content_hash", "source", "title", "metadata"]  # what the diff compares
        indexed = run.store.read("documents", columns=columns)
        errors: list[SourceError] = []
        failed_sources: set[str] = set()
        # the documents are spilled a part at a time and only the columns the diff needs are
        # kept: the text is never whole in memory (at 100k documents, 1.1 GB of it)
        files, kept = [], []  # per spilled file: (path, rows), and its rows' diff columns
        for path, part in spill("documents", document_tables(sources, run.run_id, errors, failed_sources), folder):
            files.append((path, part.num_rows))
            kept.append(part.select(columns))
        incoming = pa.concat_tables([tables.empty("documents").select(columns), *kept])
        for err in errors:
            run.log(f"[yellow]skipped[/] {err.source}: {err.reason}")
        if errors:
            reasons: dict[str, list[str]] = {}
            for e in errors:  # one row per source: a file can have several problems
                reasons.setdefault(e.source, []).append(e.reason)
            run.store.upsert("source_errors", pa.Table.from_pylist(
                [{"run_id": run.run_id, "source": s, "reason": "; ".join(r)} for s, r in reasons.items()]))
        if not incoming.num_rows:
            raise NothingToIndex(
                f"no document could be read from {', '.join(map(str, sources))}"
                + (f" ({len(errors)} problem{'s' if len(errors) > 1 else ''}, listed above)" if errors else "")
            )
        diff = diff_documents(incoming, indexed, mirror=mirror, protected_sources=failed_sources)
        limit = run.config.ingest.max_delete_fraction
        share = _deleted_share(run.store, diff.deleted, indexed.num_rows)
        if diff.deleted and not force and share > limit:
            raise RefusedDeletion(
                f"this run would delete {len(diff.deleted)} of the {indexed.num_rows} indexed documents "
                f"({share:.0%} of the indexed text), above ingest.max_delete_fraction={limit:g}, because "
                f"they are missing from {', '.join(map(str, sources))}. Pass --force if that is intended, "
                f"or --append to add documents without deleting any"
            )
        write = set(diff.new) | set(diff.changed) | set(diff.relabeled)
        if not indexed.num_rows:  # a first load: every document is new, the files join the table as they are
            run.store.append_files("documents", files)
        elif write:  # read back only the spilled files that hold a document to write
            wanted = pa.array(sorted(write), pa.string())
            holding = [path for (path, _), keys in zip(files, kept) if pc.any(pc.is_in(keys.column("doc_id"), value_set=wanted)).as_py()]
            run.store.upsert("documents", pa.concat_tables(
                [t.filter(pc.is_in(t.column("doc_id"), value_set=wanted)) for t in map(pq.read_table, holding)]))
        if diff.deleted:
            run.store.delete_in("documents", "doc_id", diff.deleted)
        m.update(rows_in=incoming.num_rows, rows_out=len(write), **diff.as_counts(), source_errors=len(errors),
                 work_unit="documents", work_done=incoming.num_rows, work_total=incoming.num_rows)
        return {"diff": diff.as_counts(), "errors": [vars(e) for e in errors]}


def _deleted_share(store: IndexStore, deleted: list[str], n_indexed: int) -> float:
    """The larger of the deleted share of documents and of indexed characters (deleting one
    huge document out of two is not 'half' the index)."""
    if not deleted or not n_indexed:
        return 0.0
    sizes = store.read("documents", columns=["doc_id", "n_chars"])
    total = sum(sizes.column("n_chars").to_pylist()) or 1
    gone = set(deleted)
    chars = sum(n for d, n in zip(sizes.column("doc_id").to_pylist(), sizes.column("n_chars").to_pylist()) if d in gone)
    return max(len(deleted) / n_indexed, chars / total)


def stage_delete(run: Run, doc_ids: list[str], source_globs: list[str]) -> dict:
    """Explicit deletion: documents by doc_id or source key, or by source-key glob pattern."""
    with run.stage("delete") as m:
        docs = run.store.read("documents", columns=["doc_id", "source_key"])
        wanted = set(doc_ids)
        chosen = sorted(
            d for d, k in zip(docs.column("doc_id").to_pylist(), docs.column("source_key").to_pylist())
            if d in wanted or k in wanted or any(fnmatch.fnmatchcase(k, g) for g in source_globs)
        )
        missing = sorted(wanted - set(chosen) - set(docs.column("source_key").to_pylist()) - set(docs.column("doc_id").to_pylist()))
        for ident in missing:
            run.log(f"[yellow]not indexed[/] {ident}")
        deleted = run.store.delete_in("documents", "doc_id", chosen) if chosen else 0
        m.update(rows_in=docs.num_rows, rows_out=deleted, deleted=deleted, not_found=len(missing))
        return {"diff": {"new": 0, "changed": 0, "unchanged": docs.num_rows - deleted, "deleted": deleted, "relabeled": 0}, "errors": [],
                "not_found": missing}


def stage_chunk(run: Run) -> dict:
    store, cfg = run.store, run.config
    with run.stage("chunk") as m:
        docs = store.read("documents", columns=["doc_id", "content_hash"])
        chunks = store.read("chunks", columns=["chunk_id", "doc_id", "doc_hash"])
        current = _pairs(docs, "doc_id", "content_hash")
        todo = sorted(current - _pairs(chunks, "doc_id", "doc_hash"))
        written = 0
        if todo:
            todo_ids = [d for d, _ in todo]
            texts = store.rows_in("documents", "doc_id", todo_ids, ["doc_id", "content_hash", "text"])
            stage = BatchStage("chunk", Chunker, (cfg.chunk.size_tokens, cfg.chunk.overlap_tokens, cfg.chunk.min_tokens),
                               batch_size=DOCUMENTS_PER_BATCH, num_cpus=cfg.execution.actor_num_cpus, actors=cfg.execution.actors)
            pending: list[pa.Table] = []
            documents_in = lambda batch: len(set(batch.column("doc_id").to_pylist()))  # noqa: E731
            had_chunks = pa.array(sorted(set(chunks.column("doc_id").to_pylist())), pa.string())
            for batch in run.map_batches("chunk", texts, stage, documents_in):
                pending.append(batch)
                if sum(t.num_rows for t in pending) >= cfg.execution.commit_every:
                    written += _commit_chunks(store, pending, had_chunks)
            written += _commit_chunks(store, pending, had_chunks)
        # chunks of deleted documents, or cut from a document version that is gone
        chunks = store.read("chunks", columns=["chunk_id", "doc_id", "doc_hash"])
        stale = [c for c, d, h in zip(*(chunks.column(x).to_pylist() for x in ("chunk_id", "doc_id", "doc_hash"))) if (d, h) not in current]
        removed = store.delete_in("chunks", "chunk_id", stale) if stale else 0
        m.update(rows_in=len(todo), rows_out=written, documents_chunked=len(todo), chunks_written=written, chunks_removed=removed,
                 work_unit="documents", work_done=len(todo), work_total=len(current))
        return {"chunked_documents": len(todo), "chunks_written": written, "chunks_removed": removed}


def _commit_chunks(store: IndexStore, pending: list[pa.Table], had_chunks: pa.Array) -> int:
    """Commit whole documents' chunks. A document that had no chunks is appended (a MERGE scans
    the whole table, which made 1M chunks quadratic); one that had (a new version may repeat a
    chunk id) is merged. A rerun after a kill skips documents already committed."""
    if not pending:
        return 0
    table = pa.concat_tables(pending)
    pending.clear()
    known = pc.is_in(table["doc_id"], value_set=had_chunks)
    store.append("chunks", table.filter(pc.invert(known)))
    if pc.any(known).as_py():
        store.upsert("chunks", table.filter(known))
    return table.num_rows


def _flatten(results: pa.Table, column: str, fields: list[str]) -> pa.Table:
    """One row per element of the nested `column`, with the chunk's ids alongside."""
    lists = results.column(column).combine_chunks()
    parent = pc.list_parent_indices(lists)
    values = pc.list_flatten(lists)
    out = {c: pc.take(results.column(c), parent) for c in ("chunk_id", "doc_id", "extractor")}
    for f in fields:
        out[f] = pc.struct_field(values, f)
    return pa.table(out)


def _commit_extractions(run: "Run", results: list[pa.Table]) -> tuple[int, int, int]:
    store, run_id = run.store, run.run_id
    if not results:
        return 0, 0, 0
    res = pa.concat_tables(results)
    results.clear()
    mentions = _flatten(res, "mentions", ["name", "type", "description", "count"])
    mentions = mentions.append_column("mention_id", pa.array([
        ids.stable_id("mention", c, n, x) for c, n, x in zip(*(mentions.column(k).to_pylist() for k in ("chunk_id", "name", "extractor")))
    ], pa.string()))
    assertions = _flatten(res, "assertions", ["source", "target", "description", "weight"])
    assertions = assertions.append_column("assertion_id", pa.array([
        ids.stable_id("assertion", c, s, t, x) for c, s, t, x in zip(*(assertions.column(k).to_pylist() for k in ("chunk_id", "source", "target", "extractor")))
    ], pa.string()))
    # the stage removed what earlier attempts left for these chunks: append, then mark them done
    for name, table in (("mentions", mentions), ("assertions", assertions)):
        store.append(name, table)
    markers = pa.table({
        "chunk_id": res.column("chunk_id"),
        "doc_id": res.column("doc_id"),
        "extractor": res.column("extractor"),
        "status": res.column("status"),
        "n_mentions": pc.list_value_length(res.column("mentions")).cast(pa.int32()),
        "n_assertions": pc.list_value_length(res.column("assertions")).cast(pa.int32()),
        "error": res.column("error"),
        "run_id": pa.array([run_id] * res.num_rows, pa.string()),
    })
    _record_llm_calls(run, "extract", _flatten(res, "calls", ["key", "prompt_version", "response", "cache_hit", "prompt_tokens",
                                                              "completion_tokens", "latency_s", "attempts", "error"]))
    store.append("extractions", markers)
    failed = res.num_rows - pc.sum(pc.equal(res.column("status"), "ok")).as_py()
    return res.num_rows, mentions.num_rows, failed


def _record_llm_calls(run: "Run", stage: str, calls: pa.Table) -> None:
    """Record a stage's calls (graphwright.llm.cache.record_calls) and add them to the run's totals."""
    from graphwright.llm.cache import record_calls

    if "chunk_id" in calls.column_names:  # extraction and summaries name the item by its chunk/row id
        calls = calls.rename_columns(["item_id" if c == "chunk_id" else c for c in calls.column_names])
    for r in record_calls(run.store, run.config.llm, run.run_id, stage, calls.to_pylist()):
        run.llm_totals["calls"] += 1
        run.llm_totals["cache_hits"] += r["cache_hit"]
        run.llm_totals["failed"] += r["status"] == "failed"
        if not r["cache_hit"]:
            run.llm_totals["prompt_tokens"] += r["prompt_tokens"]
            run.llm_totals["completion_tokens"] += r["completion_tokens"]


def _full_rebuild_tokens(store: IndexStore, chunk_ids: set[str]) -> int:
    """What extracting every current chunk from scratch would cost, in tokens: for each chunk,
    the recorded token counts of the calls that extracted it (gleaning rounds included)."""
    calls = store.read("llm_calls", columns=["item_id", "key", "run_id"], where="stage = 'extract' AND status = 'ok'")
    keys_by_chunk: dict[str, dict[str, set]] = {}
    for item, key, run_id in zip(*(calls.column(c).to_pylist() for c in ("item_id", "key", "run_id"))):
        if item in chunk_ids:
            keys_by_chunk.setdefault(item, {}).setdefault(run_id, set()).add(key)
    # the latest run that extracted a chunk holds its current calls
    keys = {k for runs in keys_by_chunk.values() for k in runs[max(runs)]}
    if not keys:
        return 0
    total = 0
    for o, ordered in ((o, sorted(keys)) for o in range(0, len(keys), 1000)):
        cache = store.read("llm_cache", columns=["prompt_tokens", "completion_tokens"], where=f"key IN {sql_list(ordered[o:o + 1000])}")
        total += sum(cache.column("prompt_tokens").to_pylist()) + sum(cache.column("completion_tokens").to_pylist())
    return total


def stage_extract(run: Run) -> dict:
    store, cfg = run.store, run.config
    key = extractor_key(cfg.extract, cfg.llm)
    with run.stage("extract") as m:
        chunks = store.read("chunks", columns=["chunk_id"])
        chunk_set = set(chunks.column("chunk_id").to_pylist())
        # lineage cleanup: extraction rows of chunks that no longer exist
        removed, have = {}, {}
        for name in ("mentions", "assertions", "extractions"):
            have[name] = store.distinct(name, "chunk_id")
            gone = sorted(have[name] - chunk_set)
            removed[name] = store.delete_in(name, "chunk_id", gone) if gone else 0
        done = store.read("extractions", columns=["chunk_id"], where=f"extractor = '{key}' AND status = 'ok'")
        todo = sorted(chunk_set - set(done.column("chunk_id").to_pylist()))
        # what an interrupted or failed attempt left for the chunks to do goes now, once, so that
        # their new rows can be appended (per-commit deletes and merges scan whole tables)
        for name in ("mentions", "assertions"):
            leftover = sorted(have[name].intersection(todo))
            removed[name] += store.delete_in(name, "chunk_id", leftover) if leftover else 0
        if unfinished := sorted(have["extractions"].intersection(todo)):
            store.delete_in("extractions", "chunk_id", unfinished, also=f"extractor = '{key}'")
        extracted = mentions = failed = 0
        if todo:
            texts = store.rows_in("chunks", "chunk_id", todo, ["chunk_id", "doc_id", "text"])
            fn_class, args, on_driver = extractor_stage(cfg.extract, cfg.llm, str(store.root))
            batch_size = cfg.execution.commit_every if on_driver else cfg.extract.batch_size
            stage = BatchStage("extract", fn_class, args, batch_size=batch_size, on_driver=on_driver,
                               num_cpus=cfg.execution.actor_num_cpus, actors=cfg.execution.actors)
            pending: list[pa.Table] = []
            for batch in run.map_batches("extract", texts, stage):
                pending.append(batch)
                if sum(t.num_rows for t in pending) >= cfg.execution.commit_every:
                    n, k, f = _commit_extractions(run, pending)
                    extracted, mentions, failed = extracted + n, mentions + k, failed + f
            n, k, f = _commit_extractions(run, pending)
            extracted, mentions, failed = extracted + n, mentions + k, failed + f
        m.update(rows_in=len(todo), rows_out=mentions, extractor=key, chunks_extracted=extracted,
                 chunks_reused=len(chunk_set) - len(todo), chunks_failed=failed, removed=removed,
                 work_unit="chunks", work_done=len(todo), work_total=len(chunk_set), gpus=_gpus(cfg, "extract"))
        if cfg.extract.engine == "llm":
            run.llm_totals["full_rebuild_tokens"] = _full_rebuild_tokens(store, chunk_set)
        if failed and failed > cfg.extract.max_failed_fraction * extracted:
            reasons = store.read("extractions", columns=["chunk_id", "error"], where=f"status = 'failed' AND run_id = '{run.run_id}'")
            example = reasons.slice(0, 1).to_pylist()
            raise TooManyFailures(
                f"{failed} of {extracted} chunks failed extraction, above extract.max_failed_fraction="
                f"{cfg.extract.max_failed_fraction:g}" + (f" (e.g. chunk {example[0]['chunk_id']}: {example[0]['error']})" if example else "")
                + ". They are recorded in the extractions table and retried by the next run; nothing was published"
            )
        return {"chunks_extracted": extracted, "chunks_failed": failed, "chunks_reused": len(chunk_set) - len(todo), "extractor": key}


def stage_resolve(run: Run) -> dict:
    store = run.store
    key = extractor_key(run.config.extract, run.config.llm)
    with run.stage("resolve") as m:
        where = f"extractor = '{key}'"
        mentions, assertions = store.scanner("mentions", where=where), store.scanner("assertions", where=where)
        n_mentions, n_assertions = store.count("mentions", where=where), store.count("assertions", where=where)
        chunks = store.read("chunks", columns=["chunk_id", "doc_id", "chunk_index"])
        docs = store.read("documents", columns=["doc_id", "source_key"])
        source_key = dict(zip(docs.column("doc_id").to_pylist(), docs.column("source_key").to_pylist()))
        positions = {c: (source_key.get(d, ""), i) for c, d, i in zip(*(chunks.column(x).to_pylist() for x in ("chunk_id", "doc_id", "chunk_index")))}
        overflow: dict | None = {} if run.config.resolve.summarize else None
        linking: dict = {}
        resolved = resolve_parts(mentions, assertions, run.config.resolve, positions, overflow,
                                 embed=_resolve_embedder(run), adjudicate=_resolve_adjudicator(run), stats=linking)
        del positions, chunks, source_key
        entities = _summarize_descriptions(run, overflow, resolved.entities, "entities", "entity_id")

        def relationship_parts():  # each part's overflow is summarized before the part is written
            for part in resolved.relationship_parts:
                yield _summarize_descriptions(run, overflow, part, "relationships", "relationship_id")

        diffs = {"entities": store.replace_if_changed("entities", entities),
                 "entity_aliases": store.replace_if_changed("entity_aliases", resolved.aliases),
                 "relationships": store.replace_parts_if_changed("relationships", relationship_parts())}
        m.update(rows_in=n_mentions + n_assertions, rows_out=entities.num_rows + resolved.relationships,
                 entities=entities.num_rows, relationships=resolved.relationships, aliases=resolved.aliases.num_rows,
                 changes=diffs, linking=linking, work_unit="mentions", work_done=n_mentions, work_total=n_mentions)
        return diffs


def _resolve_embedder(run: Run):
    if not run.config.resolve.embeddings:
        return None
    return make_embedder(run.config.embed).encode


def _resolve_adjudicator(run: Run):
    """Borderline pairs to the LLM, through the cache; the calls are recorded."""
    if not run.config.resolve.adjudicate:
        return None
    run.config.llm.require("resolve.adjudicate")
    from graphwright.resolve_adjudicate import adjudicate

    def decide(pairs):
        verdicts, calls = adjudicate(run.store, pairs, run.config.llm)
        _record_llm_calls(run, "resolve", pa.Table.from_pylist(calls))
        return verdicts

    return decide


def _summarize_descriptions(run: Run, overflow: dict | None, table: pa.Table, name: str, key: str) -> pa.Table:
    """`table` with the descriptions in `overflow` (emptied after) replaced by LLM summaries."""
    if not overflow:
        return table
    from graphwright.summarize import summarize

    run.config.llm.require("resolve.summarize")
    summaries, calls = summarize(run.store, overflow, run.config.resolve.description_max_chars, run.config.llm)
    overflow.clear()
    _record_llm_calls(run, "resolve", pa.Table.from_pylist(calls))
    ids_ = table.column(key).to_pylist()
    texts = [summaries.get((name, i), d) for i, d in zip(ids_, table.column("description").to_pylist())]
    return table.set_column(table.schema.get_field_index("description"), "description", pa.array(texts, pa.string()))


def stage_cluster(run: Run) -> dict:
    store = run.store
    with run.stage("cluster") as m:
        entities = store.read("entities", columns=["entity_id"])
        relationships = store.read("relationships", columns=["relationship_id", "source_id", "target_id", "weight"])
        previous = store.read("communities", columns=["level", "entity_ids", "graph_hash"])  # for the warm start
        hashed = graph_hash(entities, relationships)
        unchanged = previous.num_rows and previous.column("graph_hash")[0].as_py() == hashed
        if unchanged:  # same graph: keep the communities (a warm-started Leiden could still move nodes)
            diff = {"added": 0, "removed": 0, "changed": 0, "unchanged": previous.num_rows}
        else:
            usage = {"worker_cpu_s": 0.0}
            chunks = ChunkLists.scan(store.scanner("entities")(["entity_id", "chunk_ids"]),
                                     sorted(entities.column("entity_id").to_pylist()),
                                     store.read("chunks", columns=["chunk_id"]).column("chunk_id"))
            parts = cluster_parts(entities, relationships, run.config.cluster, previous=previous,
                                  workers=run.config.execution.driver_processes or os.cpu_count() or 1,
                                  usage=usage, hashed=hashed, chunks=chunks)
            diff = store.replace_parts_if_changed("communities", parts)
            m.update(usage)
        per_level = _per_level(store.read("communities", columns=["level"]))
        m.update(rows_in=entities.num_rows, rows_out=sum(per_level.values()), engine=run.config.cluster.engine,
                 per_level=per_level, changes=diff, work_unit="graph", work_done=0 if unchanged else 1, work_total=1,
                 gpus=_gpus(run.config, "cluster"))
        return {"per_level": per_level, "changes": diff}


class TooManyReportFailures(TooManyFailures):
    """More LLM reports failed than report.max_failed_fraction allows; nothing was published. The
    reports that succeeded are in the LLM cache, so the next run does not pay for them again."""


def _per_level(communities: pa.Table) -> dict[int, int]:
    levels = pc.value_counts(communities.column("level")).to_pylist() if communities.num_rows else []
    return {int(v["values"]): int(v["counts"]) for v in sorted(levels, key=lambda v: v["values"])}


def stage_report(run: Run) -> dict:
    store, cfg = run.store, run.config.report
    with run.stage("report") as m:
        previous = store.read("community_reports")
        if cfg.mode == "extractive":
            communities = _communities_without_chunk_lists(store)
            reports, stats = build_reports(
                communities, store.read("entities", columns=["entity_id", "name", "type", "description", "degree", "mention_count"]),
                _relationships_without_descriptions(store), cfg, previous,
                descriptions=lambda ids_: store.rows_in("relationships", "relationship_id", ids_, ["relationship_id", "description"]))
            store.replace_if_changed("community_reports", reports)
            m.update(rows_in=communities.num_rows, rows_out=stats["built"], reports=reports.num_rows, **stats,
                     work_unit="reports", work_done=stats["built"], work_total=stats["built"] + stats["reused"])
            return stats
        run.config.llm.require(f"report.mode {cfg.mode}")  # lazy too: a query must not be the first to find out
        communities = store.read("communities")
        llm_reports = LLMReports(store, cfg, run.config.llm, communities.to_pylist())
        gen = generator_of(run.config.llm)
        current = {cid: p.input_hash for cid, p in llm_reports.plans.items()}
        if cfg.mode == "lazy":
            # nothing is written now; a report whose community is gone or whose inputs changed
            # (or that is not this model's and prompt's) must not leak into this version
            old = previous.select(["community_id", "input_hash", "generator"]).to_pylist()
            stale = [r["community_id"] for r in old if current.get(r["community_id"]) != r["input_hash"] or r["generator"] != gen]
            removed = store.delete_in("community_reports", "community_id", stale) if stale else 0
            stats = {"built": 0, "reused": len(old) - len(stale), "removed": removed, "planned": len(current)}
            m.update(rows_in=communities.num_rows, rows_out=0, mode="lazy", **stats)
            return stats
        rows, calls, stats = llm_reports.write(sorted(current), {r["input_hash"]: r for r in previous.to_pylist()})
        _record_llm_calls(run, "report", pa.Table.from_pylist(calls))
        attempted = stats["built"] + stats["failed"]
        if stats["failed"]:
            run.log(f"[yellow]{stats['failed']} of {attempted} LLM reports failed[/]; they fall back to extractive reports and the next run retries them")
        if stats["failed"] > cfg.max_failed_fraction * attempted:
            example = next((c["error"] for c in calls if c["error"]), "a sub-community report failed")
            raise TooManyReportFailures(
                f"{stats['failed']} of {attempted} LLM reports failed, above report.max_failed_fraction={cfg.max_failed_fraction:g} "
                f"(e.g. {example}); nothing was published, and the next run retries them")
        reports = to_table(list(rows.values()))
        store.replace_if_changed("community_reports", reports)
        m.update(rows_in=communities.num_rows, rows_out=stats["built"], reports=reports.num_rows, mode="llm", **stats,
                 work_unit="reports", work_done=stats["built"], work_total=stats["built"] + stats["reused"])
        return stats


def _communities_without_chunk_lists(store: IndexStore) -> pa.Table:
    """The communities with the length of their chunk lists instead of the lists (each chunk is
    in every community its entities are in, at every level: the table's bulk)."""
    columns = [c for c in tables.schema("communities").arrow.names if c != "chunk_ids"]
    return store.read_derived("communities", columns, {"n_chunks": ('cardinality("chunk_ids")', pa.int32())})


def _relationships_without_descriptions(store: IndexStore) -> pa.Table:
    """The relationships with whether each has a description instead of the description
    (reports read the descriptions of the few relationships they show)."""
    return store.read_derived("relationships", ["relationship_id", "source", "target", "weight"],
                              {"described": ('coalesce(character_length("description") > 0, false)', pa.bool_())})


def _embedding_inputs(store: IndexStore, embed_relationships: bool) -> dict[str, pa.Table]:
    ent = store.read("entities", columns=["entity_id", "name", "type", "description"])
    chunks = store.read("chunks", columns=["chunk_id", "text"])
    reports = store.read("community_reports", columns=["community_id", "full_content"])
    # the model reads 256 word-pieces at most; a longer description would only cost time
    entity_text = [f"{n} ({t}): {d[:ENTITY_TEXT_CHARS]}" for n, t, d in zip(*(ent.column(c).to_pylist() for c in ("name", "type", "description")))]
    inputs = {
        "entity": pa.table({"item_id": ent.column("entity_id"), "text": pa.array(entity_text, pa.string())}),
        "chunk": pa.table({"item_id": chunks.column("chunk_id"), "text": chunks.column("text")}),
        "report": pa.table({"item_id": reports.column("community_id"), "text": reports.column("full_content")}),
    }
    if embed_relationships:  # for the query's relation-level (LightRAG "high") search
        rel = store.read("relationships", columns=["relationship_id", "source", "target", "description"])
        rel_text = [f"{s} - {t}: {d[:ENTITY_TEXT_CHARS]}" for s, t, d in zip(*(rel.column(c).to_pylist() for c in ("source", "target", "description")))]
        inputs["relationship"] = pa.table({"item_id": rel.column("relationship_id"), "text": pa.array(rel_text, pa.string())})
    return inputs


def stage_embed(run: Run) -> dict:
    """Embed only rows whose text changed (keyed by a hash of model + text), in one pass over all
    kinds so that one actor pool loads the model once; then rebuild each kind's vector index."""
    store, cfg = run.store, run.config
    model = model_name(cfg.embed)
    counts, todo_parts = {}, []
    with run.stage("embed") as m:
        for kind, items in _embedding_inputs(store, cfg.embed.relationships).items():
            items = items.append_column("text_hash", _text_hashes(model, items.column("text")))
            have = store.read("embeddings", columns=["item_id", "text_hash"], where=f"kind = '{kind}' AND model = '{model}'")
            current, existing = _pair_keys(items, "item_id", "text_hash"), _pair_keys(have, "item_id", "text_hash")
            stale = pc.unique(have.column("item_id").filter(pc.invert(pc.is_in(existing, value_set=current)))).to_pylist()
            if stale:
                store.delete_in("embeddings", "item_id", stale, also=f"kind = '{kind}' AND model = '{model}'")
            todo = items.filter(pc.invert(pc.is_in(current, value_set=existing)))
            todo_parts.append(todo.add_column(0, "kind", pa.array([kind] * todo.num_rows, pa.string())))
            counts[kind] = {"embedded": todo.num_rows, "reused": items.num_rows - todo.num_rows, "removed": len(stale)}
        del items, have, current, existing
        todo = pa.concat_tables(todo_parts)
        todo_parts.clear()
        # similar lengths in a batch waste less compute on padding
        todo = todo.take(pc.sort_indices(pc.utf8_length(todo["text"])))
        on_driver = cfg.embed.engine == "vllm"  # it starts its own Ray Data job over GPU replicas
        stage = BatchStage("embed", EmbedBatch, (cfg.embed, max(1, int(cfg.execution.actor_num_cpus))),
                           batch_size=cfg.execution.commit_every if on_driver else cfg.embed.batch_size,
                           num_cpus=cfg.execution.actor_num_cpus, actors=cfg.execution.actors, on_driver=on_driver)
        pending: list[pa.Table] = []
        embedded = todo.num_rows
        for batch in run.map_batches("embed", todo, stage):
            pending.append(batch)
            if sum(t.num_rows for t in pending) >= cfg.execution.commit_every:
                _commit_vectors(store, model, pending)
        _commit_vectors(store, model, pending)
        del todo, stage  # the texts are not needed while the indexes are built
        files = {kind: _write_vector_index(store, kind, model, cfg) for kind in counts}
        total = sum(c["embedded"] + c["reused"] for c in counts.values())
        m.update(rows_in=total, rows_out=embedded, model=model, **counts,
                 work_unit="items", work_done=embedded, work_total=total, gpus=_gpus(cfg, "embed"))
        return {"vector_indexes": files, "counts": counts}


def _text_hashes(model: str, texts: pa.ChunkedArray, batch: int = 65_536) -> pa.ChunkedArray:
    """The key an embedding is reused by: a hash of model and text (a slice of texts at a time)."""
    return pa.chunked_array([pa.array([ids.content_hash(model + "\x1f" + t) for t in texts.slice(o, batch).to_pylist()],
                                      pa.string()) for o in range(0, len(texts), batch)], pa.string())


def _pair_keys(table: pa.Table, a: str, b: str) -> pa.Array:
    return pc.binary_join_element_wise(table.column(a), table.column(b), "\x1f").combine_chunks()


def _commit_vectors(store: IndexStore, model: str, pending: list[pa.Table]) -> None:
    if not pending:
        return
    table = pa.concat_tables(pending)
    pending.clear()
    # appended: the stage deleted these items' stale rows, and a rerun skips items already stored
    store.append("embeddings", pa.table({
        "kind": table.column("kind"),
        "item_id": table.column("item_id"),
        "model": pa.array([model] * table.num_rows, pa.string()),
        "text_hash": table.column("text_hash"),
        "vector": table.column("vector"),
    }))


def _write_vector_index(store: IndexStore, kind: str, model: str, cfg: PipelineConfig) -> str:
    """Build the ANN index for one kind, or update the published one in place where it can
    (vectors.update_index); files are named by their content, so a published version's files
    are never overwritten and unchanged vectors reuse the existing file."""
    where = f"kind = '{kind}' AND model = '{model}'"
    keys = store.read("embeddings", columns=["item_id", "text_hash"], where=where).sort_by("item_id")
    item_ids, hashes = keys.column("item_id").to_pylist(), keys.column("text_hash").to_pylist()
    digest = ids.stable_id("vectors", kind, model, cfg.vectors.engine, cfg.vectors.hnsw_threshold, *hashes, *item_ids, length=16)
    relative = f"vectors/{kind}-{digest}.faiss"
    if not store.files.exists(relative):
        def vectors_of(wanted: list[str]) -> np.ndarray:
            return _vector_matrix(store, where, pa.chunked_array([pa.array(wanted, pa.string())]))

        index = None
        # the previous index is loaded (2 GB at 1.2M chunks) only where an update can use it
        previous = _published_vector_index(store, kind) if may_update(cfg.vectors, len(item_ids)) else None
        if previous is not None:
            index = update_index(previous, item_ids, hashes, vectors_of, cfg.vectors)
            del previous
        if index is None:
            index = build_index(item_ids, _vector_matrix(store, where, keys.column("item_id")), cfg.vectors, hashes)
        save_to(store.files, relative, index)
    return relative


def _published_vector_index(store: IndexStore, kind: str) -> VectorIndex | None:
    """The latest published version's vector index of `kind`, if it has one."""
    try:
        relative = publish.load_manifest(store)["vector_indexes"].get(kind)
    except publish.NoPublishedVersion:
        return None
    if relative is None or not store.files.exists(relative):
        return None
    return load_from(store.files, relative)


def _vector_matrix(store: IndexStore, where: str, item_ids: pa.ChunkedArray) -> np.ndarray:
    """The vectors of `item_ids`, row i for item i, filled from a streaming scan (one float32
    matrix; reading the table whole and flattening it took three copies)."""
    matrix = None
    wanted = item_ids.combine_chunks()
    for batch in store.scanner("embeddings", where=where)(["item_id", "vector"]):
        found = pc.index_in(batch.column("item_id"), value_set=wanted)
        if found.null_count:  # an item not asked for
            batch, found = batch.filter(pc.is_valid(found)), found.drop_null()
        if not batch.num_rows:
            continue
        rows = to_numpy(found, np.int64)
        flat = to_numpy(pc.list_flatten(batch.column("vector")), np.float32)
        if matrix is None:
            matrix = np.zeros((len(wanted), len(flat) // batch.num_rows), dtype=np.float32)
        matrix[rows] = flat.reshape(batch.num_rows, -1)
    return matrix if matrix is not None else np.zeros((0, 1), np.float32)


def stage_publish(run: Run, vector_indexes: dict[str, str]) -> dict:
    store = run.store

    with run.stage("publish") as m:
        manifest = publish.publish(store, run.run_id, run.config, vector_indexes)
        m.update(rows_in=len(manifest["table_versions"]), rows_out=1 if manifest["new"] else 0, version=manifest["version"], new_version=manifest["new"],
                 work_unit="versions", work_done=1, work_total=1)
    manifest["export_errors"] = {}
    for fmt in run.config.publish.exports:  # an export missing from an earlier run is written now
        from graphwright.exports import export

        # the version is published already: a failed export is reported, not a failed run
        with run.stage(f"export:{fmt}") as m:
            try:
                written = export(store.root, fmt, manifest["version"])
            except Exception as exc:
                manifest["export_errors"][fmt] = f"{type(exc).__name__}: {exc}"
                run.log(f"[yellow]export {fmt} of version {manifest['version']} failed[/]: {exc}")
                m.update(error=manifest["export_errors"][fmt], work_unit="exports", work_done=0, work_total=1)
                continue
            m.update(rows_out=int(written["written"]), version=manifest["version"], path=written["path"],
                     work_unit="exports", work_done=int(written["written"]), work_total=1)
    return manifest


# ---------------------------------------------------------------- runner


def new_run_id() -> str:
    return _now().strftime("run-%Y%m%dT%H%M%S%fZ")


def run_index(
    sources: list[str],
    index_dir: str | Path,
    config: PipelineConfig,
    *,
    mirror: bool = True,
    force: bool = False,
    rebuild: tuple[str, ...] = (),
    show_progress: bool = True,
    log: Callable[[str], None] | None = None,
) -> dict:
    """Index `sources` into `index_dir` (mirror: the sources are the whole corpus; otherwise an
    append batch) and publish a version. Returns the run summary. `rebuild` names tables to
    empty first (a new Delta commit each, so published versions stay readable), under the same
    run lock: a full rebuild recomputes everything derived from them."""
    def first_stage(run: Run) -> dict:
        for name in rebuild:
            if run.store.exists(name):
                run.store.overwrite(name, tables.empty(name))
        return stage_ingest(run, sources, mirror, force)

    return _run_pipeline("rebuild" if rebuild else "index", index_dir, config, first_stage, show_progress, log)


def run_delete(
    index_dir: str | Path,
    config: PipelineConfig | None = None,
    *,
    doc_ids: list[str] = (),
    source_globs: list[str] = (),
    show_progress: bool = True,
    log: Callable[[str], None] | None = None,
) -> dict:
    """Delete documents (and everything only they supported) and publish a version."""
    store = IndexStore(index_dir)
    if config is None:
        from graphwright.publish import load_manifest

        config = PipelineConfig.model_validate_json(load_manifest(store)["config"])
    return _run_pipeline("delete", index_dir, config, lambda run: stage_delete(run, list(doc_ids), list(source_globs)), show_progress, log)


def _run_pipeline(command: str, index_dir, config: PipelineConfig, first_stage, show_progress: bool, log) -> dict:
    """Run under the index's run lock: a second run at the same time refuses (IndexLocked)."""
    store = IndexStore(index_dir)
    run_id = new_run_id()
    with run_lock(store, run_id, command) as lock:
        return _run_locked(store, run_id, lock, command, config, first_stage, show_progress, log)


def _run_locked(store: IndexStore, run_id: str, lock, command: str, config: PipelineConfig, first_stage, show_progress: bool, log) -> dict:
    log = log or (lambda msg: stderr_console.print(msg, highlight=False))
    run = Run(store, config, run_id, StageProgress(show_progress), log)
    started = _now()
    store.upsert("runs", pa.Table.from_pylist([_run_row(run, command, started, None, "running", {}, None)]))
    summary: dict = {"run_id": run.run_id, "command": command, "index": str(store.root), "llm_model": config.llm.model}
    try:
        llm = f" (llm {config.llm.engine} {config.llm.base_url}, concurrency {config.llm.concurrency})" if config.extract.engine == "llm" else ""
        log(f"engines: extract={extractor_key(config.extract, config.llm)}{llm} graph={config.cluster.engine} "
            f"embed={model_name(config.embed)} vectors={config.vectors.engine} executor={config.execution.executor}")
        first = first_stage(run)
        try:
            chunked = stage_chunk(run)
            extract = stage_extract(run)
            resolved = stage_resolve(run)
            clusters = stage_cluster(run)
            reports = stage_report(run)
            embed = stage_embed(run)
        finally:
            if run.executor is not None:
                run.executor.close()
        lock.check()  # a run whose lease was taken over must not publish
        manifest = stage_publish(run, embed["vector_indexes"])
        counts = manifest["counts"]
        summary.update(
            documents=counts["documents"],
            chunks=counts["chunks"],
            chunks_extracted=extract["chunks_extracted"],
            chunks_failed=extract["chunks_failed"],
            llm=dict(run.llm_totals),
            entities=counts["entities"],
            relationships=counts["relationships"],
            communities=counts["communities"],
            communities_per_level=clusters["per_level"],
            reports=counts["community_reports"],
            version=manifest["version"],
            new_version=manifest["new"],
            export_errors=manifest["export_errors"],
            documents_diff=first["diff"],
            source_errors=first["errors"],
            recomputed={
                "chunks_written": chunked["chunks_written"],
                "chunks_removed": chunked["chunks_removed"],
                "chunks_extracted": extract["chunks_extracted"],
                "chunks_reused": extract["chunks_reused"],
                "entities": resolved["entities"],
                "relationships": resolved["relationships"],
                "communities": clusters["changes"],
                "reports_built": reports["built"],
                "reports_reused": reports["reused"],
                "embeddings": embed["counts"],
            },
            seconds={m["stage"]: round(m["wall_s"], 2) for m in run.metrics},
        )
        _finish(run, command, started, "succeeded", summary, None)
        return summary
    except BaseException as exc:
        _finish(run, command, started, "failed", summary, f"{type(exc).__name__}: {exc}")
        raise


def _run_row(run: Run, command: str, started, finished, status: str, summary: dict, error: str | None) -> dict:
    return {
        "run_id": run.run_id, "command": command, "started_at": started, "finished_at": finished,
        "status": status, "config_hash": run.config.config_hash(), "summary": json.dumps(summary, default=str),
        "error": error,
    }


def _finish(run: Run, command: str, started, status: str, summary: dict, error: str | None) -> None:
    if run.metrics:
        run.store.upsert("stage_metrics", pa.Table.from_pylist(run.metrics))
    run.store.upsert("runs", pa.Table.from_pylist([_run_row(run, command, started, _now(), status, summary, error)]))

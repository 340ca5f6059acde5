"""Extract stage: every chunk without a completion marker for the current extractor is sent
through it (the `nlp` rules, or an LLM through the cache) on the executor's workers; the driver
commits mentions and assertions, then the markers that certify them (extractions), every
execution.commit_every chunks. What an interrupted attempt left is removed once, up front.
Which chunks those are, and which rows belong to chunks gone, is found from the Delta log where
it can be (stages.extract.todo); a run where no chunk moved and none is unfinished is skipped."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from graphwright import ids
from graphwright.pipeline.errors import TooManyFailures
from graphwright.pipeline.executors import BatchStage, pool_of
from graphwright.pipeline.stage import Stage, Where
from graphwright.stages.extract.extractors import extractor_key
from graphwright.stages.extract.rebuild_tokens import full_rebuild_tokens
from graphwright.stages.extract.requests import plan_extraction, with_copies
from graphwright.stages.extract.todo import TABLES, from_log, from_tables
from graphwright.storage.memo import StageMemo


def execute(run, m: dict) -> dict:
    store, cfg = run.store, run.config
    key = extractor_key(cfg.extract, cfg.llm)
    memo = StageMemo(store, "extract", ("chunks",), TABLES, key)
    last = memo.unchanged()
    # no chunk added or removed, none left to retry (the count is not under a table's name: a
    # compaction's rebase_notes moves the values of those that equal the table's old version)
    if last and "n_chunks" in last and not last.get("unfinished"):
        m.update(rows_in=0, rows_out=0, skipped=True, extractor=key, chunks_extracted=0, chunks_reused=last["n_chunks"],
                 chunks_failed=0, work_unit="chunks", work_done=0, work_total=last["n_chunks"])
        if cfg.extract.engine == "llm":
            run.llm_totals["full_rebuild_tokens"] = last["full_rebuild_tokens"]
        return {"chunks_extracted": 0, "chunks_failed": 0, "chunks_reused": last["n_chunks"], "extractor": key}
    since = memo.last_reads() if memo.writes_unmoved() else None
    work = (from_log(store, key, since["chunks"]) if since else None) or from_tables(store, key)
    texts, retried, removed = work.texts, work.retried, work.removed
    todo = texts.num_rows
    extracted = mentions = failed = 0
    plan_stats: dict = {}
    if todo:
        stage, batches, copies, plan_stats = _extraction(run, texts, key, retried)
        pending: list[pa.Table] = []
        try:
            for batch in run.map_batches("extract", batches, stage):
                pending.append(with_copies(batch, copies))
                if sum(t.num_rows for t in pending) >= cfg.execution.commit_every:
                    n, k, f = _commit_extractions(run, pending)
                    extracted, mentions, failed = extracted + n, mentions + k, failed + f
            n, k, f = _commit_extractions(run, pending)
            extracted, mentions, failed = extracted + n, mentions + k, failed + f
        finally:  # what killed workers asked and never brought back is counted, even if the stage fails
            if cfg.extract.engine == "llm":
                plan_stats["lost_calls"] = _count_lost_calls(run)
                m.update(lost_calls=plan_stats["lost_calls"])
        plan_stats["calls_commit_s"] = round(run.calls.commit_s, 3)
    m.update(rows_in=todo, rows_out=mentions, extractor=key, chunks_extracted=extracted, chunks_reused=work.chunks - todo,
             chunks_failed=failed, removed=removed, work_found_from=work.found,
             work_unit="chunks", work_done=todo, work_total=work.chunks, **plan_stats)
    rebuild = None
    if cfg.extract.engine == "llm":
        rebuild = run.llm_totals["full_rebuild_tokens"] = full_rebuild_tokens(store)
    failing = store.count("extractions", where=f"extractor = '{key}' AND status = 'failed'") if failed else 0
    if failing and failing > cfg.extract.max_failed_fraction * work.chunks:
        # the index's state after this run: every chunk that still has no extraction, over all chunks
        reasons = store.read("extractions", columns=["chunk_id", "error"], where=f"status = 'failed' AND run_id = '{run.run_id}'")
        example = reasons.slice(0, 1).to_pylist()
        raise TooManyFailures(
            f"{failing} of the index's {work.chunks} chunks have no extraction ({failed} failed in this run), above "
            f"extract.max_failed_fraction={cfg.extract.max_failed_fraction:g}"
            + (f" (e.g. chunk {example[0]['chunk_id']}: {example[0]['error']})" if example else "")
            + ". They are recorded in the extractions table and retried by the next run; nothing was published"
        )
    unfinished = store.count("extractions", where=f"extractor = '{key}' AND status <> 'ok'")
    memo.record({"n_chunks": work.chunks, "full_rebuild_tokens": rebuild, "unfinished": unfinished})
    return {"chunks_extracted": extracted, "chunks_failed": failed, "chunks_reused": work.chunks - todo, "extractor": key}


def _extraction(run, texts: pa.Table, key: str, retried: set[str]) -> tuple[BatchStage, pa.Table, dict, dict]:
    """(the batch stage, the rows to send it, the copies to make of its results, planning
    figures) for the configured extractor."""
    cfg = run.config
    common = dict(batch_size=cfg.extract.batch_size, num_cpus=cfg.execution.actor_num_cpus, actors=cfg.execution.actors)
    if cfg.extract.engine == "nlp":
        from graphwright.stages.extract.nlp import NlpExtractor

        return BatchStage("extract", NlpExtractor, (cfg.extract,), **common), texts, {}, {}
    from graphwright.stages.extract.llm import LLMExtractor

    plan = plan_extraction(run.store, texts, cfg.extract, cfg.llm, retried)
    rounds = 1 + cfg.extract.gleanings
    asks = any(len(c) < rounds for c in plan.work.column("cached").to_pylist())
    session, ledger = run.llm, (str(run.store.root), run.run_id)
    if session.batched:  # the driver sends every round in batches first; the workers only read the answers
        from graphwright.stages.extract.batch import Answered, answer_in_batches

        work, answered = answer_in_batches(run, plan.work) if asks else (plan.work, Answered({}, cfg.llm.model))
        args = (cfg.extract, cfg.llm, key, answered, None)
        return BatchStage("extract", LLMExtractor, args, **common), work, plan.copies, plan.stats
    if session.on_driver:  # the model lives in this process
        args = (cfg.extract, cfg.llm, key, session.engine() if asks else None, ledger)
    else:  # every actor builds a client to the session's engine (for vllm, its Serve route)
        args = (cfg.extract, session.worker_config() if asks else cfg.llm, key, None, ledger)
    return BatchStage("extract", LLMExtractor, args, on_driver=session.on_driver, **common), plan.work, plan.copies, plan.stats


def _count_lost_calls(run) -> int:
    """Requests extraction workers intended whose calls were never recorded (engines.llm.ledger)."""
    from graphwright.engines.llm.ledger import CallLedger

    ledger = CallLedger(str(run.store.root), run.run_id)
    lost = ledger.lost(run.calls.recorded_keys("extract"))
    ledger.clear()
    run.llm_totals["lost"] = run.llm_totals.get("lost", 0) + lost
    if lost:
        run.log(f"[yellow]{lost} LLM request(s) were sent by workers that died before their answers came back[/]")
    return lost


def _flatten(results: pa.Table, column: str, fields: list[str]) -> pa.Table:
    """One row per element of the nested `column`, with the chunk's ids alongside."""
    lists = results.column(column).combine_chunks()
    parent = pc.list_parent_indices(lists)
    values = pc.list_flatten(lists)
    out = {c: pc.take(results.column(c), parent) for c in ("chunk_id", "doc_id", "extractor")}
    for f in fields:
        out[f] = pc.struct_field(values, f)
    return pa.table(out)


def _commit_extractions(run, results: list[pa.Table]) -> tuple[int, int, int]:
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
        "notes": res.column("notes"),
        "run_id": pa.array([run_id] * res.num_rows, pa.string()),
    })
    run.record_llm_calls("extract", _flatten(res, "calls", ["key", "prompt_version", "response", "cache_hit", "prompt_tokens",
                                                            "completion_tokens", "latency_s", "attempts", "error", "cache"]))
    store.append("extractions", markers)
    failed = pc.sum(pc.equal(res.column("status"), "failed")).as_py() or 0
    return res.num_rows, mentions.num_rows, failed


def where(cfg) -> Where:
    llm = cfg.llm
    try:
        extractor = extractor_key(cfg.extract, llm)
    except ValueError as exc:
        extractor = f"invalid: {exc}"
    if cfg.extract.engine == "llm" and llm.engine == "vllm":
        return Where(extractor, f"{pool_of(cfg.execution)}, to the run's Ray Serve LLM application",
                     f"{llm.replicas} vLLM replicas x {llm.tensor_parallel_size} GPU, started once per run")
    if cfg.extract.engine == "llm" and llm.engine == "openai-batch":
        where = llm.base_url if llm.batch.via == "api" else "request files for vllm run-batch"
        return Where(extractor, "driver: every round's requests in batches, then " + pool_of(cfg.execution),
                     f"batches of up to {llm.batch.max_requests} requests to {where}, waited for {llm.batch.wait_s:g} s")
    if cfg.extract.engine == "llm" and llm.engine == "llamacpp":
        return Where(extractor, "driver (one in-process model)", f"n_ctx {llm.n_ctx}")
    if cfg.extract.engine == "llm":
        return Where(extractor, pool_of(cfg.execution), f"{llm.concurrency} requests in flight to {llm.base_url}")
    return Where(extractor, pool_of(cfg.execution), f"batches of {cfg.extract.batch_size} chunks")


STAGE = Stage(
    "extract", reads=("chunks", "extractions", "llm_cache", "llm_batches", "llm_batch_requests"),
    writes=("mentions", "assertions", "extractions", "llm_cache", "llm_calls", "llm_batches", "llm_batch_requests"),
    execute=execute, where=where,
    summary="entities and relations per chunk (nlp rules, or an LLM through the cache)",
    engines=("llm: openai | vllm | llamacpp | openai-batch", "through the cache; or the nlp rules"),
)

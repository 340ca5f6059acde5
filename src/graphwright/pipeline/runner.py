"""The runner: walks a declared pipeline (graphwright.pipeline.definition) under the index's run
lock. Each stage derives its work from the tables it reads, so a stage killed halfway and rerun
redoes exactly the missing part; each writes one stage_metrics row, and the run one `runs` row."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa

from graphwright.config import PipelineConfig
from graphwright.engines.embed import model_name
from graphwright.ops.runs import mark_interrupted
from graphwright.pipeline import definition
from graphwright.pipeline.context import Request, Run
from graphwright.pipeline.errors import WaitingOnBatch
from graphwright.pipeline.progress import StageProgress, stderr_console
from graphwright.pipeline.stage import Stage
from graphwright.stages.extract.extractors import extractor_key
from graphwright.storage import contracts
from graphwright.storage.delta import IndexStore
from graphwright.storage.lock import run_lock
from graphwright.util.collection import fewer_collections
from graphwright.util.terminal import plain


def _now() -> datetime:
    return datetime.now(timezone.utc)


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
    run lock: a full rebuild recomputes everything derived from them. Raises WaitingOnBatch
    (with the run's summary) when a stage stopped waiting on LLM batches (llm.engine
    openai-batch): the run's status is `waiting`, and nothing was published."""
    request = Request(sources=list(sources), mirror=mirror, force=force, rebuild=tuple(rebuild))
    return _run_pipeline("rebuild" if rebuild else "index", definition.INDEX, index_dir, config, request, show_progress, log)


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
    if config is None:
        from graphwright.storage.manifest import load_manifest

        config = PipelineConfig.model_validate_json(load_manifest(IndexStore(index_dir))["config"])
    request = Request(doc_ids=list(doc_ids), source_globs=list(source_globs))
    return _run_pipeline("delete", definition.DELETE, index_dir, config, request, show_progress, log)


def _run_pipeline(command: str, stages: tuple[Stage, ...], index_dir, config: PipelineConfig, request: Request,
                  show_progress: bool, log) -> dict:
    """Run under the index's run lock: a second run at the same time refuses (IndexLocked)."""
    store = IndexStore(index_dir)
    run_id = new_run_id()
    with run_lock(store, run_id, command) as lock, fewer_collections():
        log = log or (lambda msg: stderr_console.print(msg, highlight=False))
        run = Run(store, config, run_id, StageProgress(show_progress), log, request, lock=lock)
        return _walk(run, lock, command, stages)


def _walk(run: Run, lock, command: str, stages: tuple[Stage, ...]) -> dict:
    store, config = run.store, run.config
    started = _now()
    mark_interrupted(store, f"run {run.run_id}")  # this run holds the lock: any other `running` run is dead
    store.upsert("runs", pa.Table.from_pylist([_run_row(run, command, started, None, "running", {}, None)]))
    summary: dict = {"run_id": run.run_id, "command": command, "index": str(store.root), "llm_model": config.llm.model}
    try:
        llm = f" (llm {config.llm.engine} {config.llm.base_url}, concurrency {config.llm.concurrency})" if config.extract.engine == "llm" else ""
        run.log(f"engines: extract={extractor_key(config.extract, config.llm)}{llm} graph={config.cluster.engine} "
                f"embed={model_name(config.embed)} vectors={config.vectors.engine} executor={config.execution.executor}")
        for name in run.request.rebuild:
            if store.exists(name):
                store.overwrite(name, contracts.empty(name))
        enabled = [stage for stage in stages if stage.enabled(config)]
        for stage in enabled:
            if stage.prepare is not None:
                try:
                    stage.prepare(run)
                except Exception as exc:  # noqa: BLE001 - a head start only: the stage does without it
                    run.log(f"[yellow]{stage.name}: preparing failed ({type(exc).__name__}: {exc}); the stage starts what it needs itself[/]")
        try:
            for stage in enabled:
                if "index_manifest" in stage.writes:
                    run.close_llm(sweep=True)  # the LLM stages and the per-row stages are done
                    run.close_executor()
                    lock.check()  # a run whose lease was taken over must not publish
                with run.stage(stage.name, gpus=stage.gpus(config)) as metrics:
                    run.results[stage.name] = stage.execute(run, metrics)
                run.early.start_after(run, stage.name, enabled)
        finally:
            run.early.wait()  # a run that stops leaves no early part writing
            run.close_llm()
            run.close_executor()
        summary.update(_summary(run))
        _finish(run, command, started, "succeeded", summary, None)
        return summary
    except WaitingOnBatch as exc:  # a clean stop, not a failure: the next run collects the batches
        summary.update(status="waiting", waiting={"stage": exc.stage, "requests": exc.requests, "batches": exc.batches,
                                                  "message": str(exc)},
                       llm=dict(run.llm_totals), seconds={m["stage"]: round(m["wall_s"], 2) for m in run.metrics})
        exc.summary = summary
        _finish(run, command, started, "waiting", summary, str(exc))
        run.log(f"[yellow]{exc}[/]")
        raise
    except BaseException as exc:
        _finish(run, command, started, "failed", summary, f"{type(exc).__name__}: {exc}")
        raise


def _summary(run: Run) -> dict:
    r = run.results
    first = r.get("ingest") or r["delete"]
    extract, clusters, reports, embed, manifest = r["extract"], r["cluster"], r["report"], r["embed"], r["publish"]
    counts = manifest["counts"]
    return dict(
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
        export_errors=r.get("export", {}).get("errors", {}),
        documents_diff=first["diff"],
        source_errors=first["errors"],
        recomputed={
            "chunks_written": r["chunk"]["chunks_written"],
            "chunks_removed": r["chunk"]["chunks_removed"],
            "chunks_extracted": extract["chunks_extracted"],
            "chunks_reused": extract["chunks_reused"],
            "entities": r["resolve"]["entities"],
            "relationships": r["resolve"]["relationships"],
            "communities": clusters["changes"],
            "reports_built": reports["built"],
            "reports_reused": reports["reused"],
            "embeddings": embed["counts"],
        },
        seconds={m["stage"]: round(m["wall_s"], 2) for m in run.metrics},
    )


def _run_row(run: Run, command: str, started, finished, status: str, summary: dict, error: str | None) -> dict:
    return {
        "run_id": run.run_id, "command": command, "started_at": started, "finished_at": finished,
        "status": status, "config_hash": run.config.config_hash(), "summary": json.dumps(summary, default=str),
        "error": plain(error),  # Ray's exceptions carry colour escapes
    }


def _finish(run: Run, command: str, started, status: str, summary: dict, error: str | None) -> None:
    if run.metrics:
        run.store.upsert("stage_metrics", pa.Table.from_pylist(run.metrics))
    run.store.upsert("runs", pa.Table.from_pylist([_run_row(run, command, started, _now(), status, summary, error)]))

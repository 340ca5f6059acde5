"""The operations a scheduler runs: the nightly refresh, a full rebuild, a deletion, a rollback.
`jobs/*.py` are their command-line entrypoints, for `ray job submit` or plain `python`.

Inside a Ray job (the job supervisor sets RAY_ADDRESS for the entrypoint), or wherever
RAY_ADDRESS names a cluster, the pipeline joins that cluster instead of starting its own Ray."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from graphwright.config import PipelineConfig, load_config
from graphwright.ops.batches import waiting_summary
from graphwright.ops.costs import cost_history, index_prices
from graphwright.storage.delta import IndexStore
from graphwright.storage.manifest import DATA_TABLES

# what a rebuild recomputes: everything derived from the documents (their text is re-read anyway)
DERIVED_TABLES = tuple(t for t in DATA_TABLES if t != "documents")


def job_config(path: str | None) -> PipelineConfig:
    overrides = {"execution": {"executor": "ray", "address": "auto"}} if os.environ.get("RAY_ADDRESS") else None
    return load_config(path, overrides)


def cost_summary(index: str, plot: str | None = None, prices=None) -> dict:
    """The latest run's cost beside the estimated cost of a full rebuild, and what the LLM
    batches the index waits on will cost (at `prices`, by default the published version's);
    optionally the plot."""
    store = IndexStore(index)
    history = cost_history(store)
    latest = history[-1]
    if plot:
        from graphwright.ops.cost_plot import plot_history

        try:  # the run succeeded: a plot that cannot be written must not turn it into a failure
            plot_history(history, plot, index_prices(store).currency)
        except (OSError, ValueError) as exc:
            print(f"warning: no cost plot: {exc}", file=sys.stderr)
            plot = None
    keys = ("run_id", "command", "status", "wall_s", "cpu_s", "worker_cpu_s", "gpu_s", "llm_calls", "cache_hits", "tokens",
            "batch_tokens", "bytes_written", "cost", "full_rebuild_cost", "full_rebuild_s", "full_rebuild_tokens", "saved_cost")
    return {k: latest[k] for k in keys} | {"runs_recorded": len(history), "plot": plot,
                                           "waiting_batches": waiting_summary(store, prices or index_prices(store))}


def _indexed(index: str, plot: str | None, **run_args) -> dict:
    """An index run and its cost report: status `succeeded`, or `waiting` when it stopped waiting
    on LLM batches (nothing published; the next run collects them)."""
    from graphwright.pipeline.errors import WaitingOnBatch
    from graphwright.pipeline.runner import run_index

    prices = run_args["config"].cost
    try:
        summary = run_index(index_dir=index, show_progress=False, **run_args)
    except WaitingOnBatch as exc:
        return {"status": "waiting", "run": exc.summary, "cost": cost_summary(index, prices=prices)}
    return {"status": "succeeded", "run": summary, "cost": cost_summary(index, plot, prices)}


def nightly(sources: list[str], index: str, config: PipelineConfig, plot: str | None = None) -> dict:
    """Incremental refresh: the sources are the whole corpus (what is gone from them is
    deleted, within ingest.max_delete_fraction), then publish, then Delta maintenance when it is
    due (maintenance section), then the cost report. A run that ends waiting on LLM batches
    returns status `waiting` (no maintenance); the next night's run collects them."""
    from graphwright.pipeline.errors import WaitingOnBatch
    from graphwright.pipeline.runner import run_index

    try:
        summary = run_index(sources, index, config, mirror=True, show_progress=False)
    except WaitingOnBatch as exc:
        return {"status": "waiting", "run": exc.summary, "cost": cost_summary(index, prices=config.cost)}
    maintenance = run_maintenance(index, summary["run_id"], config)
    return {"status": "succeeded", "run": summary, "maintenance": maintenance, "cost": cost_summary(index, plot, config.cost)}


def run_maintenance(index: str, run_id: str, config: PipelineConfig) -> dict:
    """Compaction and retention when the maintenance schedule says so, under the run lock; recorded
    as the "maintain" stage of run `run_id`."""
    from graphwright.ops.maintenance import maintain
    from graphwright.pipeline.runner import new_run_id
    from graphwright.storage.lock import run_lock

    store = IndexStore(index)
    with run_lock(store, new_run_id(), "maintain"):
        return maintain(store, run_id, config.maintenance, config.cost, config.llm.model)


def rebuild(sources: list[str], index: str, config: PipelineConfig, *, drop_llm_cache: bool = False,
            plot: str | None = None) -> dict:
    """Recompute everything derived from the documents. Each derived table is emptied by a new
    Delta commit, so published versions stay readable (and can be rolled back to) and a
    rebuild killed halfway is finished by the next run. The LLM cache is kept unless asked:
    answers to identical prompts are still valid."""
    return _indexed(index, plot, sources=sources, config=config, mirror=True,
                    rebuild=DERIVED_TABLES + (("llm_cache",) if drop_llm_cache else ()))


def delete(index: str, doc_ids: list[str], source_globs: list[str] = ()) -> dict:
    """A deletion (its reports' LLM calls may end it waiting on batches, as an index run)."""
    from graphwright.pipeline.errors import WaitingOnBatch
    from graphwright.pipeline.runner import run_delete

    try:
        summary = run_delete(index, doc_ids=doc_ids, source_globs=list(source_globs), show_progress=False)
    except WaitingOnBatch as exc:
        return {"status": "waiting", "run": exc.summary, "cost": cost_summary(index)}
    return {"status": "succeeded", "run": summary, "cost": cost_summary(index)}


def rollback(index: str, to_version: int) -> dict:
    """Make a published version current again, under the run lock (graphwright.ops.versions.rollback)."""
    from graphwright.ops.versions import rollback as restore
    from graphwright.pipeline.runner import new_run_id
    from graphwright.storage.lock import run_lock

    store, run_id = IndexStore(index), new_run_id()
    with run_lock(store, run_id, "rollback"):
        manifest = restore(store, to_version, run_id)
    return {"rolled_back_to": to_version, "version": manifest["version"], "new_version": manifest["new"], "counts": manifest["counts"]}


def default_plot_path(index: str) -> str | None:
    """Beside a local index; object-store indexes get no plot unless one is asked for."""
    from graphwright.storage.location import is_uri

    return None if is_uri(index) else str(Path(index) / "reports" / "cost.png")

"""graphwright index, delete, versions, rollback, vacuum, runs, inspect."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from graphwright.cli.common import (
    STORAGE_EXIT,
    IndexOpt,
    JsonOpt,
    app,
    err,
    existing_index,
    fail,
    out,
    print_table,
    print_versions,
    version_rows,
)
from graphwright.storage.lock import LOCKED_EXIT


@app.command()
def index(
    sources: Annotated[list[str], typer.Argument(help="Folders or files: .txt/.md, .jsonl, .parquet.")],
    index_dir: IndexOpt,
    config: Annotated[Optional[Path], typer.Option("--config", "-c", help="Pipeline YAML (see pipelines/).")] = None,
    append: Annotated[bool, typer.Option("--append", help="Add/update these documents; do not delete documents missing from them.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Allow a mirror run to delete more than ingest.max_delete_fraction of the index.")] = False,
    max_failed_fraction: Annotated[Optional[float], typer.Option("--max-failed-fraction", min=0, max=1, help="Fail the run when more than this share of extracted chunks failed (overrides extract.max_failed_fraction).")] = None,
    executor: Annotated[Optional[str], typer.Option(help="ray | local (overrides the config).")] = None,
    address: Annotated[Optional[str], typer.Option(help="Ray cluster address to join.")] = None,
    rebuild: Annotated[list[str], typer.Option("--rebuild", help="Empty this derived table first and recompute it from its inputs (repeatable; `graphwright check` names the tables a repair needs).")] = [],
    as_json: JsonOpt = False,
) -> None:
    """Index SOURCES into an index directory and publish a new version."""
    from graphwright.config import ConfigError, load_config
    from graphwright.pipeline.errors import (
        WAITING_EXIT,
        NothingToIndex,
        RefusedDeletion,
        TooManyFailures,
        WaitingOnBatch,
    )
    from graphwright.pipeline.runner import run_index
    from graphwright.storage.lock import IndexLocked, LockLost

    overrides: dict = {}
    if executor:
        overrides.setdefault("execution", {})["executor"] = executor
    if address:
        overrides.setdefault("execution", {})["address"] = address
    if max_failed_fraction is not None:
        overrides.setdefault("extract", {})["max_failed_fraction"] = max_failed_fraction
    try:
        cfg = load_config(config, overrides)
    except ConfigError as exc:
        fail(str(exc))
    from graphwright.storage.health import StorageError
    from graphwright.storage.manifest import DATA_TABLES

    unknown = [t for t in rebuild if t not in DATA_TABLES or t == "documents"]
    if unknown:
        fail(f"--rebuild {unknown[0]}: not a derived table; choose from {', '.join(t for t in DATA_TABLES if t != 'documents')}")
    try:
        summary = run_index(sources, index_dir, cfg, mirror=not append, force=force, rebuild=tuple(rebuild), show_progress=not as_json)
    except StorageError as exc:
        fail(str(exc), STORAGE_EXIT)
    except WaitingOnBatch as exc:  # a clean stop: the next run collects the batches
        if as_json:
            typer.echo(json.dumps(exc.summary, default=str))
        err.print(f"[yellow]waiting:[/] {exc}", highlight=False)
        raise typer.Exit(WAITING_EXIT) from None
    except (NothingToIndex, RefusedDeletion) as exc:
        fail(f"{exc}. Nothing was changed in {index_dir}.")
    except TooManyFailures as exc:
        fail(str(exc))
    except (IndexLocked, LockLost) as exc:
        fail(str(exc), LOCKED_EXIT)
    except ValueError as exc:  # e.g. an engine chosen without the settings it needs
        fail(str(exc))
    _emit_summary(summary, as_json)


def _emit_summary(summary: dict, as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(summary, default=str))
    else:
        _print_summary(summary)


@app.command()
def delete(
    index_dir: IndexOpt,
    doc_id: Annotated[list[str], typer.Option("--doc-id", help="Document id or source key to delete (repeatable).")] = [],
    source_glob: Annotated[list[str], typer.Option("--source-glob", help="Delete documents whose source key matches this glob (repeatable).")] = [],
    as_json: JsonOpt = False,
) -> None:
    """Delete documents and everything that only they supported, then publish a new version."""
    from graphwright.pipeline.errors import WAITING_EXIT, WaitingOnBatch
    from graphwright.pipeline.runner import run_delete
    from graphwright.storage.lock import IndexLocked, LockLost
    from graphwright.storage.manifest import NoPublishedVersion

    if not doc_id and not source_glob:
        fail("name the documents to delete with --doc-id or --source-glob")
    try:
        summary = run_delete(index_dir, doc_ids=doc_id, source_globs=source_glob, show_progress=not as_json)
    except WaitingOnBatch as exc:
        if as_json:
            typer.echo(json.dumps(exc.summary, default=str))
        err.print(f"[yellow]waiting:[/] {exc}", highlight=False)
        raise typer.Exit(WAITING_EXIT) from None
    except NoPublishedVersion as exc:
        fail(str(exc))
    except (IndexLocked, LockLost) as exc:
        fail(str(exc), LOCKED_EXIT)
    _emit_summary(summary, as_json)


@app.command()
def versions(index_dir: IndexOpt, as_json: JsonOpt = False) -> None:
    """List the published versions."""
    rows = version_rows(existing_index(index_dir))
    if as_json:
        typer.echo(json.dumps(rows))
        return
    print_versions(f"published versions — {index_dir}", rows)


@app.command()
def rollback(
    index_dir: IndexOpt,
    to: Annotated[int, typer.Option("--to", help="The version to make current again.")],
    as_json: JsonOpt = False,
) -> None:
    """Restore the tables to a published version and publish that state as a new version."""
    from graphwright.ops.jobs import rollback as locked_rollback
    from graphwright.storage.lock import IndexLocked, LockLost
    from graphwright.storage.manifest import NoPublishedVersion

    existing_index(index_dir)
    try:
        result = locked_rollback(str(index_dir), to)
    except NoPublishedVersion as exc:
        fail(str(exc))
    except (IndexLocked, LockLost) as exc:
        fail(str(exc), LOCKED_EXIT)
    if as_json:
        typer.echo(json.dumps(result))
    else:
        out.print(f"version {result['version']} published with the contents of version {to}" if result["new_version"]
                  else f"the latest version ({result['version']}) already has the contents of version {to}; nothing published")


@app.command()
def vacuum(
    index_dir: IndexOpt,
    keep: Annotated[int, typer.Option("--keep", help="How many of the newest published versions stay readable.")] = 10,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only report what would be removed.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Retention: drop old published versions and the files only they needed."""
    from graphwright.ops.versions import retain
    from graphwright.pipeline.runner import new_run_id
    from graphwright.storage.lock import IndexLocked, LockLost, run_lock
    from graphwright.storage.manifest import NoPublishedVersion

    store = existing_index(index_dir)
    try:
        with run_lock(store, new_run_id(), "vacuum"):
            result = retain(store, keep, dry_run=dry_run)
    except (NoPublishedVersion, ValueError) as exc:
        fail(str(exc))
    except (IndexLocked, LockLost) as exc:
        fail(str(exc), LOCKED_EXIT)
    if as_json:
        typer.echo(json.dumps(result))
    else:
        out.print(f"kept versions {result['kept']}; dropped {result['dropped']}; {result['files_removed']} files ({result['orphans_removed']} that killed runs left) and "
                  f"{result['log_files_removed']} Delta log files removed"
                  + (" (dry run)" if dry_run else "")
                  + ". Delta data files go once their removal is older than the oldest kept version, counted in whole hours.")


def _print_summary(s: dict) -> None:
    t = Table(title=f"graphwright {s.get('command', 'index')} — {s['index']}", show_header=False, title_justify="left")
    diff = s["documents_diff"]
    extracted = s["chunks_extracted"]
    t.add_row("documents", f"{s['documents']}  (new {diff['new']}, changed {diff['changed']}, unchanged {diff['unchanged']}, deleted {diff['deleted']})")
    t.add_row("chunks", f"{s['chunks']}  ({extracted} extracted this run" + (", nothing to extract: all chunks were already extracted)" if extracted == 0 else ")"))
    if s.get("chunks_failed"):
        t.add_row("failed chunks", f"{s['chunks_failed']} (recorded in the extractions table; retried by the next run)")
    llm = s.get("llm") or {}
    if llm.get("calls"):
        spent = llm["prompt_tokens"] + llm["completion_tokens"]
        full = llm.get("full_rebuild_tokens") or 0
        t.add_row("LLM", f"{llm['calls']} requests, {llm['cache_hits']} from cache, {llm['failed']} failed; "
                  f"{llm['prompt_tokens']} prompt + {llm['completion_tokens']} completion tokens spent"
                  + (f" ({spent / full:.1%} of the {full} tokens a full extraction costs)" if full else ""))
    t.add_row("entities", str(s["entities"]))
    t.add_row("relationships", str(s["relationships"]))
    t.add_row("communities", f"{s['communities']}  (per level: " + ", ".join(f"L{k}={v}" for k, v in s["communities_per_level"].items()) + ")")
    t.add_row("reports", str(s["reports"]))
    t.add_row("seconds", "  ".join(f"{k} {v:.1f}" for k, v in s["seconds"].items()) + f"  total {sum(s['seconds'].values()):.1f}")
    r = s.get("recomputed")
    if r:
        t.add_row("recomputed", f"entities {_diff(r['entities'])}, relationships {_diff(r['relationships'])}, "
                  f"reports built {r['reports_built']} / reused {r['reports_reused']}")
    t.add_row("version", f"{s['version']}" + ("  (new)" if s["new_version"] else "  (unchanged: nothing new to publish)"))
    if s["source_errors"]:
        t.add_row("skipped inputs", str(len(s["source_errors"])))
    out.print(t)


def _diff(d: dict) -> str:
    """A table's row changes; resolve reports {"unchanged": True} when it had nothing to do."""
    if d.get("unchanged"):
        return "unchanged"
    return f"+{d.get('added', 0)} -{d.get('removed', 0)} ~{d.get('changed', 0)}"


@app.command()
def runs(index_dir: IndexOpt, limit: Annotated[int, typer.Option(min=1, help="Newest runs to show.")] = 20, as_json: JsonOpt = False) -> None:
    """Each run: status, duration, what changed, the LLM batches it waits on, errors."""
    from graphwright.ops.batches import batch_rows, by_run, priced
    from graphwright.ops.costs import index_prices
    from graphwright.ops.runs import INTERRUPTED, settle

    store = existing_index(index_dir)
    interrupted = settle(store)  # runs left `running` by a dead process
    rows = sorted(store.read("runs").to_pylist(), key=lambda r: r["started_at"], reverse=True)[:limit]
    batches = by_run(priced(batch_rows(store), index_prices(store)))
    report = []
    for r in rows:
        if r["status"] == "running" and r["run_id"] in interrupted:  # the lock is held: shown, not written
            r["status"], r["error"] = "interrupted", INTERRUPTED
        summary = json.loads(r["summary"] or "{}")
        seconds = (r["finished_at"] - r["started_at"]).total_seconds() if r["finished_at"] else None
        report.append({
            "run_id": r["run_id"], "command": r["command"], "status": r["status"], "started_at": str(r["started_at"]),
            "seconds": seconds, "documents": summary.get("documents_diff"), "chunks_extracted": summary.get("chunks_extracted"),
            "version": summary.get("version"), "new_version": summary.get("new_version"), "error": r["error"],
            "source_errors": len(summary.get("source_errors") or []),
            "batches": batches.get(r["run_id"]),
        })
    if as_json:
        typer.echo(json.dumps(report))
        return
    print_table(f"runs — {index_dir}", ("started", "command", "status", "s", "documents +/~/-", "extracted", "LLM batches", "version",
                                         "error"), (
        (r["started_at"][:19], r["command"], r["status"], None if r["seconds"] is None else f"{r['seconds']:.1f}",
         f"{r['documents']['new']}/{r['documents']['changed']}/{r['documents']['deleted']}" if r["documents"] else None,
         r["chunks_extracted"], _batches_cell(r["batches"]),
         f"{r['version']}" + (" (new)" if r["new_version"] else "") if r["version"] else None, (r["error"] or "")[:60])
        for r in report))


def _batches_cell(b: dict | None) -> str | None:
    if not b:
        return None
    if b["waiting"]:
        return f"{b['waiting']} of {b['batches']} waiting ({b['waiting_requests']} requests, ~{b['estimated_cost']:.2g})"
    return f"{b['batches']} collected ({b['requests']} requests, {b['cost']:.2g})"


@app.command()
def inspect(index_dir: IndexOpt, as_json: JsonOpt = False) -> None:
    """Row counts per table, the published versions, and what `graphwright check` finds."""
    from graphwright.ops.check import check as check_index
    from graphwright.storage import contracts
    from graphwright.storage.health import StorageError

    store = existing_index(index_dir)
    rows = {}
    for name in contracts.all_schemas():
        try:
            if store.exists(name):
                rows[name] = {"rows": store.count(name), "delta_version": store.version(name)}
        except StorageError as exc:
            rows[name] = {"rows": None, "delta_version": None, "error": str(exc)}
    try:
        versions = version_rows(store)
    except StorageError:
        versions = []
    health = check_index(store)
    if as_json:
        typer.echo(json.dumps({"index": str(index_dir), "tables": rows, "versions": versions, "check": health}))
        return
    print_table(f"tables — {index_dir}", ("table", "rows", "delta version"),
                 ((name, r["rows"] if r["rows"] is not None else "unreadable", r["delta_version"]) for name, r in rows.items()))
    print_versions("published versions", versions)
    _print_check(health)
    if not health["ok"]:
        raise typer.Exit(CHECK_FAILED_EXIT)


CHECK_FAILED_EXIT = 2  # check (and inspect) found problems


@app.command()
def check(
    index_dir: IndexOpt,
    version: Annotated[Optional[int], typer.Option(help="Published version to verify (default: the latest).")] = None,
    repair: Annotated[bool, typer.Option("--repair", help="Carry out the repairs offered (quarantine broken commits and files, rebuild vector files, roll back to the newest intact version).")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Verify that the published version's tables (log, data files, row counts) and vector files
    (sha256) can be read, and every table's latest version too; name each problem and its repair."""
    from graphwright.ops.check import check as check_index
    from graphwright.ops.repair import repair as repair_index
    from graphwright.pipeline.runner import new_run_id
    from graphwright.storage.lock import IndexLocked, LockLost, run_lock

    store = existing_index(index_dir)
    if repair:
        run_id = new_run_id()
        try:
            with run_lock(store, run_id, "repair"):
                result = repair_index(store, run_id)
        except (IndexLocked, LockLost) as exc:
            fail(str(exc), LOCKED_EXIT)
    else:
        result = check_index(store, version)
    if as_json:
        typer.echo(json.dumps(result, default=str))
    else:
        for line in result.get("repaired", []):
            out.print(f"[green]repaired:[/] {line}", highlight=False)
        for line in result.get("left", []):
            out.print(f"[yellow]to do:[/] {line}", highlight=False)
        _print_check(result)
    if not result["ok"]:
        raise typer.Exit(CHECK_FAILED_EXIT)


def _print_check(result: dict) -> None:
    if result["ok"]:
        out.print(f"check: ok (published version {result.get('published_version')}: every table, data file and vector file "
                  "is readable)", highlight=False)
        return
    for p in result["problems"]:
        at = f" version {p['version']}" if p["version"] is not None else ""
        where = "published" if p["scope"] == "published" else "latest (the next run builds on it)"
        out.print(f"[red]broken:[/] {p['table']}{at} ({where}): {p['detail']}. Repair: {p['repair']}", highlight=False)

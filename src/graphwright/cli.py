"""The `graphwright` command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from graphwright.lock import LOCKED_EXIT
from graphwright.query.searcher import MODES

app = typer.Typer(help="Build, publish and query GraphRAG-style indexes.", no_args_is_help=True, add_completion=False)
out = Console()
err = Console(stderr=True)

IndexOpt = Annotated[str, typer.Option("--index", "-i", help="Index directory, or an object-store URI (s3://bucket/prefix, gs://..., abfss://...).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout.")]
MODE_HELP = " | ".join(MODES) + " (see README, Querying)"


def _fail(message: str, code: int = 1) -> None:
    err.print(f"[red]error:[/] {message}", highlight=False)
    raise typer.Exit(code)


def _existing_index(index_dir: str):
    from graphwright.store import IndexStore

    store = IndexStore(index_dir)
    if store.is_remote:
        if not store.exists("index_manifest"):
            _fail(f"{index_dir}: not an index (no tables/index_manifest there)")
    elif not store.root.is_dir():
        _fail(f"{index_dir}: no such directory")
    elif not (store.root / "tables").is_dir():
        _fail(f"{index_dir}: not an index directory (no tables/)")
    return store


def _print_table(title: str, columns: tuple[str, ...], rows) -> None:
    t = Table(title=title, title_justify="left")
    for col in columns:
        t.add_column(col)
    for row in rows:
        t.add_row(*("" if v is None else str(v) for v in row))
    out.print(t)


def _version_rows(store) -> list[dict]:
    from graphwright.publish import version_rows

    return version_rows(store)


def _print_versions(title: str, rows: list[dict]) -> None:
    _print_table(title, ("version", "published", "by", "docs", "chunks", "entities", "communities", "reports"), (
        (m["version"], m["published_at"][:19], m["command"], *(m["counts"].get(k) for k in ("documents", "chunks", "entities", "communities", "community_reports")))
        for m in rows))


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
    as_json: JsonOpt = False,
) -> None:
    """Index SOURCES into an index directory and publish a new version."""
    from graphwright.config import ConfigError, load_config
    from graphwright.lock import IndexLocked, LockLost
    from graphwright.pipeline import NothingToIndex, RefusedDeletion, TooManyFailures, run_index

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
        _fail(str(exc))
    try:
        summary = run_index(sources, index_dir, cfg, mirror=not append, force=force, show_progress=not as_json)
    except (NothingToIndex, RefusedDeletion) as exc:
        _fail(f"{exc}. Nothing was changed in {index_dir}.")
    except TooManyFailures as exc:
        _fail(str(exc))
    except (IndexLocked, LockLost) as exc:
        _fail(str(exc), LOCKED_EXIT)
    except ValueError as exc:  # e.g. an engine chosen without the settings it needs
        _fail(str(exc))
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
    from graphwright.lock import IndexLocked, LockLost
    from graphwright.pipeline import run_delete
    from graphwright.publish import NoPublishedVersion

    if not doc_id and not source_glob:
        _fail("name the documents to delete with --doc-id or --source-glob")
    try:
        summary = run_delete(index_dir, doc_ids=doc_id, source_globs=source_glob, show_progress=not as_json)
    except NoPublishedVersion as exc:
        _fail(str(exc))
    except (IndexLocked, LockLost) as exc:
        _fail(str(exc), LOCKED_EXIT)
    _emit_summary(summary, as_json)


@app.command()
def versions(index_dir: IndexOpt, as_json: JsonOpt = False) -> None:
    """List the published versions."""
    rows = _version_rows(_existing_index(index_dir))
    if as_json:
        typer.echo(json.dumps(rows))
        return
    _print_versions(f"published versions — {index_dir}", rows)


@app.command()
def rollback(
    index_dir: IndexOpt,
    to: Annotated[int, typer.Option("--to", help="The version to make current again.")],
    as_json: JsonOpt = False,
) -> None:
    """Restore the tables to a published version and publish that state as a new version."""
    from graphwright.jobs import rollback as locked_rollback
    from graphwright.lock import IndexLocked, LockLost
    from graphwright.publish import NoPublishedVersion

    _existing_index(index_dir)
    try:
        result = locked_rollback(str(index_dir), to)
    except NoPublishedVersion as exc:
        _fail(str(exc))
    except (IndexLocked, LockLost) as exc:
        _fail(str(exc), LOCKED_EXIT)
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
    from graphwright.lock import IndexLocked, LockLost, run_lock
    from graphwright.pipeline import new_run_id
    from graphwright.publish import NoPublishedVersion, retain

    store = _existing_index(index_dir)
    try:
        with run_lock(store, new_run_id(), "vacuum"):
            result = retain(store, keep, dry_run=dry_run)
    except (NoPublishedVersion, ValueError) as exc:
        _fail(str(exc))
    except (IndexLocked, LockLost) as exc:
        _fail(str(exc), LOCKED_EXIT)
    if as_json:
        typer.echo(json.dumps(result))
    else:
        out.print(f"kept versions {result['kept']}; dropped {result['dropped']}; {result['files_removed']} files removed"
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
        ents, rels = r["entities"], r["relationships"]
        t.add_row("recomputed", f"entities +{ents['added']} -{ents['removed']} ~{ents['changed']}, relationships +{rels['added']} -{rels['removed']} ~{rels['changed']}, "
                  f"reports built {r['reports_built']} / reused {r['reports_reused']}")
    t.add_row("version", f"{s['version']}" + ("  (new)" if s["new_version"] else "  (unchanged: nothing new to publish)"))
    if s["source_errors"]:
        t.add_row("skipped inputs", str(len(s["source_errors"])))
    out.print(t)


@app.command()
def query(
    question: Annotated[str, typer.Argument(help="The question.")],
    index_dir: IndexOpt,
    mode: Annotated[str, typer.Option(help=MODE_HELP)] = "local",
    top_k: Annotated[int, typer.Option("--top-k", "-k", min=1, help="Evidence items to return.")] = 10,
    version: Annotated[Optional[int], typer.Option(help="Published version to query (default: latest).")] = None,
    level: Annotated[Optional[int], typer.Option(min=0, help="Community level for --mode global (default: query.global_level, or chosen from the data).")] = None,
    answer: Annotated[Optional[bool], typer.Option("--answer/--no-answer", help="Write an answer with an LLM (default: when one is configured).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Retrieve ranked evidence for QUESTION, with provenance; with an LLM configured, answer it citing the evidence."""
    from graphwright.publish import NoPublishedVersion
    from graphwright.query import query as run_query

    _existing_index(index_dir)
    try:
        result = run_query(str(index_dir), question, mode=mode, top_k=top_k, version=version, answer=answer, level=level)
    except (NoPublishedVersion, ValueError) as exc:
        _fail(str(exc))
    if as_json:
        typer.echo(json.dumps(result, default=str))
        return
    out.print(f"[bold]{question}[/]  (mode {mode}, version {result['version']})")
    if result.get("answer"):
        out.print(f"\n[bold]answer[/] ({result['llm']['model']}): {result['answer']}", highlight=False)
    elif result.get("answer_error"):
        out.print(f"\n[yellow]no answer:[/] {result['answer_error']}", highlight=False)
    for rank, e in enumerate(result["evidence"], 1):
        if e.get("kind") == "report":
            out.print(f"\n[bold]{rank}.[/] score {e['score']:.3f}  report L{e['level']} {e['report_title']!r} ({e['community_id']}): "
                      f"{len(e['doc_ids'])} docs, {len(e['chunk_ids'])} chunks; nearest chunk {e['chunk_id']} in {e['title']!r}", highlight=False)
            continue
        via = f"  via {', '.join(e['via_entities'][:4])}" if e.get("via_entities") else ""
        out.print(f"\n[bold]{rank}.[/] score {e['score']:.3f}  doc {e['title']!r} ({e['doc_id']})  chunk {e['chunk_id']}{via}", highlight=False)
        text = " ".join(e["text"].split())
        out.print("   " + (text[:400] + "…" if len(text) > 400 else text), highlight=False)
    if result.get("reports"):
        out.print("\n[bold]community reports[/]")
        for r in result["reports"][:3]:
            out.print(f"  L{r['level']} {r['title']} (rating {r['rating']}): {r['summary'][:200]}", highlight=False)


@app.command("eval")
def eval_(
    index_dir: IndexOpt,
    questions: Annotated[Path, typer.Option("--questions", help="JSONL with question and gold_doc_ids (source keys).")],
    mode: Annotated[str, typer.Option(help=MODE_HELP)] = "local",
    k: Annotated[int, typer.Option("--k", min=1, help="Evidence cut-off.")] = 10,
    version: Annotated[Optional[int], typer.Option(help="Published version (default: latest).")] = None,
    answer: Annotated[Optional[bool], typer.Option("--answer/--no-answer", help="Have the LLM answer and score exact match / F1 (default: when an LLM is configured).")] = None,
    level: Annotated[Optional[int], typer.Option(min=0, help="Community level for --mode global.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Evidence recall@k of a query mode on a question set; with an LLM, answer exact match and F1."""
    from graphwright.evaluate import evaluate, load_questions
    from graphwright.publish import NoPublishedVersion

    _existing_index(index_dir)
    try:
        result = evaluate(str(index_dir), load_questions(questions), mode, k, version, answer=answer,
                          **({"level": level} if level is not None else {}))
    except (NoPublishedVersion, ValueError, OSError) as exc:
        _fail(str(exc))
    if as_json:
        typer.echo(json.dumps(result))
    else:
        out.print(f"{result['questions']} questions, mode {mode}: recall@{k} {result[f'recall@{k}']:.3f}, "
                  f"all gold in top {k}: {result[f'all_gold@{k}']:.3f}, {result['seconds_per_query']:.3f} s/query")
        if result.get("answered"):
            em, f1 = result["exact_match"], result["f1"]
            out.print(f"answers: {result['answered']}, exact match {'-' if em is None else f'{em:.3f}'}, F1 {'-' if f1 is None else f'{f1:.3f}'}, "
                      f"{result['prompt_tokens']} prompt + {result['completion_tokens']} completion tokens")


@app.command()
def runs(index_dir: IndexOpt, limit: Annotated[int, typer.Option(min=1, help="Newest runs to show.")] = 20, as_json: JsonOpt = False) -> None:
    """Each run: status, duration, what changed, errors."""
    store = _existing_index(index_dir)
    rows = sorted(store.read("runs").to_pylist(), key=lambda r: r["started_at"], reverse=True)[:limit]
    report = []
    for r in rows:
        summary = json.loads(r["summary"] or "{}")
        seconds = (r["finished_at"] - r["started_at"]).total_seconds() if r["finished_at"] else None
        report.append({
            "run_id": r["run_id"], "command": r["command"], "status": r["status"], "started_at": str(r["started_at"]),
            "seconds": seconds, "documents": summary.get("documents_diff"), "chunks_extracted": summary.get("chunks_extracted"),
            "version": summary.get("version"), "new_version": summary.get("new_version"), "error": r["error"],
            "source_errors": len(summary.get("source_errors") or []),
        })
    if as_json:
        typer.echo(json.dumps(report))
        return
    _print_table(f"runs — {index_dir}", ("started", "command", "status", "s", "documents +/~/-", "extracted", "version", "error"), (
        (r["started_at"][:19], r["command"], r["status"], None if r["seconds"] is None else f"{r['seconds']:.1f}",
         f"{r['documents']['new']}/{r['documents']['changed']}/{r['documents']['deleted']}" if r["documents"] else None,
         r["chunks_extracted"], f"{r['version']}" + (" (new)" if r["new_version"] else "") if r["version"] else None,
         (r["error"] or "")[:60])
        for r in report))


@app.command()
def inspect(index_dir: IndexOpt, as_json: JsonOpt = False) -> None:
    """Row counts per table and the published versions."""
    from graphwright import tables

    store = _existing_index(index_dir)
    rows = {name: {"rows": store.count(name), "delta_version": store.version(name)} for name in tables.all_schemas() if store.exists(name)}
    versions = _version_rows(store)
    if as_json:
        typer.echo(json.dumps({"index": str(index_dir), "tables": rows, "versions": versions}))
        return
    _print_table(f"tables — {index_dir}", ("table", "rows", "delta version"),
                 ((name, r["rows"], r["delta_version"]) for name, r in rows.items()))
    _print_versions("published versions", versions)


@app.command()
def plan(
    config: Annotated[Optional[Path], typer.Option("--config", "-c", help="Pipeline config (YAML); default: the embedded defaults.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Print the resolved plan (stages, engines, where they run, resources) without running it."""
    from graphwright.config import ConfigError, load_config
    from graphwright.plan import describe, executor_line

    try:
        cfg = load_config(config)
    except ConfigError as exc:
        _fail(str(exc), 2)
    rows = describe(cfg)
    if as_json:
        typer.echo(json.dumps({"executor": executor_line(cfg), "config_hash": cfg.config_hash(), "stages": rows}))
        return
    _print_table(f"plan — {config or 'embedded defaults'} (config {cfg.config_hash()})", ("stage", "engine", "runs on", "resources"),
                 ((r["stage"], r["engine"], r["runs_on"], r["resources"]) for r in rows))
    out.print(executor_line(cfg))


def _money(value: float) -> str:
    return f"{value:.2g}" if value < 0.01 else f"{value:,.2f}"


@app.command()
def cost(
    index_dir: IndexOpt,
    last: Annotated[int, typer.Option(min=1, help="Runs in the history table.")] = 20,
    prices: Annotated[Path | None, typer.Option(help="Re-price every run with the cost section of this config file.")] = None,
    plot: Annotated[Path | None, typer.Option(help="Write a chart of cost per run by stage (.png or .svg).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """What each run cost, by stage, and what a full rebuild would have cost instead."""
    from graphwright.config import load_config
    from graphwright.costs import by_stage, cost_history, index_prices

    from graphwright.config import ConfigError

    store = _existing_index(index_dir)
    try:
        price_table = load_config(prices).cost if prices else None
    except ConfigError as exc:
        _fail(str(exc), 2)
    cur = (price_table or index_prices(store)).currency
    history = cost_history(store, price_table)
    if not history:
        _fail(f"{index_dir}: no runs recorded yet")
    if plot:
        from graphwright.cost_plot import plot_history

        try:
            plot_history(history[-last:], plot, cur)
        except (OSError, ValueError) as exc:
            _fail(f"cannot write the plot {plot}: {exc}")
    if as_json:
        typer.echo(json.dumps({"index": str(index_dir), "currency": cur, "runs": history, "by_stage": by_stage(history)}, default=str))
        return
    latest = history[-1]
    _print_table(f"latest run {latest['run_id']} ({latest['command']}, {latest['status']})",
                 ("stage", "wall s", "cpu s", "gpu s", "llm calls (cached)", "tokens", "MB", cur, f"full {cur}"),
                 ((s["stage"], f"{s['wall_s']:.2f}", f"{s['cpu_s'] + s['worker_cpu_s']:.2f}", f"{s['gpu_s']:.0f}",
                   f"{s['llm_calls']} ({s['cache_hits']})", s["prompt_tokens"] + s["completion_tokens"], f"{s['bytes_written'] / 1e6:.2f}",
                   _money(s["cost"]), _money(s["full_rebuild_cost"])) for s in latest["stages"]))
    _print_table("history (full: estimated cost of rebuilding everything)", ("started", "command", "status", "wall s", "tokens", cur, f"full {cur}", "saved", "version"), (
        (str(r["started_at"])[:16], r["command"], r["status"], f"{r['wall_s']:.1f}", r["tokens"], _money(r["cost"]),
         _money(r["full_rebuild_cost"]), f"{r['saved_cost'] / r['full_rebuild_cost']:.0%}" if r["full_rebuild_cost"] else "-",
         f"{r['version']}" + ("*" if r["new_version"] else "") if r["version"] else None)
        for r in history[-last:]))
    if plot:
        typer.echo(f"plot: {plot}")


@app.command()
def serve(
    index_root: Annotated[Path, typer.Option("--index-root", help="Directory whose subdirectories are indexes, served by name.")],
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8080,
    api_keys_file: Annotated[Path | None, typer.Option("--api-keys-file", help="API keys, one per line (added to GRAPHWRIGHT_API_KEYS).")] = None,
    no_auth: Annotated[bool, typer.Option("--no-auth", help="Serve without API keys (anyone who can reach the port can query).")] = False,
    workers: Annotated[int, typer.Option("--workers", min=1, help="Queries answered at once, each in a worker thread; more wait their turn.")] = 4,
) -> None:
    """Serve the indexes under --index-root over HTTP (OpenAPI at /openapi.json). Requests need an API
    key as a bearer token: keys come from GRAPHWRIGHT_API_KEYS (comma-separated) or --api-keys-file."""
    import uvicorn

    from graphwright.server import API_KEYS_ENV, create_app, load_api_keys

    try:
        keys = load_api_keys(api_keys_file)
    except OSError as exc:
        _fail(f"cannot read the API keys file: {exc}")
    if keys and no_auth:
        _fail("--no-auth given while API keys are configured; drop one or the other")
    if not keys and not no_auth:
        _fail(f"no API keys: set {API_KEYS_ENV} (comma-separated) or --api-keys-file, or pass --no-auth to serve without authentication")
    if no_auth:
        err.print(f"[yellow]warning:[/] serving without authentication on {host}:{port}: anyone who can reach it can query", highlight=False)
    try:
        api = create_app(index_root, keys, allow_no_auth=no_auth, max_concurrency=workers)
    except ValueError as exc:
        _fail(str(exc))
    uvicorn.run(api, host=host, port=port)


@app.command()
def export(
    index_dir: IndexOpt,
    fmt: Annotated[str, typer.Option("--format", "-f", help="graphrag | lightrag")],
    version: Annotated[int | None, typer.Option(help="Published version (default: latest).")] = None,
    out_dir: Annotated[Path | None, typer.Option("--out", help="Output directory (default: INDEX/exports/FORMAT/vN).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Write a published version in Microsoft GraphRAG's output layout or as a LightRAG working directory."""
    from graphwright.exports import export as write_export
    from graphwright.publish import NoPublishedVersion

    _existing_index(index_dir)
    try:
        result = write_export(index_dir, fmt, version, out_dir)
    except (NoPublishedVersion, ValueError, FileExistsError, RuntimeError) as exc:
        _fail(str(exc))
    if as_json:
        typer.echo(json.dumps(result))
        return
    state = "written" if result["written"] else "already there"
    out.print(f"{fmt} export of version {result['version']} {state}: {result['path']}", highlight=False)
    _print_table("rows", ("file", "rows"), sorted(result["rows"].items()))


def main() -> None:  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    main()

"""graphwright query, eval, serve, export."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from graphwright.cli.common import (
    MODE_HELP,
    STORAGE_EXIT,
    IndexOpt,
    JsonOpt,
    app,
    err,
    existing_index,
    fail,
    out,
    print_table,
)


@app.command()
def query(
    question: Annotated[str, typer.Argument(help="The question.")],
    index_dir: IndexOpt,
    mode: Annotated[str, typer.Option(help=MODE_HELP)] = "local",
    top_k: Annotated[int, typer.Option("--top-k", "-k", min=1, help="Evidence items to return.")] = 10,
    version: Annotated[Optional[int], typer.Option(help="Published version to query (default: latest).")] = None,
    level: Annotated[Optional[int], typer.Option(min=0, help="Community level for --mode global (default: query.global_level, or chosen from the data).")] = None,
    answer: Annotated[Optional[bool], typer.Option("--answer/--no-answer", help="Write an answer with an LLM (default: when one is configured).")] = None,
    steps: Annotated[int, typer.Option("--steps", min=0, max=3, help="graph and local: iterative retrieval with the LLM, at most this many reasoning steps (IRCoT).")] = 0,
    as_json: JsonOpt = False,
) -> None:
    """Retrieve ranked evidence for QUESTION, with provenance; with an LLM configured, answer it citing the evidence."""
    from graphwright.query import query as run_query
    from graphwright.storage.health import StorageError
    from graphwright.storage.manifest import NoPublishedVersion

    existing_index(index_dir)
    try:
        result = run_query(str(index_dir), question, mode=mode, top_k=top_k, version=version, answer=answer, level=level, steps=steps)
    except StorageError as exc:
        fail(str(exc), STORAGE_EXIT)
    except (NoPublishedVersion, ValueError) as exc:
        fail(str(exc))
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
    steps: Annotated[int, typer.Option("--steps", min=0, max=3, help="graph and local: iterative retrieval with the LLM (IRCoT), at most this many steps.")] = 0,
    as_json: JsonOpt = False,
) -> None:
    """Evidence recall@k of a query mode on a question set; with an LLM, answer exact match and F1."""
    from graphwright.query.evaluate import evaluate, load_questions
    from graphwright.storage.health import StorageError
    from graphwright.storage.manifest import NoPublishedVersion

    existing_index(index_dir)
    try:
        result = evaluate(str(index_dir), load_questions(questions), mode, k, version, answer=answer,
                          **({"level": level} if level is not None else {}), **({"steps": steps} if steps else {}))
    except StorageError as exc:
        fail(str(exc), STORAGE_EXIT)
    except (NoPublishedVersion, ValueError, OSError) as exc:
        fail(str(exc))
    if as_json:
        typer.echo(json.dumps(result))
    else:
        out.print(f"{result['questions']} questions, mode {mode}: recall@{k} {result[f'recall@{k}']:.3f}, "
                  f"all gold in top {k}: {result[f'all_gold@{k}']:.3f}, {result['seconds_per_query']:.3f} s/query")
        if result["short_answer_questions"]:
            out.print(f"{result['short_answer_questions']} short answers: text in the top {k} "
                      f"{result[f'answer_in_evidence@{k}']:.3f}, their words in the top {k} {result[f'answer_words@{k}']:.3f}")
        if result.get("reasoning_steps") is not None and not result.get("answered"):
            out.print(f"iterative retrieval: {result['reasoning_steps']} reasoning steps, "
                      f"{result['prompt_tokens']} prompt + {result['completion_tokens']} completion tokens")
        if result.get("answered"):
            em, f1 = result["exact_match"], result["f1"]
            out.print(f"answers: {result['answered']}, exact match {'-' if em is None else f'{em:.3f}'}, F1 {'-' if f1 is None else f'{f1:.3f}'}, "
                      f"{result['prompt_tokens']} prompt + {result['completion_tokens']} completion tokens")


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

    from graphwright.serve.api import API_KEYS_ENV, create_app, load_api_keys

    try:
        keys = load_api_keys(api_keys_file)
    except OSError as exc:
        fail(f"cannot read the API keys file: {exc}")
    if keys and no_auth:
        fail("--no-auth given while API keys are configured; drop one or the other")
    if not keys and not no_auth:
        fail(f"no API keys: set {API_KEYS_ENV} (comma-separated) or --api-keys-file, or pass --no-auth to serve without authentication")
    if no_auth:
        err.print(f"[yellow]warning:[/] serving without authentication on {host}:{port}: anyone who can reach it can query", highlight=False)
    try:
        api = create_app(index_root, keys, allow_no_auth=no_auth, max_concurrency=workers)
    except ValueError as exc:
        fail(str(exc))
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
    from graphwright.storage.health import StorageError
    from graphwright.storage.manifest import NoPublishedVersion

    existing_index(index_dir)
    try:
        result = write_export(index_dir, fmt, version, out_dir)
    except StorageError as exc:
        fail(str(exc), STORAGE_EXIT)
    except (NoPublishedVersion, ValueError, FileExistsError, RuntimeError) as exc:
        fail(str(exc))
    if as_json:
        typer.echo(json.dumps(result))
        return
    state = "written" if result["written"] else "already there"
    out.print(f"{fmt} export of version {result['version']} {state}: {result['path']}", highlight=False)
    print_table("rows", ("file", "rows"), sorted(result["rows"].items()))

"""graphwright batches, export-batch, import-batch: an index's LLM batches (llm.engine
openai-batch), and the offline path for `vllm run-batch` on a GPU node."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from graphwright.cli.common import IndexOpt, JsonOpt, app, existing_index, fail, out, print_table


def _config(path: Path | None, store):
    """The pipeline configuration: the file given, or the latest published version's."""
    from graphwright.config import ConfigError, PipelineConfig, load_config
    from graphwright.storage.manifest import NoPublishedVersion, load_manifest

    try:
        if path is not None:
            return load_config(path)
        return PipelineConfig.model_validate_json(load_manifest(store)["config"])
    except NoPublishedVersion:
        fail(f"{store.root}: nothing published yet, so no configuration to read the llm section from: pass --config")
    except ConfigError as exc:
        fail(str(exc), 2)


@app.command()
def batches(
    index_dir: IndexOpt,
    cancel: Annotated[list[str], typer.Option("--cancel", help="Cancel a live batch (ours or the provider's id; 'all'). Repeatable.")] = [],
    config: Annotated[Optional[Path], typer.Option("--config", "-c", help="Pipeline YAML naming the llm endpoint (for --cancel; default: the published version's).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """The index's LLM batches: state, requests, tokens and cost (an estimate while one runs)."""
    from graphwright.ops.batches import BatchError, batch_rows, cancel_batches, priced
    from graphwright.ops.costs import index_prices
    from graphwright.pipeline.runner import new_run_id

    store = existing_index(index_dir)
    if cancel:
        try:
            done = cancel_batches(store, _config(config, store).llm, cancel, new_run_id())
        except BatchError as exc:
            fail(str(exc))
        if as_json:
            typer.echo(json.dumps({"cancelled": done}))
            return
        for d in done:
            out.print(f"{d['batch_id']}: " + (f"cancel asked ({d['provider_status']}); the next run collects what it answered"
                                              if d["cancelled"] else f"not cancelled: {d['reason']}"))
        return
    prices = index_prices(store)
    rows = priced(batch_rows(store), prices)
    if as_json:
        typer.echo(json.dumps({"index": str(index_dir), "currency": prices.currency, "batches": rows}, default=str))
        return
    print_table(f"LLM batches — {index_dir} ({prices.currency} at the batch price; ~ an estimate)",
                ("batch", "provider id", "stage", "submitted by", "state", "requests", "answered", "tokens", prices.currency), (
        (b["batch_id"], b["provider_batch_id"], b["stage"], b["submitted_by"],
         b["provider_status"] if b["live"] else b["state"] + (f" ({b['provider_status']})" if b["provider_status"] else ""),
         b["requests"], b["completed"], ("~" if b["estimated"] else "") + str(b["tokens"]),
         ("~" if b["estimated"] else "") + f"{b['cost']:.4g}") for b in rows))


@app.command("export-batch")
def export_batch(
    index_dir: IndexOpt,
    out_dir: Annotated[Path, typer.Option("--out", help="Folder to write the request files to.")],
    as_json: JsonOpt = False,
) -> None:
    """Write the request files of the batches waiting for `vllm run-batch` (llm.batch.via files)
    to a folder, with the command that answers each."""
    from graphwright.ops.batches import export_batches

    store = existing_index(index_dir)
    exported = export_batches(store, out_dir)
    if as_json:
        typer.echo(json.dumps({"batches": exported}))
        return
    if not exported:
        out.print(f"no batch of {index_dir} waits for vllm run-batch")
        return
    for b in exported:
        out.print(f"{b['batch_id']} ({b['stage']}, {b['requests']} requests):  {b['command']}")
    out.print(f"then: graphwright import-batch --index {index_dir} {out_dir}/*.output.jsonl")


@app.command("import-batch")
def import_batch(
    files: Annotated[list[Path], typer.Argument(help="Result files of vllm run-batch (or of a Batch API).")],
    index_dir: IndexOpt,
    as_json: JsonOpt = False,
) -> None:
    """Put `vllm run-batch` results beside the requests they answer; the next run collects them
    into the cache and carries on."""
    from graphwright.ops.batches import BatchError, import_results

    store = existing_index(index_dir)
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        fail(f"no such file: {', '.join(missing)}")
    try:
        result = import_results(store, files)
    except BatchError as exc:
        fail(str(exc))
    if as_json:
        typer.echo(json.dumps(result))
        return
    for batch_id, n in result["batches"].items():
        out.print(f"{batch_id}: {n} result lines; the next run collects them")
    skipped = result["unmatched_lines"] + result["unreadable_lines"]
    if skipped:
        out.print(f"[yellow]{skipped} lines skipped[/] ({result['unmatched_lines']} answer no waiting batch, "
                  f"{result['unreadable_lines']} are not JSON)")

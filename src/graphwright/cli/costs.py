"""graphwright plan and cost."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from graphwright.cli.common import (
    IndexOpt,
    JsonOpt,
    app,
    existing_index,
    fail,
    out,
    print_table,
)


@app.command()
def plan(
    config: Annotated[Optional[Path], typer.Option("--config", "-c", help="Pipeline config (YAML); default: the embedded defaults.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Print the resolved plan (stages, engines, where they run, resources) without running it."""
    from graphwright.config import ConfigError, load_config
    from graphwright.pipeline.plan import describe, executor_line

    try:
        cfg = load_config(config)
    except ConfigError as exc:
        fail(str(exc), 2)
    rows = describe(cfg)
    if as_json:
        typer.echo(json.dumps({"executor": executor_line(cfg), "config_hash": cfg.config_hash(), "stages": rows}))
        return
    print_table(f"plan — {config or 'embedded defaults'} (config {cfg.config_hash()})", ("stage", "engine", "runs on", "resources"),
                 ((r["stage"], r["engine"], r["runs_on"], r["resources"]) for r in rows))
    for r in rows:
        if r["early_after"]:
            out.print(f"{r['stage']}: part of its work may start once {r['early_after']} has run (where its batches stay in this process), beside the stages in between")
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
    """What each run cost, by stage, and what a full rebuild would have cost instead; the LLM
    batches, what the collected ones cost and what those still running will cost."""
    from graphwright.config import ConfigError, load_config
    from graphwright.ops.batches import batch_rows, priced
    from graphwright.ops.costs import by_stage, cost_history, index_prices

    store = existing_index(index_dir)
    try:
        price_table = load_config(prices).cost if prices else None
    except ConfigError as exc:
        fail(str(exc), 2)
    cur = (price_table or index_prices(store)).currency
    history = cost_history(store, price_table)
    batches = priced(batch_rows(store), price_table or index_prices(store))
    if not history:
        fail(f"{index_dir}: no runs recorded yet")
    if plot:
        from graphwright.ops.cost_plot import plot_history

        try:
            plot_history(history[-last:], plot, cur)
        except (OSError, ValueError) as exc:
            fail(f"cannot write the plot {plot}: {exc}")
    if as_json:
        waiting = [b for b in batches if b["live"]]
        typer.echo(json.dumps({"index": str(index_dir), "currency": cur, "runs": history, "by_stage": by_stage(history),
                               "batches": batches, "waiting": {"batches": len(waiting), "requests": sum(b["requests"] for b in waiting),
                                                               "estimated_cost": sum(b["cost"] for b in waiting)}}, default=str))
        return
    latest = history[-1]
    print_table(f"latest run {latest['run_id']} ({latest['command']}, {latest['status']})",
                 ("stage", "wall s", "cpu s", "gpu s", "llm calls (cached)", "tokens", "MB", cur, f"full {cur}"),
                 ((s["stage"], f"{s['wall_s']:.2f}", f"{s['cpu_s'] + s['worker_cpu_s']:.2f}", f"{s['gpu_s']:.0f}",
                   f"{s['llm_calls']} ({s['cache_hits']})", s["prompt_tokens"] + s["completion_tokens"], f"{s['bytes_written'] / 1e6:.2f}",
                   _money(s["cost"]), _money(s["full_rebuild_cost"])) for s in latest["stages"]))
    print_table("history (full: estimated cost of rebuilding everything)", ("started", "command", "status", "wall s", "tokens", cur, f"full {cur}", "saved", "version"), (
        (str(r["started_at"])[:16], r["command"], r["status"], f"{r['wall_s']:.1f}", r["tokens"], _money(r["cost"]),
         _money(r["full_rebuild_cost"]), f"{r['saved_cost'] / r['full_rebuild_cost']:.0%}" if r["full_rebuild_cost"] else "-",
         f"{r['version']}" + ("*" if r["new_version"] else "") if r["version"] else None)
        for r in history[-last:]))
    if batches:
        print_table(f"LLM batches ({cur} at the batch price; ~ an estimate while a batch runs)",
                    ("batch", "submitted by", "stage", "state", "requests", "answered", "tokens", cur), (
            (b["batch_id"], b["submitted_by"], b["stage"], b["provider_status"] if b["live"] else b["state"], b["requests"],
             b["completed"], ("~" if b["estimated"] else "") + str(b["tokens"]), ("~" if b["estimated"] else "") + _money(b["cost"]))
            for b in batches[-last:]))
    if plot:
        typer.echo(f"plot: {plot}")

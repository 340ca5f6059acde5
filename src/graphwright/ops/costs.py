"""What runs cost: queries over the `runs` and `stage_metrics` tables.

A stage's money is its CPU-seconds (driver and workers) at `cost.cpu_hour`, its GPU-seconds
held at `cost.gpu_hour`, and the tokens it sent to a model at that model's price: the tokens of
the LLM batches it collected at the model's batch price. Cache hits cost nothing: their tokens
were paid by the run that made the call. What batches still running will cost is estimated from
`llm_batches` (ops.batches).

The full-rebuild estimate answers "what would this run have cost had it rebuilt everything?".
Each stage row says how many units it processed (`work_done`) and how many a full rebuild
would process (`work_total`): chunks for extraction, items for embedding, reports for
reporting. A stage that did not process everything is estimated at the per-unit cost of the
largest run of that stage so far times the units the index now holds. Extraction tokens are not
estimated: the cache holds what each current chunk's calls cost.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from graphwright.config import CostConfig
from graphwright.pipeline.definition import ORDER
from graphwright.storage.delta import IndexStore

COMPUTE_FIELDS = ("wall_s", "cpu_s", "worker_cpu_s", "gpu_s")
COUNT_FIELDS = ("llm_calls", "cache_hits", "prompt_tokens", "completion_tokens", "batch_prompt_tokens", "batch_completion_tokens",
                "bytes_written")


def stage_row(run_id: str, stage: str, **measured) -> dict:
    """A stage_metrics row: what `measured` says, every other counter zero (a row written outside
    the runner's stage loop: the LLM engine's, maintenance's)."""
    zero = {"wall_s": 0.0, "cpu_s": 0.0, "rows_in": 0, "rows_out": 0, "worker_cpu_s": 0.0, "gpu_s": 0.0,
            **dict.fromkeys(COUNT_FIELDS, 0), "work_unit": None, "work_done": None, "work_total": None}
    return {"run_id": run_id, "stage": stage, **zero, **measured}


def stage_cost(row: dict, prices: CostConfig, model: str) -> float:
    """Money for one stage_metrics row at `prices`."""
    cpu = (row.get("cpu_s") or 0.0) + (row.get("worker_cpu_s") or 0.0)
    money = cpu / 3600 * prices.cpu_hour + (row.get("gpu_s") or 0.0) / 3600 * prices.gpu_hour
    price = prices.llm.get(model) or prices.llm.get("*")
    if price:
        money += (row.get("prompt_tokens") or 0) / 1e6 * price.prompt_per_million
        money += (row.get("completion_tokens") or 0) / 1e6 * price.completion_per_million
        batch_prompt, batch_completion = price.batch_prices()
        money += (row.get("batch_prompt_tokens") or 0) / 1e6 * batch_prompt
        money += (row.get("batch_completion_tokens") or 0) / 1e6 * batch_completion
    return money


@dataclass
class _UnitCost:
    money: float
    seconds: float
    units: int


def cost_history(store: IndexStore, prices: CostConfig | None = None) -> list[dict]:
    """One entry per run, oldest first: totals, per-stage rows, and the full-rebuild estimate.
    With `prices`, every stage is re-priced with them instead of the price table of its run."""
    runs = sorted(store.read("runs").to_pylist(), key=lambda r: r["started_at"])
    metrics: dict[str, list[dict]] = {}
    for row in store.read("stage_metrics").to_pylist():
        metrics.setdefault(row["run_id"], []).append(row)
    unit_costs: dict[str, _UnitCost] = {}  # latest per-unit cost of each stage, carried forward
    history = []
    for run in runs:
        summary = json.loads(run["summary"] or "{}")
        model = (summary.get("llm_model") or "")
        stages = []
        for row in sorted(metrics.get(run["run_id"], []), key=_stage_order):
            row = {k: row[k] for k in row if k != "details"} | {"details": json.loads(row["details"] or "{}")}
            for k in COMPUTE_FIELDS + COUNT_FIELDS:
                row[k] = row.get(k) or 0
            if prices is not None or row.get("cost") is None:
                row["cost"] = stage_cost(row, prices or CostConfig(), model)
            row["full_rebuild_cost"], row["full_rebuild_s"] = _full_rebuild(row, unit_costs)
            stages.append(row)
        totals = {k: sum(s[k] for s in stages) for k in COMPUTE_FIELDS + COUNT_FIELDS + ("cost", "full_rebuild_cost", "full_rebuild_s")}
        llm = summary.get("llm") or {}
        full_tokens = llm.get("full_rebuild_tokens") or 0
        history.append({
            "run_id": run["run_id"], "command": run["command"], "status": run["status"],
            "started_at": run["started_at"], "finished_at": run["finished_at"],
            "version": summary.get("version"), "new_version": summary.get("new_version"),
            "documents_diff": summary.get("documents_diff"),
            **totals,
            "tokens": totals["prompt_tokens"] + totals["completion_tokens"] + totals["batch_prompt_tokens"] + totals["batch_completion_tokens"],
            "batch_tokens": totals["batch_prompt_tokens"] + totals["batch_completion_tokens"],
            "full_rebuild_tokens": full_tokens,
            "saved_cost": max(0.0, totals["full_rebuild_cost"] - totals["cost"]),
            "stages": stages,
        })
    return history


def index_prices(store: IndexStore) -> CostConfig:
    """The price table of the latest published version, or the default one."""
    from graphwright.config import PipelineConfig
    from graphwright.storage.manifest import NoPublishedVersion, load_manifest

    try:
        return PipelineConfig.model_validate_json(load_manifest(store)["config"]).cost
    except NoPublishedVersion:
        return CostConfig()


def _stage_order(row: dict) -> int:
    return ORDER.index(row["stage"]) if row["stage"] in ORDER else len(ORDER)


def _full_rebuild(row: dict, unit_costs: dict[str, _UnitCost]) -> tuple[float, float]:
    """(money, seconds) a full rebuild would have spent in this stage; updates `unit_costs`."""
    done, total = row.get("work_done"), row.get("work_total")
    if done is None or total is None:  # rows from before work accounting, or a deletion
        return row["cost"], row["wall_s"]
    # the largest run so far prices a unit best: its fixed costs (starting actors, loading a
    # model) are spread over the most units, as they would be in a rebuild
    best = unit_costs.get(row["stage"])
    if done and (best is None or done >= best.units):
        unit_costs[row["stage"]] = best = _UnitCost(row["cost"] / done, row["wall_s"] / done, done)
    if done >= total or best is None:
        return row["cost"], row["wall_s"]
    return max(row["cost"], best.money * total), max(row["wall_s"], best.seconds * total)


def by_stage(history: list[dict]) -> dict[str, dict]:
    """Totals per stage over the whole history."""
    out: dict[str, dict] = {}
    for run in history:
        for s in run["stages"]:
            agg = out.setdefault(s["stage"], {k: 0 for k in COMPUTE_FIELDS + COUNT_FIELDS + ("cost",)} | {"runs": 0})
            agg["runs"] += 1
            for k in COMPUTE_FIELDS + COUNT_FIELDS + ("cost",):
                agg[k] += s[k]
    return out

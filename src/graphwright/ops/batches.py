"""Operating an index's LLM batches (llm.engine openai-batch): what each batch is and costs, the
offline path for `vllm run-batch` (export the request files, import the results), and cancel.

A collected batch costs its recorded tokens at the model's batch price. A batch still running
is estimated: its prompt tokens as characters / 4, its completion tokens at the average per
answer of the batches of the same stage and model collected so far, or at the requests'
max_tokens when none was (an upper bound).
"""

from __future__ import annotations

import json
from pathlib import Path

from graphwright.config import CostConfig
from graphwright.engines.llm.batch.ledger import LIVE, BatchLedger
from graphwright.storage.delta import IndexStore


class BatchError(ValueError):
    """A batch command that cannot be carried out (the reason and the way out in the message)."""


def batch_rows(store: IndexStore) -> list[dict]:
    """Every batch's latest state, oldest first, with when it was submitted and who collected it."""
    if not store.exists("llm_batches"):
        return []
    table = sorted(store.read("llm_batches").to_pylist(), key=lambda r: r["recorded_at"])
    first, latest = {}, {}
    for row in table:
        first.setdefault(row["batch_id"], row["recorded_at"])
        latest[row["batch_id"]] = row
    out = []
    for batch_id, row in latest.items():
        out.append({**row, "submitted_at": first[batch_id], "live": row["state"] in LIVE,
                    "collected_by": row["run_id"] if row["state"] == "collected" else None})
    return sorted(out, key=lambda r: r["submitted_at"])


def priced(rows: list[dict], prices: CostConfig) -> list[dict]:
    """`rows` with `tokens`, `cost` and `estimated` (whether they are an estimate)."""
    per_answer: dict[tuple[str, str], tuple[int, int]] = {}
    for r in rows:
        if r["state"] == "collected" and r["completed"]:
            total, n = per_answer.get((r["stage"], r["model"]), (0, 0))
            per_answer[(r["stage"], r["model"])] = (total + (r["completion_tokens"] or 0), n + r["completed"])
    out = []
    for r in rows:
        price = prices.llm.get(r["model"]) or prices.llm.get("*")
        prompt_price, completion_price = price.batch_prices() if price else (0.0, 0.0)
        if r["state"] == "collected":
            prompt, completion, estimated = r["prompt_tokens"] or 0, r["completion_tokens"] or 0, False
        elif r["live"]:
            total, n = per_answer.get((r["stage"], r["model"]), (0, 0))
            prompt = r["estimated_prompt_tokens"]
            completion = min(r["max_completion_tokens"], round(total / n * r["requests"])) if n else r["max_completion_tokens"]
            estimated = True
        else:  # abandoned: never reached the provider
            prompt = completion = 0
            estimated = False
        cost = prompt / 1e6 * prompt_price + completion / 1e6 * completion_price
        out.append({**r, "tokens": prompt + completion, "cost": cost, "estimated": estimated})
    return out


def by_run(rows: list[dict]) -> dict[str, dict]:
    """Per submitting run: its batches, those still live, their requests and what they will cost."""
    out: dict[str, dict] = {}
    for r in rows:
        agg = out.setdefault(r["submitted_by"], {"batches": 0, "waiting": 0, "requests": 0, "waiting_requests": 0,
                                                 "cost": 0.0, "estimated_cost": 0.0})
        agg["batches"] += 1
        agg["requests"] += r["requests"]
        if r["live"]:
            agg["waiting"] += 1
            agg["waiting_requests"] += r["requests"]
            agg["estimated_cost"] += r["cost"]
        else:
            agg["cost"] += r["cost"]
    return out


def waiting_summary(store: IndexStore, prices: CostConfig) -> dict:
    """What the index waits on: live batches, their requests and their estimated cost."""
    live = [r for r in priced(batch_rows(store), prices) if r["live"]]
    return {"batches": len(live), "requests": sum(r["requests"] for r in live), "estimated_cost": sum(r["cost"] for r in live),
            "batch_ids": [r["batch_id"] for r in live]}


def _live_files_batches(store: IndexStore) -> dict[str, dict]:
    ledger = BatchLedger(store)
    ledger.refresh()
    return {b: r for b, r in ledger.live().items() if r["via"] == "files" and r["state"] == "submitted"}


def export_batches(store: IndexStore, out: Path) -> list[dict]:
    """Copy the request files of the batches waiting for `vllm run-batch` to `out`; per batch
    its files and the command that answers it."""
    from graphwright.engines.llm.batch.providers import FileBatches

    files = FileBatches(store.files)
    out.mkdir(parents=True, exist_ok=True)
    exported = []
    for batch_id, row in sorted(_live_files_batches(store).items()):
        requests, results = out / f"{batch_id}.jsonl", out / f"{batch_id}.output.jsonl"
        requests.write_bytes(files.request_file(batch_id))
        exported.append({"batch_id": batch_id, "stage": row["stage"], "model": row["model"], "requests": row["requests"],
                         "input": str(requests), "output": str(results),
                         "command": f"vllm run-batch -i {requests} -o {results} --model {row['model']}"})
    return exported


def import_results(store: IndexStore, paths: list[Path]) -> dict:
    """Put `vllm run-batch` (or Batch API) result files beside the requests of the batches they
    answer, matched line by line on custom_id; the next run collects them. A batch is answered
    whole by one import: lines of it missing from the files are asked again by a later batch."""
    from graphwright.engines.llm.batch.providers import FileBatches

    live = _live_files_batches(store)
    if not live:
        raise BatchError(f"{store.root}: no batch waits for results (graphwright batches lists them)")
    ledger = BatchLedger(store)
    owner = ledger.keys_in(live)
    lines: dict[str, list[bytes]] = {}
    unmatched = unreadable = 0
    for path in paths:
        for raw in Path(path).read_bytes().splitlines():
            if not raw.strip():
                continue
            try:
                key = json.loads(raw).get("custom_id")
            except (ValueError, AttributeError, RecursionError):
                unreadable += 1
                continue
            if key in owner:
                lines.setdefault(owner[key], []).append(raw)
            else:
                unmatched += 1
    files = FileBatches(store.files)
    for batch_id, batch_lines in sorted(lines.items()):
        files.put_output(batch_id, b"\n".join(batch_lines) + b"\n")
    if not lines:
        raise BatchError(f"none of the {unmatched + unreadable} result lines answers a request of a waiting batch "
                         f"({', '.join(sorted(live))}); were they written for another index?")
    return {"batches": {b: len(v) for b, v in sorted(lines.items())}, "unmatched_lines": unmatched, "unreadable_lines": unreadable}


def cancel_batches(store: IndexStore, config, batch_ids: list[str], run_id: str) -> list[dict]:
    """Ask the provider to cancel live batches (ours or the provider's ids; "all": every live
    one). A batch being collected is left alone: collection and cancel hold the batch's lock."""
    from graphwright.engines.llm.batch.collect import lock_name
    from graphwright.engines.llm.batch.providers import ProviderError, make_provider
    from graphwright.storage.lock import IndexLocked, run_lock

    ledger = BatchLedger(store)
    ledger.refresh()
    live = ledger.live()
    wanted = set(live) if batch_ids == ["all"] else {b for b, r in live.items() if {b, r["provider_batch_id"]} & set(batch_ids)}
    unknown = set(batch_ids) - {"all"} - wanted - {r["provider_batch_id"] for r in live.values()}
    if unknown:
        raise BatchError(f"no live batch {', '.join(sorted(unknown))} (graphwright batches --index {store.root} lists them)")
    provider = make_provider(config, store.files)
    done = []
    for batch_id in sorted(wanted):
        try:
            with run_lock(store, run_id, "cancel", name=lock_name(batch_id)):
                row = ledger.refresh()[batch_id]
                if row["state"] != "submitted":
                    done.append({"batch_id": batch_id, "cancelled": False, "reason": f"it is {row['state']}"})
                    continue
                if row["via"] != provider.via or (row["via"] == "api" and row["base_url"] != config.base_url.rstrip("/")):
                    raise BatchError(f"batch {batch_id} was sent to {row['base_url'] or row['via']}; give a --config whose llm section names it")
                info = provider.cancel(row["provider_batch_id"])
                ledger.record(batch_id, run_id, provider_status=info.status)
                done.append({"batch_id": batch_id, "cancelled": True, "provider_status": info.status})
        except IndexLocked:
            done.append({"batch_id": batch_id, "cancelled": False, "reason": "a run is collecting it"})
        except ProviderError as exc:
            done.append({"batch_id": batch_id, "cancelled": False, "reason": str(exc)})
    return done

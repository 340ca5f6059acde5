"""Writing LLM reports on the run's engine, bottom-up: every report whose children are written
goes out at once, and a parent goes out the moment its own children are done, not when their
whole level is. Reports whose inputs are unchanged are reused without a call; requests the cache
holds are answered from one lookup per wave."""

from __future__ import annotations

from collections.abc import Callable

from graphwright.engines.llm.cache import response_of
from graphwright.engines.llm.interface import LLMResponse
from graphwright.stages.extract.parse import ParseError
from graphwright.stages.report.llm import (
    PROMPT_VERSION,
    Plan,
    child_texts,
    cited_columns,
    findings_of,
    generator,
    needed,
    parse_report,
    plan_refs,
    report_request,
)

Lookup = Callable[[list[str]], dict[str, dict]]  # cache keys -> cached answers (one lookup)


def write_reports(plans: dict[str, Plan], targets: list[str], existing: dict[str, dict], lookup: Lookup, stream,
                  fallback: Callable[[str, dict[str, dict]], dict], config, llm) -> tuple[dict[str, dict], list[dict], dict]:
    """Reports for `targets` and the children their contexts need.

    `existing` maps input hashes to reports reused as they are. `stream` (engines.llm.session.
    Stream) answers the requests the cache cannot. A report whose call fails or whose answer is
    not a report, or that needs a child report that failed, becomes `fallback(community_id,
    reports so far)` (the extractive report) with generator 'extractive@N fallback', so that it is
    not reused as an LLM report. Returns ({community_id: row}, call records, counts)."""
    gen = generator(llm.model)
    todo = needed(plans, targets)
    rows: dict[str, dict] = {}
    calls: list[dict] = []
    stats = {"built": 0, "reused": 0, "failed": 0, "waves": 0, "cache_lookups": 0}
    fresh: set[str] = set()  # reports written by a call made now: their parents' requests are new
    parents: dict[str, list[str]] = {}
    for cid in todo:
        for k in plans[cid].needs:
            parents.setdefault(k, []).append(cid)
        old = existing.get(plans[cid].input_hash)
        if old is not None and old["generator"] == gen:
            # its text as it was; its citations as this plan numbers them (the same texts in the same
            # order, whose rows may have other ids: a moved document's chunks, another community's members)
            cites = cited_columns(old.get("summary") or "", old.get("rating_explanation") or "", findings_of(old.get("findings")),
                                  plan_refs(plans[cid])) if plans[cid].planned else {}
            rows[cid] = {**old, **cites, "community_id": cid, "level": plans[cid].level}
            stats["reused"] += 1
    waiting = {cid for cid in todo if cid not in rows}
    requests: dict[str, tuple] = {}

    def ready(cid: str) -> bool:
        return all(k in rows for k in plans[cid].needs)

    def finish(cid: str, key: str, resp: LLMResponse, hit: bool) -> None:
        plan, refs = plans[cid], requests[cid][1]
        error = resp.error if not resp.ok else None
        if error is None:
            try:
                report = parse_report(resp.text, plan, refs)
            except ParseError as exc:
                error = f"unusable report: {exc}"
        if error is None:
            rows[cid] = {**report, "community_id": cid, "level": plan.level, "input_hash": plan.input_hash, "generator": gen}
            stats["built"] += 1
            if not hit:
                fresh.add(cid)
        else:
            rows[cid] = _fallback(fallback, cid, rows, plan, error)
            stats["failed"] += 1
        calls.append({"key": key, "item_id": cid, "prompt_version": PROMPT_VERSION, "response": resp.text, "cache_hit": hit,
                      "prompt_tokens": resp.prompt_tokens, "completion_tokens": resp.completion_tokens,
                      "latency_s": resp.latency_s, "attempts": resp.attempts, "error": error})

    def start(cids: list[str]) -> list[str]:
        """Fall back, look up or submit each ready community; returns those left for a lookup."""
        to_look = []
        children = {k: rows[k] for cid in cids for k in plans[cid].children if rows[k]["generator"] == gen}
        texts = child_texts(children, config.child_report_tokens)  # one tokenizer batch for the wave
        for cid in sorted(cids):
            waiting.discard(cid)
            plan = plans[cid]
            if any(rows[k]["generator"] != gen for k in plan.needs):
                rows[cid] = _fallback(fallback, cid, rows, plan, "a sub-community report failed")
                stats["failed"] += 1
                continue
            requests[cid] = report_request(plan, rows, config, llm, texts)
            if any(k in fresh for k in plan.needs):  # a child written just now: the request is new
                stream.submit(cid, requests[cid][0], _check(plan, requests[cid][1]))
            else:
                to_look.append(cid)
        return to_look

    batch = [cid for cid in waiting if ready(cid)]
    while batch:
        stats["waves"] += 1
        to_look = start(batch)
        cascade = [cid for cid in waiting if ready(cid)]  # parents of fallbacks made in start()
        if to_look:
            stats["cache_lookups"] += 1
            keys = {cid: requests[cid][0].cache_key(llm.model) for cid in to_look}
            cached = lookup(list(keys.values()))
            for cid in to_look:
                if keys[cid] in cached:
                    finish(cid, keys[cid], response_of(cached[keys[cid]]), True)
                else:
                    stream.submit(cid, requests[cid][0], _check(plans[cid], requests[cid][1]))
        later = set(cascade)
        for cid, resp in stream.completed():
            finish(cid, requests[cid][0].cache_key(llm.model), resp, False)
            for parent in parents.get(cid, ()):
                if parent in waiting and ready(parent):
                    if any(k in fresh for k in plans[parent].needs):
                        later.discard(parent)
                        start([parent])
                    else:
                        later.add(parent)
        batch = sorted(c for c in later | {cid for cid in waiting if ready(cid)} if c in waiting)
    return rows, calls, stats


def _check(plan: Plan, refs) -> Callable[[str], str | None]:
    """Why an answer is not a report of `plan` (for a batch engine, before it caches it), or None."""
    def check(text: str) -> str | None:
        try:
            parse_report(text, plan, refs)
        except ParseError as exc:
            return str(exc)
        return None

    return check


def _fallback(fallback, cid: str, rows: dict, plan: Plan, reason: str) -> dict:
    report = fallback(cid, rows)
    return {**report, "community_id": cid, "level": plan.level, "input_hash": plan.input_hash,
            "generator": f"{report['generator']} fallback",
            "rating_explanation": f"{report['rating_explanation']} (LLM report failed: {reason[:200]})"}

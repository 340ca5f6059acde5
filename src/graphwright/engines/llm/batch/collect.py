"""Collecting a batch the provider has finished: its result files are read, its usable answers
appended to llm_cache, its tokens counted, and the batch recorded `collected`, once.

Once: a collection holds the batch's own lock (INDEX/batches/locks/<id>.lock, a flock or a lease
like the run lock) and reads the batch's state again after taking it; a second collector is
refused the lock and looks again later, by when the batch is collected and its answers are in
the cache. A collector that died halfway leaves the lock free and the batch `submitted`: the
next one collects it again, appending only the answers the cache does not hold yet. Before it
stores anything a collection checks the run lock, so a run whose lease was taken over stores
nothing.

An answer the stage's `check` rejects (what the synchronous path would not cache either) is
returned as a failure and not cached: the next run asks again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa

from graphwright.engines.llm.batch.files import NOT_CACHED, Outcome, read_results
from graphwright.engines.llm.batch.ledger import BatchLedger
from graphwright.engines.llm.batch.providers import TERMINAL
from graphwright.engines.llm.cache import lookup
from graphwright.engines.llm.interface import LLMResponse
from graphwright.storage.lock import IndexLocked, run_lock

Check = Callable[[str, str], str | None]  # (cache key, answer) -> why the stage cannot use it, or None


@dataclass
class Collected:
    outcomes: dict[str, Outcome]  # every request of the batch
    stored: list[str]  # keys whose answers this collection appended to llm_cache
    prompt_tokens: int
    completion_tokens: int
    status: str = ""  # the provider's
    errors: str | None = None  # why the provider failed the whole batch


def lock_name(batch_id: str) -> str:
    return f"batches/locks/{batch_id}.lock"


def collect(ctx, ledger: BatchLedger, provider, batch_id: str, check: Check | None = None) -> Collected | None:
    """Collect one batch the provider reports ended. None when another collector holds it or it
    has not ended after all; a Collected with no outcomes when it was collected meanwhile."""
    try:
        lock = run_lock(ctx.store, ctx.run_id, "collect", name=lock_name(batch_id)).__enter__()
    except IndexLocked:
        ctx.log(f"llm: batch {batch_id} is being collected by another run; looking again later")
        return None
    try:
        row = ledger.refresh()[batch_id]
        if row["state"] != "submitted":
            return Collected({}, [], 0, 0)
        info = provider.retrieve(row["provider_batch_id"])
        if info.status not in TERMINAL:
            if info.status != row["provider_status"]:
                ledger.record(batch_id, ctx.run_id, provider_status=info.status)
            return None
        members = ledger.members(batch_id)
        outcomes: dict[str, Outcome] = {}
        skipped = 0
        for file_id in (info.output_file_id, info.error_file_id):
            if file_id:
                found, bad = read_results(provider.lines(file_id), members, provider.max_line_bytes)
                skipped += bad
                for key, outcome in found.items():
                    outcomes.setdefault(key, outcome)
        unanswered = f"batch {batch_id} ended {info.status} without an answer to it" + (f" ({info.errors})" if info.errors else "")
        for key in members:
            outcomes.setdefault(key, Outcome(LLMResponse(text=None, error=unanswered), retry=True))
        for key, outcome in outcomes.items():
            if outcome.response.ok and check is not None and (why := check(key, outcome.response.text)):
                if why is NOT_CACHED:
                    outcome.cache = False
                else:
                    outcome.response.error = f"unusable answer: {why}"[:500]
        ctx.check_lock()
        stored = _store_answers(ctx, row["model"], members, outcomes)
        prompt = sum(o.response.prompt_tokens for o in outcomes.values())
        completion = sum(o.response.completion_tokens for o in outcomes.values())
        answered = sum(1 for o in outcomes.values() if o.response.text is not None)
        ledger.record(batch_id, ctx.run_id, state="collected", provider_status=info.status, output_file_id=info.output_file_id,
                      error_file_id=info.error_file_id, completed=answered, failed=len(members) - answered,
                      prompt_tokens=prompt, completion_tokens=completion, error=info.errors)
        ctx.count_tokens(prompt, completion)  # here, where the batch became collected: once, by its collector
        ctx.log(f"llm: batch {batch_id} {info.status}: {answered} of {len(members)} answered, {len(stored)} stored"
                + (f", {skipped} unreadable result lines skipped" if skipped else ""))
        return Collected(outcomes, stored, prompt, completion, info.status, info.errors)
    finally:
        lock.release()


def _store_answers(ctx, model: str, members: dict[str, dict], outcomes: dict[str, Outcome]) -> list[str]:
    """Append the usable answers the cache does not hold yet; their keys."""
    usable = [k for k, o in outcomes.items() if o.response.ok and o.cache]
    if not usable:
        return []
    have = set(lookup(ctx.store, usable).column("key").to_pylist())
    fresh = [k for k in usable if k not in have]
    if fresh:
        ctx.store.append("llm_cache", pa.Table.from_pylist([
            {"key": k, "model": model, "prompt_version": members[k]["prompt_version"], "response": outcomes[k].response.text,
             "prompt_tokens": outcomes[k].response.prompt_tokens, "completion_tokens": outcomes[k].response.completion_tokens,
             "run_id": ctx.run_id} for k in fresh]))
    ctx.calls.mark_cached(usable)
    return fresh

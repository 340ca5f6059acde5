"""The `openai-batch` engine: the interface's `complete(requests)` answered through batches, on
the driver, for a whole stage round at once.

A call sends what no batch holds yet, in request files within the provider's limits, then
polls until every request is answered or the run's deadline (llm.batch.wait_s after it
started), when it raises WaitingOnBatch: the run stops, and the next run's same call finds the
same keys in those batches, collects them and goes on. Per request:
- answered from the cache, or in a live batch (submitting or submitted): never sent again;
- in a batch that ended: collected (collect.py), the answer stored in llm_cache;
- not answered by its batch because it failed, expired or was cancelled, or it was not sent:
  sent again in a new batch, at most llm.batch.max_submissions times per run;
- refused by the batch (an HTTP error line, an answer the stage cannot use): a failure of this
  run, as from a synchronous engine; the next run asks again.

`origins` tells the run how each answer came: from a batch collected now (its tokens are counted
with the batch, at the batch price) or from the cache (collected by another run: paid there).
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from graphwright import ids
from graphwright.engines.llm.batch.collect import collect
from graphwright.engines.llm.batch.files import ENDPOINT, RequestFile, estimated_tokens, request_line, split_requests
from graphwright.engines.llm.batch.ledger import LIVE, BatchLedger
from graphwright.engines.llm.batch.providers import METADATA_KEY, TERMINAL, ProviderError, make_provider
from graphwright.engines.llm.cache import cached_answers, response_of
from graphwright.engines.llm.interface import LLMRequest, LLMResponse
from graphwright.pipeline.errors import WaitingOnBatch

# (index of the request, answer) -> why it is unusable, or None, or files.NOT_CACHED (use it, do not store it)
RequestCheck = Callable[[int, str], str | None]


@dataclass
class BatchContext:
    """What a batch engine needs of the run: where to record, what stage is running, until when
    to wait, the run's call log (for what collections store), the run lock."""

    store: object
    run_id: str
    stage: Callable[[], str]
    deadline: float  # time.time() after which the run stops waiting
    calls: object  # engines.llm.cache.CallLog
    log: Callable[[str], None]
    count_tokens: Callable[[int, int], None]  # (prompt, completion) tokens of a batch collected now
    lock: object = None  # the run lock: check() raises LockLost once another run took it over

    def check_lock(self) -> None:
        if self.lock is not None:
            self.lock.check()


class BatchEngine:
    batched = True

    def __init__(self, config, ctx: BatchContext, provider=None):
        self.config, self.settings, self.ctx = config, config.batch, ctx
        self.model = config.model
        self.provider = provider or make_provider(config, ctx.store.files)
        self.ledger = BatchLedger(ctx.store)
        self.origins: dict[str, str | None] = {}  # key -> the batch collected now that answered it; None: the cache
        self.sent = 0  # batches this engine sent: part of their ids
        self._elsewhere: set[str] = set()

    @property
    def name(self) -> str:
        return f"openai-batch:{self.model}"

    def complete(self, requests: list[LLMRequest], check: RequestCheck | None = None) -> list[LLMResponse]:
        """One response per request, once every one is answered or failed for good; raises
        WaitingOnBatch at the deadline. `check` is asked about each answer before it is cached."""
        keys = [r.cache_key(self.model) for r in requests]
        first: dict[str, int] = {}
        for i, key in enumerate(keys):
            first.setdefault(key, i)
        by_key = None if check is None else (lambda key, text: check(first[key], text) if key in first else None)
        done: dict[str, LLMResponse] = {}
        failure: dict[str, LLMResponse] = {}  # the last failure of a request that may be sent again
        submissions: Counter = Counter()
        seen_live: set[str] = set()
        while True:
            self.ledger.refresh()
            self._reconcile()
            live = self._live_keys([k for k in first if k not in done])
            seen_live.update(live)
            for batch_id in sorted(set(live.values())):
                row = self.ledger.rows[batch_id]
                if row["state"] == "submitted" and row["provider_status"] in TERMINAL:
                    self._collect(batch_id, by_key, first, done, failure, submissions)
            live = {k: b for k, b in live.items() if k not in done and self.ledger.rows[b]["state"] in LIVE}
            free = [k for k in first if k not in done and k not in live]
            # requests whose batch another collector finished: their answers are in the cache
            self._from_cache([k for k in free if k in seen_live and k not in failure], done)
            for key in free:
                if key not in done and submissions[key] >= self.settings.max_submissions:
                    done[key] = failure.get(key) or LLMResponse(text=None, error="no batch answered it")
            free = [k for k in free if k not in done]
            if free:
                failed, sent = self._submit([(k, requests[first[k]]) for k in free])
                submissions.update(sent)
                for key, (response, final) in failed.items():
                    (done if final else failure)[key] = response
            pending = [k for k in first if k not in done]
            if not pending:
                return [done[k] for k in keys]
            remaining = self.ctx.deadline - time.time()
            if remaining <= 0:
                raise self._waiting(pending)
            time.sleep(min(self.settings.poll_s, remaining))
            self._poll(pending)

    def sweep(self) -> None:
        """Collect the batches that ended although no stage of this run asked for their requests
        (the corpus or the configuration changed since they were sent): they were paid for, so
        their answers are cached and their tokens counted. Waits for nothing."""
        self.ledger.refresh()
        self._reconcile()
        for batch_id, row in sorted(self.ledger.live().items()):
            if row["state"] != "submitted" or not self._reachable(row):
                continue
            try:
                collect(self.ctx, self.ledger, self.provider, batch_id)
            except ProviderError as exc:
                self.ctx.log(f"llm: batch {batch_id}: {exc}; the next run looks again")

    def _reachable(self, row: dict) -> bool:
        """Whether a batch was sent where this engine sends (a batch sent to another endpoint
        cannot be polled from here; its requests are asked again here)."""
        if row["via"] == self.provider.via and row["base_url"] == self._where():
            return True
        if row["batch_id"] not in self._elsewhere:
            self._elsewhere.add(row["batch_id"])
            self.ctx.log(f"[yellow]llm: batch {row['batch_id']} was sent via {row['via']} to {row['base_url']}, not to "
                         f"{self._where()}: its requests are asked again here[/]")
        return False

    def _where(self) -> str:
        return self.config.base_url.rstrip("/") if self.provider.via == "api" else ""

    def _live_keys(self, keys: list[str]) -> dict[str, str]:
        live = [b for b, r in self.ledger.live().items() if self._reachable(r)]
        wanted = set(keys)
        return {k: b for k, b in self.ledger.keys_in(live).items() if k in wanted}

    def _collect(self, batch_id: str, check, first: dict, done: dict, failure: dict, submissions: Counter) -> None:
        try:
            result = collect(self.ctx, self.ledger, self.provider, batch_id, check)
        except ProviderError as exc:  # its result files could not be read now
            self.ctx.log(f"llm: batch {batch_id} ended, but {exc}; looking again later")
            return
        if result is None:
            return
        # failed for the provider's enqueued-token limit, sent while other batches ran: sent again, not counted
        crowded = result.status == "failed" and "token_limit_exceeded" in (result.errors or "") and any(
            self._reachable(self.ledger.rows[b]) for b in self.ledger.others_running_at(batch_id))
        for key, outcome in result.outcomes.items():
            if key not in first or key in done:
                continue
            if outcome.response.ok or not outcome.retry:
                done[key] = outcome.response
                self.origins[key] = batch_id
            else:
                failure[key] = outcome.response
                if crowded:
                    submissions[key] -= 1

    def _from_cache(self, keys: list[str], done: dict) -> None:
        for key, row in cached_answers(self.ctx.store, keys).items():
            done[key] = response_of(row)
            self.origins.setdefault(key, None)

    def _submit(self, items: list[tuple[str, LLMRequest]]) -> tuple[dict[str, tuple[LLMResponse, bool]], list[str]]:
        """Send `items` in request files within the limits: ({key: (failure, final)} of those
        that could not be sent (final: they never can be), the keys sent). Files beyond
        llm.batch.max_enqueued_tokens are not sent now; a later look sends them."""
        lines = [(k, request_line(k, r, self.config), estimated_tokens(r), r.max_tokens) for k, r in items]
        files, too_big = split_requests(lines, self.settings.max_requests, self.settings.max_bytes)
        failed = {k: (LLMResponse(text=None, error=f"the request is larger than llm.batch.max_bytes={self.settings.max_bytes}"), True)
                  for k in too_big}
        requests = dict(items)
        limit, sent = self.settings.max_enqueued_tokens, []
        enqueued = sum(r["estimated_prompt_tokens"] for r in self.ledger.live().values()
                       if self._reachable(r) and r["provider_status"] not in TERMINAL)
        for file in files:
            if limit and enqueued and enqueued + file.estimated_prompt_tokens > limit:
                break  # waits for earlier batches to finish
            enqueued += file.estimated_prompt_tokens
            problem = self._send(file, requests)
            sent.extend(file.keys)
            for key in file.keys if problem else ():
                failed[key] = (LLMResponse(text=None, error=problem[0]), problem[1])
        return failed, sent

    def _send(self, file: RequestFile, requests: dict[str, LLMRequest]) -> tuple[str, bool] | None:
        """Record, upload and create one batch; why it could not be sent and whether sending it
        again is pointless (the provider refused it), or None."""
        self.ctx.check_lock()  # a run whose lease was taken over must not pay for anything
        stage, run_id = self.ctx.stage(), self.ctx.run_id
        batch_id = "gwb-" + ids.stable_id("llm-batch", run_id, stage, self.sent, hashlib.sha256(file.data).hexdigest())
        self.sent += 1
        self.ledger.open({"batch_id": batch_id, "via": self.provider.via, "base_url": self._where(), "endpoint": ENDPOINT,
                          "model": self.model, "stage": stage, "submitted_by": run_id, "requests": len(file.keys),
                          "bytes": len(file.data), "estimated_prompt_tokens": file.estimated_prompt_tokens,
                          "max_completion_tokens": file.max_completion_tokens},
                         [{"key": k, "prompt_version": requests[k].prompt_version, "max_tokens": requests[k].max_tokens}
                          for k in file.keys])
        try:
            file_id = self.provider.upload(f"{batch_id}.jsonl", file.data)
        except ProviderError as exc:
            self.ledger.record(batch_id, run_id, state="abandoned", error=f"upload: {exc}")
            return f"batch {batch_id} could not be uploaded to {self.provider.where}: {exc}", exc.definitive
        metadata = {METADATA_KEY: batch_id, "graphwright_run": run_id, "graphwright_stage": stage}
        try:
            info = self.provider.create(file_id, ENDPOINT, self.settings.completion_window, metadata)
        except ProviderError as exc:
            if exc.definitive:
                self.ledger.record(batch_id, run_id, state="abandoned", input_file_id=file_id, error=f"create: {exc}")
                return f"batch {batch_id} was refused by {self.provider.where}: {exc}", True
            # it may exist: the next look finds it by its metadata, or records it abandoned
            self.ledger.record(batch_id, run_id, input_file_id=file_id, error=f"create: {exc}")
            return None
        self.ledger.record(batch_id, run_id, state="submitted", provider_batch_id=info.id, provider_status=info.status,
                           input_file_id=file_id)
        self.ctx.log(f"llm: {stage}: batch {batch_id} of {len(file.keys)} requests sent to {self.provider.where} as {info.id}")
        return None

    def _reconcile(self) -> None:
        """Batches recorded `submitting` (their run stopped, or a create went unanswered): the one
        the provider holds under our id is adopted; none means it was never sent."""
        for batch_id, row in self.ledger.live().items():
            if row["state"] != "submitting" or not self._reachable(row):
                continue
            try:
                info = self.provider.find(batch_id, since=row["recorded_at"].timestamp() - 3600)
            except ProviderError as exc:
                self.ctx.log(f"llm: cannot look batch {batch_id} up yet: {exc}")
                continue
            if info is None:
                self.ledger.record(batch_id, self.ctx.run_id, state="abandoned",
                                   error=f"never reached {self.provider.where} (no batch there has {METADATA_KEY}={batch_id})")
            else:
                self.ledger.record(batch_id, self.ctx.run_id, state="submitted", provider_batch_id=info.id,
                                   provider_status=info.status, input_file_id=info.input_file_id)
                self.ctx.log(f"llm: batch {batch_id}, recorded before it was sent, is {info.id} at {self.provider.where}")

    def _poll(self, pending: list[str]) -> None:
        """Look at the batches `pending` waits on (at every live batch when the enqueued tokens
        are limited: any of them finishing frees room)."""
        if self.settings.max_enqueued_tokens:
            batch_ids = sorted(b for b, r in self.ledger.live().items() if self._reachable(r))
        else:
            batch_ids = sorted(set(self._live_keys(pending).values()))
        for batch_id in batch_ids:
            row = self.ledger.rows[batch_id]
            if row["state"] != "submitted":
                continue
            try:
                info = self.provider.retrieve(row["provider_batch_id"])
            except ProviderError as exc:
                self.ctx.log(f"llm: batch {batch_id}: {exc}; looking again later")
                continue
            if info.status != row["provider_status"]:
                self.ledger.record(batch_id, self.ctx.run_id, provider_status=info.status)

    def _waiting(self, pending: list[str]) -> WaitingOnBatch:
        live = self._live_keys(pending)
        batches = [{k: self.ledger.rows[b][k] for k in ("batch_id", "provider_batch_id", "provider_status", "requests", "submitted_by")}
                   for b in sorted(set(live.values()))]
        stage, unsent = self.ctx.stage(), len(pending) - len(live)
        message = (f"{stage}: {len(pending)} LLM request(s) wait on {len(batches)} batch(es) at {self.provider.where}"
                   + (f" ({unsent} not sent yet)" if unsent else "")
                   + "; nothing was published and the current version stays. The next run collects them and carries on "
                   f"(graphwright batches --index {self.ctx.store.root} lists them)")
        return WaitingOnBatch(message, stage, batches, len(pending))


class Waves:
    """A stream (engines.llm.session.Stream's interface) over a batch engine: what is submitted
    goes out as one batch when its answers are first asked for, and what is submitted while they
    are handed out goes out as the next (LLM reports: a wave of parents once their children are
    written)."""

    def __init__(self, engine: BatchEngine):
        self.engine = engine
        self.queue: list[tuple[object, LLMRequest, Callable[[str], str | None] | None]] = []

    def submit(self, tag, request: LLMRequest, check: Callable[[str], str | None] | None = None) -> None:
        self.queue.append((tag, request, check))

    def completed(self):
        while self.queue:
            wave, self.queue = self.queue, []
            checks = [c for _, _, c in wave]
            responses = self.engine.complete([r for _, r, _ in wave],
                                             check=lambda i, text: checks[i](text) if checks[i] else None)
            for (tag, _, _), response in zip(wave, responses):
                yield tag, response

    def close(self) -> None:
        pass

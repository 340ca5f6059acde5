"""llm.engine openai-batch against a loopback fake of the OpenAI Batch API (tests/fake_batch_api.py):
requests go out as batch files with custom_id = their cache key, a run stops waiting at its
deadline and the next collects, failed and expired requests are sent again, per-request errors
fail their items, a run killed between sending a batch and recording it leaves no orphan, two
collectors store a batch once, and nothing is paid twice."""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections import Counter

import pytest
import yaml
from _helpers import CORPUS, make_config, run, two_documents
from fake_batch_api import FakeBatchAPI
from typer.testing import CliRunner

from graphwright.cli import app
from graphwright.config import LLMConfig
from graphwright.engines.llm.batch.engine import BatchContext, BatchEngine
from graphwright.engines.llm.batch.ledger import BatchLedger
from graphwright.engines.llm.cache import CallLog
from graphwright.engines.llm.interface import LLMRequest
from graphwright.ops.batches import batch_rows, cancel_batches
from graphwright.pipeline.errors import WaitingOnBatch
from graphwright.storage.delta import IndexStore
from graphwright.storage.manifest import manifests

runner = CliRunner()
PRICE = {"prompt_per_million": 1.0, "completion_per_million": 2.0}  # batch: half, by default


@pytest.fixture
def api():
    with FakeBatchAPI() as fake:
        yield fake


@pytest.fixture
def corpus(tmp_path):
    return two_documents(tmp_path)


def batch_config(api, wait_s: float = 30.0, *, batch: dict | None = None, **sections):
    return make_config(
        extract={"engine": "llm", "max_failed_fraction": 0.5, **sections.pop("extract", {})},
        llm={"engine": "openai-batch", "model": "fake-model", "base_url": api.base_url, "api_key_env": None,
             "timeout_s": 10, "batch": {"wait_s": wait_s, "poll_s": 0.02, **(batch or {})}},
        report=sections.pop("report", {"mode": "extractive"}),
        cost={"cpu_hour": 0.0, "gpu_hour": 0.0, "llm": {"fake-model": PRICE}},
        **sections,
    )


def waiting_run(corpus, index, cfg) -> WaitingOnBatch:
    with pytest.raises(WaitingOnBatch) as caught:
        run([corpus], index, cfg)
    return caught.value


def stage_batches(api, stage: str) -> list[str]:
    return [b for b in api.order if (api.batches[b]["metadata"] or {}).get("graphwright_stage") == stage]


def custom_ids(api, batch_id: str) -> list[str]:
    return [line["custom_id"] for line in api.lines(batch_id)]


def cli(*args) -> dict:
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_a_run_stops_waiting_and_the_next_collects_the_batch_and_publishes(api, corpus, tmp_path):
    """in_progress -> completed across runs: the batch is recorded with its ids, counts, files, run
    and stage; the waiting runs publish nothing and send nothing twice; the run that collects it
    publishes, records the calls with the batch, and prices its tokens at the batch price."""
    index = tmp_path / "index"
    api.auto = "complete"
    run([corpus], index, batch_config(api))
    store = IndexStore(index)
    assert [m["version"] for m in manifests(store)] == [1]
    api.auto, created = None, api.creates
    shutil.copy(CORPUS / "council.txt", corpus / "council.txt")  # new chunks to extract

    waiting = waiting_run(corpus, index, batch_config(api, wait_s=0))
    (batch,) = waiting.batches
    row = next(r for r in batch_rows(store) if r["batch_id"] == batch["batch_id"])
    provider = api.batches[row["provider_batch_id"]]
    assert row["state"] == "submitted" and row["stage"] == "extract" and row["submitted_by"] == waiting.summary["run_id"]
    assert row["input_file_id"] == provider["input_file_id"] and provider["metadata"]["graphwright_batch"] == row["batch_id"]
    members = BatchLedger(store).members(row["batch_id"])
    assert set(members) == set(custom_ids(api, row["provider_batch_id"])) and row["requests"] == len(members) == waiting.requests
    runs = {r["run_id"]: r for r in store.read("runs").to_pylist()}
    assert runs[waiting.summary["run_id"]]["status"] == "waiting" and [m["version"] for m in manifests(store)] == [1]

    # graphwright runs and cost show the waiting batch and an estimate of what it will cost
    shown = next(r for r in cli("runs", "--index", index, "--json") if r["run_id"] == waiting.summary["run_id"])
    assert shown["status"] == "waiting" and shown["batches"]["waiting"] == 1
    bound = (row["estimated_prompt_tokens"] * PRICE["prompt_per_million"] + row["max_completion_tokens"] * PRICE["completion_per_million"]) / 2e6
    assert 0 < shown["batches"]["estimated_cost"] <= bound
    report = cli("cost", "--index", index, "--json")
    assert report["waiting"]["batches"] == 1 and report["waiting"]["estimated_cost"] == pytest.approx(shown["batches"]["estimated_cost"])

    again = waiting_run(corpus, index, batch_config(api, wait_s=0))  # still running at the provider
    assert again.batches[0]["batch_id"] == row["batch_id"] and api.creates == created + 1  # not sent again

    api.complete(row["provider_batch_id"])
    logs: list[str] = []
    summary = run([corpus], index, batch_config(api), logs=logs)
    assert summary["version"] == 2 and api.creates == created + 1
    collected = next(r for r in batch_rows(store) if r["batch_id"] == row["batch_id"])
    assert collected["state"] == "collected" and collected["collected_by"] == summary["run_id"]
    assert collected["completed"] == len(members) and collected["prompt_tokens"] > 0
    calls = store.read("llm_calls", where=f"run_id = '{summary['run_id']}' AND stage = 'extract'").to_pylist()
    assert {c["key"] for c in calls if c["batch_id"] == row["batch_id"]} == set(members)
    assert not any(c["cache_hit"] for c in calls if c["batch_id"])
    extract = next(r for r in store.read("stage_metrics").to_pylist() if r["run_id"] == summary["run_id"] and r["stage"] == "extract")
    assert (extract["batch_prompt_tokens"], extract["batch_completion_tokens"]) == (collected["prompt_tokens"], collected["completion_tokens"])
    assert extract["prompt_tokens"] == 0  # nothing was asked synchronously
    assert extract["cost"] == pytest.approx((collected["prompt_tokens"] * 1.0 + collected["completion_tokens"] * 2.0) / 2e6)
    cached = store.read("llm_cache", where=f"run_id = '{summary['run_id']}'").column("key").to_pylist()
    assert sorted(cached) == sorted(members)  # each answer stored once
    final = next(b for b in cli("cost", "--index", index, "--json")["batches"] if b["batch_id"] == row["batch_id"])
    assert not final["estimated"] and final["cost"] == pytest.approx(extract["cost"])


def test_gleaning_rounds_and_report_waves_go_out_as_follow_up_batches(api, corpus, tmp_path):
    """Round r+1 holds round r's answers, so it is sent once they are in; a parent report once its
    children's are. An unchanged rerun sends nothing."""
    api.auto = "complete"
    cfg = batch_config(api, extract={"gleanings": 1}, report={"mode": "llm", "context_tokens": 600, "child_report_tokens": 60})
    summary = run([corpus], tmp_path / "index", cfg)
    first, second = stage_batches(api, "extract")
    glean = api.lines(second)
    assert {len(line["body"]["messages"]) for line in api.lines(first)} == {2}
    assert {len(line["body"]["messages"]) for line in glean} == {4}
    answered = {json.loads(api.files[api.batches[first]["output_file_id"]]["data"].splitlines()[0])["response"]["body"]["choices"][0]
                ["message"]["content"]}
    assert any(line["body"]["messages"][2]["content"] in answered for line in glean)
    rows = {r["provider_batch_id"]: r for r in batch_rows(IndexStore(tmp_path / "index"))}
    assert rows[first]["recorded_at"] < rows[second]["submitted_at"]  # collected before the next round went out
    waves = stage_batches(api, "report")
    assert len(waves) >= 2 and summary["recomputed"]["reports_built"] == sum(len(api.lines(b)) for b in waves)
    titles = [json.loads(line)["response"]["body"]["choices"][0]["message"]["content"]
              for line in api.files[api.batches[waves[0]]["output_file_id"]]["data"].splitlines()]
    later = " ".join(m["content"] for b in waves[1:] for line in api.lines(b) for m in line["body"]["messages"])
    assert any(json.loads(t)["title"] in later for t in titles)  # a parent's prompt holds its children's reports
    created = api.creates
    again = run([corpus], tmp_path / "index", cfg)
    assert api.creates == created and again["llm"]["calls"] == 0 and again["version"] == summary["version"]


def test_a_failed_batch_is_sent_again(api, corpus, tmp_path):
    api.script, api.auto = [("fail", {})], "complete"
    summary = run([corpus], tmp_path / "index", batch_config(api))
    failed, retried = stage_batches(api, "extract")
    assert api.batches[failed]["status"] == "failed" and sorted(custom_ids(api, failed)) == sorted(custom_ids(api, retried))
    rows = {r["provider_batch_id"]: r for r in batch_rows(IndexStore(tmp_path / "index"))}
    assert rows[failed]["state"] == "collected" and rows[failed]["completed"] == 0 and "token_limit_exceeded" in rows[failed]["error"]
    assert summary["chunks_failed"] == 0 and summary["version"] == 1


def test_an_expired_batch_keeps_its_answers_and_only_the_rest_is_sent_again(api, corpus, tmp_path):
    api.script, api.auto = [("expire", {"answered": 3})], "complete"
    summary = run([corpus], tmp_path / "index", batch_config(api))
    expired, rest = stage_batches(api, "extract")
    answered = custom_ids(api, expired)[:3]
    assert sorted(custom_ids(api, rest)) == sorted(set(custom_ids(api, expired)) - set(answered))
    store = IndexStore(tmp_path / "index")
    row = next(r for r in batch_rows(store) if r["provider_batch_id"] == expired)
    assert row["provider_status"] == "expired" and (row["completed"], row["failed"]) == (3, len(custom_ids(api, expired)) - 3)
    calls = {c["key"]: c for c in store.read("llm_calls").to_pylist()}
    assert {calls[k]["batch_id"] for k in answered} == {row["batch_id"]}
    assert summary["chunks_failed"] == 0


def test_per_request_errors_fail_their_chunks_and_transient_ones_are_sent_again(api, corpus, tmp_path):
    """The error file's lines: an HTTP 400 fails its chunk with the provider's reason (and the next
    run asks again), a 429 is sent again in a new batch, and an answer the extractor cannot read
    is not cached."""
    bad_request = {"response": {"status_code": 400, "request_id": "req_x", "body": {"error": {
        "message": "Invalid value: 'object'.", "type": "invalid_request_error", "param": "response_format.type", "code": "invalid_value"}}},
        "error": None}
    rate_limited = {"response": {"status_code": 429, "request_id": "req_y", "body": {"error": {
        "message": "Rate limit reached", "type": "requests", "param": None, "code": "rate_limit_exceeded"}}}, "error": None}
    api.script, api.auto = [("complete", {"errors": {0: bad_request, 1: rate_limited, 2: "I cannot help with that."}})], "complete"
    index = tmp_path / "index"
    summary = run([corpus], index, batch_config(api))
    first, *later = stage_batches(api, "extract")
    keys = custom_ids(api, first)
    assert [custom_ids(api, b) for b in later] == [[keys[1]]]  # only the rate-limited request was sent again
    store = IndexStore(index)
    calls = {c["key"]: c for c in store.read("llm_calls").to_pylist()}
    assert calls[keys[0]]["status"] == "failed" and "HTTP 400 (invalid_value): Invalid value" in calls[keys[0]]["error"]
    assert calls[keys[2]]["status"] == "failed" and "unusable answer" in calls[keys[2]]["error"]
    assert calls[keys[1]]["status"] == "ok"
    assert store.count("llm_cache", where=f"key IN ('{keys[0]}', '{keys[2]}')") == 0
    assert summary["chunks_failed"] == 2
    failed = store.read("extractions", where="status = 'failed'").to_pylist()
    assert any("HTTP 400" in f["error"] for f in failed)
    again = run([corpus], index, batch_config(api))  # the next run asks for the failed chunks again
    assert sorted(custom_ids(api, stage_batches(api, "extract")[-1])) == sorted([keys[0], keys[2]])
    assert again["chunks_failed"] == 0


@pytest.mark.parametrize("killed", ["after the create", "before the upload"])
def test_a_run_killed_between_sending_and_recording_leaves_no_orphan(api, corpus, tmp_path, monkeypatch, killed):
    """Recorded `submitting` before it is sent: the next run finds the batch by its metadata and
    collects it (nothing sent twice), or, when it never reached the provider, sends it."""
    import graphwright.engines.llm.batch.providers as providers

    index = tmp_path / "index"
    if killed == "after the create":
        real = BatchLedger.record

        def die(self, batch_id, run_id, **changes):
            if changes.get("state") == "submitted":
                raise KeyboardInterrupt("killed")
            return real(self, batch_id, run_id, **changes)

        monkeypatch.setattr(BatchLedger, "record", die)
    else:
        monkeypatch.setattr(providers.ApiBatches, "upload", lambda *a: (_ for _ in ()).throw(KeyboardInterrupt("killed")))
    with pytest.raises(KeyboardInterrupt):
        run([corpus], index, batch_config(api))
    monkeypatch.undo()
    assert api.creates == (1 if killed == "after the create" else 0)
    (row,) = batch_rows(IndexStore(index))
    assert row["state"] == "submitting" and row["provider_batch_id"] is None
    api.auto = "complete"
    logs: list[str] = []
    summary = run([corpus], index, batch_config(api), logs=logs)
    assert summary["version"] == 1 and len(stage_batches(api, "extract")) == 1
    final = {r["batch_id"]: r for r in batch_rows(IndexStore(index))}
    if killed == "after the create":
        assert final[row["batch_id"]]["state"] == "collected" and final[row["batch_id"]]["provider_batch_id"] == api.order[0]
        assert any("recorded before it was sent" in line for line in logs)
    else:
        assert final[row["batch_id"]]["state"] == "abandoned" and "never reached" in final[row["batch_id"]]["error"]


def test_a_lost_reply_to_a_create_is_found_by_its_metadata_not_sent_again(api, corpus, tmp_path):
    api.auto, api.drop_create_reply = "complete", 1
    summary = run([corpus], tmp_path / "index", batch_config(api))
    assert summary["chunks_failed"] == 0 and len(stage_batches(api, "extract")) == 1


def _engine(store, api, run_id: str, wait_s: float, logs: list, tokens: list) -> BatchEngine:
    config = LLMConfig(engine="openai-batch", model="fake-model", base_url=api.base_url, api_key_env=None, timeout_s=10,
                       max_attempts=1, batch={"poll_s": 0.02})
    ctx = BatchContext(store, run_id, lambda: "report", time.time() + wait_s, CallLog(store, config, run_id), logs.append,
                       lambda p, c: tokens.append((p, c)))
    return BatchEngine(config, ctx)


REQUESTS = [LLMRequest(messages=(("system", "You write a report about one community."), ("user", f"-----Entities-----\n1|E{i}|x")))
            for i in range(5)]


def _gated_collection(api, store, tmp_path):
    """A batch the provider finished, and a collector holding its lock while it downloads."""
    logs: list[str] = []
    with pytest.raises(WaitingOnBatch):
        _engine(store, api, "run-0", 0, logs, []).complete(REQUESTS)
    api.complete(api.order[0])
    api.download_gate = threading.Event()
    out: dict = {"tokens": []}
    first = _engine(store, api, "run-a", 20, [], out["tokens"])
    thread = threading.Thread(target=lambda: out.update(a=first.complete(REQUESTS)))
    thread.start()
    assert api.downloads_waiting.acquire(timeout=20)  # run-a holds the batch's lock, mid-download
    return first, thread, out


def test_two_collectors_racing_for_one_batch_store_it_once(api, tmp_path):
    store = IndexStore(tmp_path / "index")
    first, thread, out = _gated_collection(api, store, tmp_path)
    logs, tokens = [], []
    refused = threading.Event()
    second = _engine(store, api, "run-b", 20, logs, tokens)
    second.ctx.log = lambda line: (logs.append(line), "being collected by another run" in line and refused.set())
    other = threading.Thread(target=lambda: out.update(b=second.complete(REQUESTS)))
    other.start()
    assert refused.wait(20)  # run-b was refused the batch while run-a collects it
    api.download_gate.set()
    thread.join(20)
    other.join(20)
    assert [r.text for r in out["a"]] == [r.text for r in out["b"]] and all(r.ok for r in out["b"])
    assert store.count("llm_cache") == len(REQUESTS) and api.creates == 1  # stored once, sent once
    states = [r["state"] for r in store.read("llm_batches").to_pylist()]
    assert states.count("collected") == 1
    assert len(out["tokens"]) == 1 and out["tokens"][0][0] > 0 and tokens == []  # paid once, counted once
    assert set(second.origins.values()) == {None}  # run-b's answers came from the cache


def test_a_batch_another_run_collected_is_not_counted_again(api, tmp_path):
    # the race above, decided late: run-b takes the batch's lock only after run-a has collected it
    store = IndexStore(tmp_path / "index")
    first, thread, out = _gated_collection(api, store, tmp_path)
    api.download_gate.set()
    thread.join(20)
    tokens: list = []
    second = _engine(store, api, "run-b", 20, [], tokens)
    (batch_id,) = {r["batch_id"] for r in store.read("llm_batches").to_pylist()}
    done: dict = {}
    second._collect(batch_id, None, {}, done, {}, Counter())
    assert tokens == [] and done == {} and len(out["tokens"]) == 1  # counted by run-a only


def test_a_cancel_racing_a_collection_leaves_it_alone(api, tmp_path):
    store = IndexStore(tmp_path / "index")
    first, thread, out = _gated_collection(api, store, tmp_path)
    config = LLMConfig(engine="openai-batch", model="fake-model", base_url=api.base_url, api_key_env=None)
    (done,) = cancel_batches(store, config, ["all"], "run-cancel")
    assert not done["cancelled"] and done["reason"] == "a run is collecting it"
    api.download_gate.set()
    thread.join(20)
    latest = batch_rows(store)[0]
    assert latest["state"] == "collected" and latest["run_id"] == "run-a" and all(r.ok for r in out["a"])


def test_a_cancelled_batch_is_collected_and_the_rest_sent_again(api, corpus, tmp_path):
    index = tmp_path / "index"
    waiting = waiting_run(corpus, index, batch_config(api, wait_s=0))
    config = tmp_path / "cfg.yaml"
    config.write_text(f"llm: {{engine: openai-batch, model: fake-model, base_url: '{api.base_url}', api_key_env: null}}\n")
    result = cli("batches", "--index", index, "--cancel", "all", "--config", config, "--json")
    assert result["cancelled"][0]["provider_status"] == "cancelling"
    profile = tmp_path / "profile.yaml"
    profile.write_text(yaml.safe_dump(batch_config(api, wait_s=0).model_dump(mode="json")))
    indexed = runner.invoke(app, ["index", str(corpus), "--index", str(index), "--config", str(profile), "--json"])
    assert indexed.exit_code == 3 and "waiting:" in indexed.stderr  # cancelling is not over yet: nothing is sent
    assert json.loads(indexed.stdout)["status"] == "waiting" and api.creates == 1
    api.finish_cancel(api.order[0], answered=4)
    api.auto = "complete"
    summary = run([corpus], index, batch_config(api))
    cancelled, rest = stage_batches(api, "extract")
    assert len(custom_ids(api, rest)) == waiting.requests - 4 and summary["chunks_failed"] == 0


def test_requests_are_split_by_the_providers_limits(api, tmp_path):
    store = IndexStore(tmp_path / "index")
    engine = _engine(store, api, "run-1", 0, [], [])
    engine.settings = engine.settings.model_copy(update={"max_requests": 2, "max_bytes": 1500})
    huge = LLMRequest(messages=(("user", "x" * 2000),))
    with pytest.raises(WaitingOnBatch) as caught:
        engine.complete([*REQUESTS, huge])
    assert len(api.order) == 3 and [len(api.lines(b)) for b in api.order] == [2, 2, 1] and caught.value.requests == len(REQUESTS)
    assert all(api.files[api.batches[b]["input_file_id"]]["bytes"] <= 1500 for b in api.order)
    api.complete_all()
    engine.ctx.deadline = time.time() + 20
    responses = engine.complete([*REQUESTS, huge])
    assert all(r.ok for r in responses[:-1]) and "larger than llm.batch.max_bytes=1500" in responses[-1].error


def test_the_enqueued_token_limit_holds_files_back_and_a_batch_failed_for_it_is_sent_again(api, tmp_path):
    """Request files beyond llm.batch.max_enqueued_tokens wait for earlier batches; a batch the
    provider failed for its enqueued-token limit while another ran is sent again without
    counting against llm.batch.max_submissions."""
    from graphwright.engines.llm.batch.files import estimated_tokens

    store = IndexStore(tmp_path / "held")
    engine = _engine(store, api, "run-1", 0, [], [])
    per_file = sum(estimated_tokens(r) for r in REQUESTS[:2])
    engine.settings = engine.settings.model_copy(update={"max_requests": 2, "max_enqueued_tokens": per_file + 1})
    with pytest.raises(WaitingOnBatch) as held:
        engine.complete(REQUESTS)
    assert len(api.order) == 1 and "(3 not sent yet)" in str(held.value)
    api.auto, engine.ctx.deadline = "complete", time.time() + 20
    assert all(r.ok for r in engine.complete(REQUESTS)) and [len(api.lines(b)) for b in api.order] == [2, 2, 1]

    api.auto = None
    api.script = [("wait", {}), ("fail", {}), ("wait", {})]
    crowded = _engine(IndexStore(tmp_path / "crowded"), api, "run-2", 0, [], [])
    crowded.settings = crowded.settings.model_copy(update={"max_requests": 2, "max_submissions": 1})
    with pytest.raises(WaitingOnBatch):
        crowded.complete(REQUESTS)
    running, failed, third = api.order[-3:]
    api.auto, crowded.ctx.deadline = "complete", time.time() + 20
    responses = crowded.complete(REQUESTS)
    assert api.batches[failed]["status"] == "failed" and api.order[-4:-1] == [running, failed, third]
    assert all(r.ok for r in responses) and sorted(custom_ids(api, api.order[-1])) == sorted(custom_ids(api, failed))


def test_batch_tokens_are_priced_at_the_batch_price():
    from graphwright.config import CostConfig, ModelPrice
    from graphwright.ops.costs import stage_cost

    prices = CostConfig(cpu_hour=0, gpu_hour=0, llm={
        "m": ModelPrice(prompt_per_million=2, completion_per_million=8),
        "n": ModelPrice(prompt_per_million=2, completion_per_million=8, batch_prompt_per_million=0.5, batch_completion_per_million=1)})
    row = {"prompt_tokens": 1e6, "completion_tokens": 0, "batch_prompt_tokens": 1e6, "batch_completion_tokens": 1e6}
    assert stage_cost(row, prices, "m") == pytest.approx(2 + 1 + 4)  # half the synchronous price by default
    assert stage_cost(row, prices, "n") == pytest.approx(2 + 0.5 + 1)


def test_the_batch_profile_plans_and_its_waiting_settings_leave_the_index_alone():
    from graphwright.config import PipelineConfig, load_config
    from graphwright.pipeline.plan import describe

    cfg = load_config("pipelines/batch-api.yaml")
    extract = next(r for r in describe(cfg) if r["stage"] == "extract")
    assert cfg.llm.engine == "openai-batch" and "batches of up to 50000 requests to https://api.openai.com/v1" in extract["resources"]
    assert PipelineConfig.model_validate({"llm": {"batch": {"wait_s": 5, "poll_s": 1}}}).config_hash() == PipelineConfig().config_hash()


def test_a_batch_no_stage_asks_for_any_more_is_collected_and_counted_at_the_end(api, corpus, tmp_path):
    """The configuration changed after a batch was sent (other prompts, other keys): its answers
    were paid for, so the run collects it once every stage is done and counts its tokens."""
    index = tmp_path / "index"
    waiting_run(corpus, index, batch_config(api, wait_s=0))
    (orphan,) = api.order
    api.complete(orphan)
    api.auto = "complete"
    summary = run([corpus], index, batch_config(api, extract={"entity_types": ["PERSON", "GEO"]}))
    store = IndexStore(index)
    rows = {r["provider_batch_id"]: r for r in batch_rows(store)}
    assert rows[orphan]["state"] == "collected" and rows[orphan]["collected_by"] == summary["run_id"]
    assert len(stage_batches(api, "extract")) == 2  # the new prompts' batch, and the orphan
    engine = next(r for r in store.read("stage_metrics").to_pylist() if r["run_id"] == summary["run_id"] and r["stage"] == "llm-engine")
    assert engine["batch_prompt_tokens"] == rows[orphan]["prompt_tokens"] > 0
    assert summary["llm"]["batch_prompt_tokens"] == sum(r["prompt_tokens"] for r in rows.values())


def test_a_result_file_that_cannot_be_read_now_is_read_at_the_next_look(api, tmp_path):
    store = IndexStore(tmp_path / "index")
    logs: list[str] = []
    engine = _engine(store, api, "run-1", 20, logs, [])
    api.auto, api.fail_downloads = "complete", 1
    assert all(r.ok for r in engine.complete(REQUESTS))
    assert any("HTTP 500" in line and "looking again later" in line for line in logs)
    assert store.count("llm_cache") == len(REQUESTS) and api.creates == 1


def test_query_time_calls_of_the_batch_engine_are_synchronous(api):
    """Answers and lazy reports cannot wait for a batch: outside an index run the engine is the
    same endpoint's chat completions."""
    from graphwright.engines.llm import make_llm
    from graphwright.engines.llm.openai_engine import OpenAIEngine
    from graphwright.engines.llm.session import query_session

    config = LLMConfig(engine="openai-batch", model="fake-model", base_url=api.base_url, api_key_env=None)
    assert isinstance(make_llm(config), OpenAIEngine)
    session = query_session(config)
    assert not session.batched and isinstance(session.engine(), OpenAIEngine)


def test_a_batch_reply_that_needed_repairs_is_used_not_cached_and_asked_once_more(api, corpus, tmp_path):
    """As on the synchronous path: a partial answer (here a duplicated entity) is used by this
    run, is not stored in llm_cache, and the next run asks for that chunk once more."""
    from graphwright.engines.llm import standin

    index = tmp_path / "index"
    waiting = waiting_run(corpus, index, batch_config(api, wait_s=0))
    provider_id = next(r for r in batch_rows(IndexStore(index)) if r["batch_id"] == waiting.batches[0]["batch_id"])["provider_batch_id"]
    line = api.lines(provider_id)[0]
    reply = json.loads(standin.answer(line["body"]["messages"]))
    assert reply["entities"], "the premise: the stand-in names an entity in the chunk"
    reply["entities"].append(dict(reply["entities"][0]))  # the same entity twice: repaired by the parser
    api.complete(provider_id, errors={0: json.dumps(reply)})

    summary = run([corpus], index, batch_config(api))
    store = IndexStore(index)
    assert summary["version"] == 1
    partial = store.read("extractions", where="status = 'partial'").to_pylist()
    assert len(partial) == 1 and "duplicate" in partial[0]["notes"]
    assert line["custom_id"] not in store.read("llm_cache").column("key").to_pylist()

    again = waiting_run(corpus, index, batch_config(api, wait_s=0))
    (batch,) = again.batches
    provider_again = next(r for r in batch_rows(store) if r["batch_id"] == batch["batch_id"])["provider_batch_id"]
    assert custom_ids(api, provider_again) == [line["custom_id"]]  # that chunk alone, asked once more

"""One LLM engine per run: the vllm engine's replicas start once whatever the stages ask (a CPU
stand-in Serve application on the same code path), openai extraction actors start once per
stage, and the cache is looked up once per stage round, never per batch, and only appended to."""

from __future__ import annotations

import json
import shutil

import pytest
from _helpers import CORPUS, make_config, run
from fake_openai import FakeOpenAI

from graphwright.config import LLMConfig
from graphwright.engines.llm.cache import CallLog, lookup
from graphwright.engines.llm.interface import LLMRequest, LLMResponse
from graphwright.engines.llm.session import LLMSession, Stream
from graphwright.storage.delta import IndexStore

FAST = dict(backoff_s=0.01, max_backoff_s=0.05, timeout_s=10)


@pytest.fixture
def server():
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture
def corpus(tmp_path):
    shutil.copytree(CORPUS, tmp_path / "corpus")
    return tmp_path / "corpus"


def llm_config(server, **execution) -> object:
    return make_config(
        extract={"engine": "llm"},
        llm={"engine": "openai", "model": "fake-model", "base_url": server.base_url, "api_key_env": None, "concurrency": 4, **FAST},
        report={"mode": "llm", "context_tokens": 600, "child_report_tokens": 60},
        execution={"commit_every": 4, **execution},
    )


def stage_details(index, stage: str) -> dict:
    rows = IndexStore(index).read("stage_metrics").to_pylist()
    return json.loads(next(r["details"] for r in rows if r["stage"] == stage))


def test_vllm_replicas_start_once_per_run_for_extraction_and_reports(corpus, tmp_path, monkeypatch):
    """The stand-in Serve application (graphwright.engines.llm.standin) takes vLLM's place: the
    same Serve start-up, route and clients. Extracting many commits' worth of chunks, then
    writing LLM reports level after level, starts its replicas once."""
    import socket

    log = tmp_path / "replicas.log"
    monkeypatch.setenv("GRAPHWRIGHT_STANDIN_LOG", str(log))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = make_config(
        extract={"engine": "llm", "batch_size": 2},
        llm={"engine": "vllm", "model": "standin-model", "serve_app": "graphwright.engines.llm.standin:app",
             "replicas": 2, "serve_port": port, "concurrency": 4, **FAST},
        report={"mode": "llm", "context_tokens": 600, "child_report_tokens": 60},
        execution={"commit_every": 4, "executor": "local"},
    )
    summary = run([corpus], tmp_path / "index", cfg)
    assert summary["chunks_extracted"] >= 3 * cfg.execution.commit_every  # several commits and batches
    assert summary["reports"] > 0 and summary["recomputed"]["reports_built"] > 0
    store = IndexStore(tmp_path / "index")
    calls = store.read("llm_calls").to_pylist()
    assert {c["stage"] for c in calls} == {"extract", "report"} and all(c["status"] == "ok" for c in calls)
    assert len(log.read_text().split()) == 2  # two replicas, started once for the whole run
    engine_row = next(r for r in store.read("stage_metrics").to_pylist() if r["stage"] == "llm-engine")
    details = json.loads(engine_row["details"])
    assert details["engine"] == "vllm" and details["replicas"] == 2 and engine_row["wall_s"] >= details["startup_s"] > 0
    # an unchanged rerun asks nothing and starts nothing
    again = run([corpus], tmp_path / "index", cfg)
    assert again["llm"]["calls"] == 0 and len(log.read_text().split()) == 2


def test_openai_extraction_actors_start_once_per_stage(server, corpus, tmp_path):
    cfg = llm_config(server, executor="ray", actors=2, actor_num_cpus=0.25, num_cpus=2, inline_batches=0, inline_seconds=0)
    cfg.extract.batch_size = 2
    summary = run([corpus], tmp_path / "index", cfg)
    batches = -(-summary["chunks_extracted"] // cfg.extract.batch_size)
    assert summary["chunks_extracted"] >= 3 * cfg.execution.commit_every and batches > cfg.execution.actors
    # at most one per actor (an actor that got no batch reports none), not one per batch
    assert 1 <= stage_details(tmp_path / "index", "extract")["workers_started"] <= cfg.execution.actors


def test_the_cache_is_read_once_per_stage_round_never_per_batch(server, corpus, tmp_path, monkeypatch):
    from graphwright.engines.llm import cache, cache_keys

    scans = []

    def counting(real):
        def read(self, name, *args, **kw):
            if name == "llm_cache":
                scans.append(name)
            return real(self, name, *args, **kw)
        return read

    def counted(real):  # a lookup through the key index, or the join it stands in for
        def look(store, *args, **kw):
            scans.append("llm_cache")
            return real(store, *args, **kw)
        return look

    for reader in ("scanner", "read", "semi_join", "rows_in"):
        monkeypatch.setattr(IndexStore, reader, counting(getattr(IndexStore, reader)))
    monkeypatch.setattr(cache_keys, "key_index", counted(cache_keys.key_index))
    monkeypatch.setattr(cache, "_joined", counted(cache._joined))
    monkeypatch.setattr(IndexStore, "upsert", _refuse_merge(IndexStore.upsert))
    cfg = llm_config(server)
    cfg.extract.gleanings, cfg.extract.batch_size = 1, 2
    cfg.report.mode = "extractive"
    first = run([corpus], tmp_path / "index", cfg)
    batches = -(-first["chunks_extracted"] // cfg.extract.batch_size)
    assert first["chunks_extracted"] > 2 * cfg.extract.batch_size and batches > 2
    assert len(scans) <= 1  # the tokens a rebuild would cost; no lookup in an empty cache, whatever the batches
    asked = len(server.requests)
    scans.clear()
    IndexStore(tmp_path / "index").delete("extractions", "true")  # every chunk to extract again, from the cache
    again = run([corpus], tmp_path / "index", cfg)
    assert again["chunks_extracted"] == first["chunks_extracted"] and len(server.requests) == asked  # nothing asked
    assert 1 <= len(scans) <= 2 + 1  # per round one lookup through the key index; and the rebuild's tokens
    assert again["llm"]["cache_hits"] == again["llm"]["calls"] > 0


def _refuse_merge(real):
    def upsert(self, name, table):
        assert name not in ("llm_cache", "llm_calls"), f"{name} is append-only"
        return real(self, name, table)
    return upsert


def test_identical_chunks_are_asked_once_and_each_gets_its_findings(server, tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    text = "Mara Voss met Tobias Reed in Port Elling. The Harbor Council thanked Mara Voss."
    for name in ("a.txt", "b.txt", "c.txt"):
        (corpus / name).write_text(text)
    summary = run([corpus], tmp_path / "index", llm_config(server))
    store = IndexStore(tmp_path / "index")
    assert summary["chunks_extracted"] == 3
    extraction_asks = [r for r in server.requests if r["messages"][0]["content"].startswith("You extract")]
    assert len(extraction_asks) == 1
    mentions = store.read("mentions").to_pylist()
    assert len({m["chunk_id"] for m in mentions}) == 3 and {m["name"] for m in mentions} >= {"Mara Voss", "Tobias Reed"}
    assert all(r["status"] == "ok" for r in store.read("extractions").to_pylist())
    assert len(store.read("llm_calls", where="stage = 'extract'")) == 1


def test_lookup_answers_many_keys_and_a_key_stored_twice_once(tmp_path):
    store = IndexStore(tmp_path / "index")
    llm = LLMConfig(model="m")
    log = CallLog(store, llm, "run-1")
    calls = [{"key": f"k{i}", "item_id": f"c{i}", "prompt_version": "p", "response": f"answer {i}", "cache_hit": False,
              "prompt_tokens": i, "completion_tokens": 1, "latency_s": 0.0, "attempts": 1, "error": None} for i in range(300)]
    log.record("extract", calls[:200])
    CallLog(store, llm, "query").record_answers([("k5", LLMRequest(messages=()), LLMResponse(text="answer 5", prompt_tokens=5,
                                                                                             completion_tokens=1))])
    log.record("extract", calls[150:])  # 150..199 were recorded already: not appended again
    assert store.count("llm_cache") == 301 and store.count("llm_calls") == 300
    found = lookup(store, [f"k{i}" for i in range(0, 400, 5)])
    assert sorted(found.column("key").to_pylist()) == sorted(f"k{i}" for i in range(0, 300, 5))
    assert found.num_rows == 60  # k5, stored twice, answered once
    assert lookup(store, ["nope"]).num_rows == 0 and lookup(IndexStore(tmp_path / "empty"), ["k1"]).num_rows == 0


def test_a_stream_yields_answers_as_they_complete(tmp_path):
    import threading

    release = threading.Event()

    class Engine:
        def complete(self, requests):
            if requests[0].prompt_version == "slow":
                release.wait(5)
            return [LLMResponse(text=requests[0].prompt_version)]

    stream = Stream(Engine(), in_flight=2)
    stream.submit("slow", LLMRequest(messages=(), prompt_version="slow"))
    stream.submit("fast", LLMRequest(messages=(), prompt_version="fast"))
    order = []
    for tag, response in stream.completed():
        order.append(tag)
        if tag == "fast":  # submitted while the slow one is still out
            stream.submit("after", LLMRequest(messages=(), prompt_version="after"))
        if tag == "after":
            release.set()
    stream.close()
    assert order == ["fast", "after", "slow"]


def test_a_session_starts_its_engine_once_and_only_when_asked(monkeypatch):
    made = []

    class Fake:
        def __init__(self, config):
            made.append(config)

        def complete(self, requests):
            return [LLMResponse(text="ok") for _ in requests]

    session = LLMSession(LLMConfig(model="m"))
    assert session.usage() == {"engine": "openai", "started": False}
    import graphwright.engines.llm as engines

    monkeypatch.setattr(engines, "make_llm", Fake)
    assert session.engine() is session.engine()
    assert len(made) == 1 and session.usage()["started"]
    session.close()
    assert session.usage()["held_s"] >= 0 and not session.started


def test_calls_of_a_worker_that_died_with_answers_in_flight_are_counted(server, corpus, tmp_path, monkeypatch):
    from graphwright.engines.llm.openai_engine import OpenAIEngine
    from graphwright.pipeline.errors import TooManyFailures

    real, seen = OpenAIEngine.complete, []

    def dies_on_the_third_batch(self, requests):
        answers = real(self, requests)  # the server answered (and would bill) these
        seen.append(len(requests))
        if len(seen) == 3:
            raise SystemExit("the worker was killed")  # its answers never reach the driver
        return answers

    monkeypatch.setattr(OpenAIEngine, "complete", dies_on_the_third_batch)
    cfg = llm_config(server)
    cfg.extract.batch_size = 2
    with pytest.raises((SystemExit, TooManyFailures)):
        run([corpus], tmp_path / "index", cfg)
    store = IndexStore(tmp_path / "index")
    details = stage_details(tmp_path / "index", "extract")
    recorded = store.count("llm_calls", where="stage = 'extract'")
    assert details["lost_calls"] == seen[-1] == 2
    assert recorded + details["lost_calls"] == sum(seen) == len(server.requests)  # every request accounted for
    assert not store.files.list("ledger")  # the intent records are removed once counted

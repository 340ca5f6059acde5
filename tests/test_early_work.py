"""A stage's early part (pipeline.early): the embed stage's chunk vectors and chunk lexical index
start once extract has run, beside resolve; they are counted in embed's own row, a run that
stops waits for them, and work that would start a pool of workers is left to the stage's turn."""

import dataclasses
import json
import threading
import time

import pytest
from _helpers import index_fresh, make_config, run, run_stage_details, two_documents

from graphwright.pipeline import definition
from graphwright.pipeline.early import EarlyWork
from graphwright.stages import embed
from graphwright.storage.delta import IndexStore


def _with(stages: tuple, name: str, **changes) -> tuple:
    return tuple(dataclasses.replace(s, **changes) if s.name == name else s for s in stages)


def test_the_chunks_are_embedded_and_indexed_while_resolve_runs(tmp_path, monkeypatch):
    resolve_running, early_running = threading.Event(), threading.Event()
    resolve = definition.by_name("resolve")
    _, work = embed.STAGE.early

    def resolve_execute(run, m):
        resolve_running.set()
        # the early part must be running now: it waits for this stage to start before it goes on
        assert early_running.wait(30), "embed's early part did not run beside resolve"
        return resolve.execute(run, m)

    def early(run):
        if resolve_running.wait(30):
            early_running.set()
        return work(run)

    stages = _with(_with(definition.INDEX, "resolve", execute=resolve_execute), "embed", early=("extract", early))
    monkeypatch.setattr(definition, "INDEX", stages)
    indexed = index_fresh(tmp_path)
    details = run_stage_details(indexed.index, indexed.summary)["embed"]
    assert details["early"]["after"] == "extract" and details["early"]["beside"][0] == "resolve"
    assert details["chunk"]["embedded"] == indexed.summary["chunks"]  # the early part's, in the stage's row
    assert details["entity"]["embedded"] > 0 and details["report"]["embedded"] > 0
    assert set(details["lexical"]) == {"chunk", "entity", "relationship", "report"}
    published = json.loads(indexed.store.read("index_manifest").column("vector_indexes")[0].as_py())
    assert {"chunk", "entity", "report", "lexical:chunk", "lexical:entity"} <= set(published)


def test_what_the_early_part_writes_counts_in_its_own_stage(tmp_path):
    indexed = index_fresh(tmp_path)
    store = indexed.store
    rows = {r["stage"]: r for r in store.read("stage_metrics", where=f"run_id = '{indexed.summary['run_id']}'").to_pylist()}
    assert rows["embed"]["bytes_written"] >= store.bytes_added("embeddings", None) > 0
    # written while resolve ran, but not resolve's: its row counts its own tables alone
    assert rows["resolve"]["bytes_written"] == sum(store.bytes_added(t, None) for t in definition.by_name("resolve").writes)


def test_an_update_that_changes_only_reports_reuses_the_chunks_part(tmp_path):
    indexed = index_fresh(tmp_path)
    again = run([indexed.corpus], indexed.index, make_config(report={"min_size": 3}))
    details = run_stage_details(indexed.index, again)["embed"]
    assert details.get("early_reused") is True and not details.get("skipped")
    assert details["chunk"] == {"embedded": 0, "removed": 0, "reused": indexed.summary["chunks"]}
    assert details["report"]["embedded"] > 0
    noop = run([indexed.corpus], indexed.index, make_config(report={"min_size": 3}))
    assert run_stage_details(indexed.index, noop)["embed"]["skipped"] is True


def test_work_that_would_start_a_pool_of_workers_is_left_to_one_pass_at_the_stages_turn(tmp_path, monkeypatch):
    from graphwright.pipeline.executors import LocalExecutor

    pools = []  # the executor's map_batches calls: where an actor pool would start
    map_batches = LocalExecutor.map_batches

    def counted(self, table, stage):
        pools.append((stage.name, table.num_rows))
        return map_batches(self, table, stage)

    monkeypatch.setattr(LocalExecutor, "map_batches", counted)
    config = make_config(execution={"inline_batches": 0, "inline_seconds": 0})  # every batch to the executor
    indexed = index_fresh(tmp_path, config=config)
    details = run_stage_details(indexed.index, indexed.summary)["embed"]
    embed_pools = [rows for name, rows in pools if name == "embed"]
    assert len(embed_pools) == 1 and embed_pools[0] == sum(c["embedded"] for c in indexed.summary["recomputed"]["embeddings"].values())
    assert details["chunk"]["embedded"] == indexed.summary["chunks"] and details["entity"]["embedded"] > 0
    assert details["early"]["after"] == "extract"  # started, and left the work to the stage's pass


def test_a_run_that_fails_waits_for_the_early_part_and_its_error_is_the_stages(tmp_path, monkeypatch):
    corpus = two_documents(tmp_path)
    _, work = embed.STAGE.early
    ended = []

    def slow_early(run):
        time.sleep(0.5)
        result = work(run)
        ended.append(time.perf_counter())
        return result

    def failing_resolve(run, m):
        raise RuntimeError("resolve failed")

    index = definition.INDEX
    stages = _with(_with(index, "resolve", execute=failing_resolve), "embed", early=("extract", slow_early))
    monkeypatch.setattr(definition, "INDEX", stages)
    with pytest.raises(RuntimeError, match="resolve failed"):
        run([corpus], tmp_path / "index")
    assert ended and ended[0] < time.perf_counter()  # it had ended, writing nothing more, once the run stopped

    def failing_early(run):
        raise ValueError("early part failed")

    monkeypatch.setattr(definition, "INDEX", _with(index, "embed", early=("extract", failing_early)))
    with pytest.raises(ValueError, match="early part failed"):
        run([corpus], tmp_path / "index2")
    failed = IndexStore(tmp_path / "index2").read("stage_metrics", where="stage = 'embed'").to_pylist()
    assert "early part failed" in failed[0]["details"]


def test_work_that_holds_gpus_waits_for_its_turn():
    started = []
    gpu = dataclasses.replace(embed.STAGE, gpus=lambda cfg: 1.0, early=("extract", started.append))

    class FakeRun:
        config = make_config()

    work = EarlyWork()
    work.start_after(FakeRun(), "extract", (gpu,))
    assert work.result("embed") == (None, {}) and not started


def test_plan_says_which_stage_starts_part_of_its_work_early():
    from graphwright.pipeline.plan import describe

    rows = {r["stage"]: r for r in describe(make_config())}
    assert rows["embed"]["early_after"] == "extract" and rows["resolve"]["early_after"] is None
    gpu = {r["stage"]: r for r in describe(make_config(embed={"engine": "vllm"}))}
    assert gpu["embed"]["early_after"] is None  # vLLM replicas: at its turn


def test_a_write_whose_stage_the_runner_ends_meanwhile_does_not_fail(tmp_path, monkeypatch):
    # an early part's thread writes while the main thread ends a stage and resets the store's journal
    indexed = index_fresh(tmp_path)
    store = indexed.store
    store.journal = {}
    version = store.version

    def stage_ends_meanwhile(name, *args, **kwargs):
        store.journal = None
        return version(name, *args, **kwargs)

    monkeypatch.setattr(store, "version", stage_ends_meanwhile)
    store.overwrite("runs", store.read("runs"))
    assert store.journal is None


def test_threads_sharing_the_process_embedder_take_turns(monkeypatch):
    import sys
    import types

    import numpy as np

    from graphwright.config import EmbedConfig
    from graphwright.engines.embed.sentence_transformers_engine import SentenceTransformerEmbedder

    inside, most = [], []

    class Model:  # a fast tokenizer raises "Already borrowed" when a second thread enters
        def __init__(self, *args, **kwargs):
            pass

        def get_embedding_dimension(self):
            return 4

        def encode(self, texts, **kwargs):
            inside.append(1)
            most.append(len(inside))
            time.sleep(0.05)
            inside.pop()
            return np.zeros((len(texts), 4), np.float32)

    monkeypatch.setitem(sys.modules, "sentence_transformers", types.SimpleNamespace(SentenceTransformer=Model))
    embedder = SentenceTransformerEmbedder(EmbedConfig(model="/models/local"))
    threads = [threading.Thread(target=embedder.encode, args=(["a text"],)) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert max(most) == 1

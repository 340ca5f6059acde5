"""A stage's early part (pipeline.early): the embed stage's work on what resolve wrote runs
beside cluster and report, is counted in its own row, and a run that stops waits for it."""

import dataclasses
import threading
import time

import pytest
from _helpers import index_fresh, make_config, run, run_stage_details, two_documents

from graphwright.pipeline import definition
from graphwright.pipeline.early import EarlyWork
from graphwright.stages import embed


def _with(stages: tuple, name: str, **changes) -> tuple:
    return tuple(dataclasses.replace(s, **changes) if s.name == name else s for s in stages)


def test_embed_indexes_what_resolve_wrote_while_cluster_and_report_run(tmp_path, monkeypatch):
    report_running, early_saw_report = threading.Event(), threading.Event()
    report = definition.by_name("report")
    _, work = embed.STAGE.early

    def report_execute(run, m):
        report_running.set()
        # the early part must be running now: it waits for this stage to start before it goes on
        assert early_saw_report.wait(30), "embed's early part did not run beside report"
        return report.execute(run, m)

    def early(run):
        if report_running.wait(30):
            early_saw_report.set()
        return work(run)

    stages = _with(_with(definition.INDEX, "report", execute=report_execute), "embed", early=("resolve", early))
    monkeypatch.setattr(definition, "INDEX", stages)
    indexed = index_fresh(tmp_path)
    details = run_stage_details(indexed.index, indexed.summary)
    assert details["embed"]["early"]["after"] == "resolve"
    assert details["embed"]["early"]["beside"] == ["cluster", "report"]
    assert details["embed"]["chunk"]["embedded"] > 0 and details["embed"]["report"]["embedded"] > 0
    assert indexed.summary["recomputed"]["embeddings"]["entity"]["embedded"] > 0


def test_what_the_early_part_writes_counts_in_its_own_stage(tmp_path):
    indexed = index_fresh(tmp_path)
    rows = {r["stage"]: r for r in indexed.store.read("stage_metrics", where=f"run_id = '{indexed.summary['run_id']}'").to_pylist()}
    embeddings = indexed.store.bytes_added("embeddings", None)
    assert embeddings > 0
    assert rows["embed"]["bytes_written"] >= embeddings  # the early part's vectors and the reports'
    for name in ("cluster", "report"):  # written while they ran, but not theirs
        assert rows[name]["bytes_written"] < embeddings, name


def test_an_update_that_changes_only_reports_reuses_the_early_part(tmp_path):
    indexed = index_fresh(tmp_path)
    again = run([indexed.corpus], indexed.index, make_config(report={"max_sentences": 2}))
    details = run_stage_details(indexed.index, again)["embed"]
    assert details.get("early_reused") is True and not details.get("skipped")
    assert details["report"]["embedded"] > 0
    assert details["chunk"] == {"embedded": 0, "removed": 0, "reused": indexed.summary["chunks"]}
    noop = run_stage_details(indexed.index, run([indexed.corpus], indexed.index, make_config(report={"max_sentences": 2})))
    assert noop["embed"]["skipped"] is True


def test_a_run_that_fails_waits_for_the_early_part_and_its_error_is_the_stages(tmp_path, monkeypatch):
    corpus = two_documents(tmp_path)
    _, work = embed.STAGE.early
    ended = []

    def slow_early(run):
        time.sleep(0.5)
        ended.append(time.perf_counter())
        return work(run)

    def failing_cluster(run, m):
        raise RuntimeError("cluster failed")

    stages = _with(_with(definition.INDEX, "cluster", execute=failing_cluster), "embed", early=("resolve", slow_early))
    monkeypatch.setattr(definition, "INDEX", stages)
    with pytest.raises(RuntimeError, match="cluster failed"):
        run([corpus], tmp_path / "index")
    returned = time.perf_counter()
    assert ended and ended[0] < returned  # nothing of it still writing once the run has stopped

    def failing_early(run):
        raise ValueError("early part failed")

    monkeypatch.setattr(definition, "INDEX", _with(definition.INDEX, "embed", early=("resolve", failing_early)))
    with pytest.raises(ValueError, match="early part failed"):
        run([corpus], tmp_path / "index2")
    from graphwright.storage.delta import IndexStore

    failed = IndexStore(tmp_path / "index2").read("stage_metrics", where="stage = 'embed'").to_pylist()
    assert "early part failed" in failed[0]["details"]


def test_work_that_holds_gpus_waits_for_its_turn():
    started = []
    gpu = dataclasses.replace(embed.STAGE, gpus=lambda cfg: 1.0, early=("resolve", started.append))

    class FakeRun:
        config = make_config()

        class store:
            @staticmethod
            def version(name):
                return 0

    work = EarlyWork()
    work.start_after(FakeRun(), "resolve", (gpu,))
    value, row = work.result(FakeRun(), "embed", lambda run: "made at its turn")
    assert value == "made at its turn" and row == {} and not started

"""Cost accounting: per-stage usage rows, prices, the full-rebuild estimate, the cost report."""

from __future__ import annotations

import json
import shutil

import pyarrow as pa
import pytest
from _helpers import CORPUS, make_config, run
from deltalake import write_deltalake
from fake_openai import FakeOpenAI
from typer.testing import CliRunner

from graphwright.cli import app
from graphwright.config import CostConfig, ModelPrice
from graphwright.ops import jobs
from graphwright.ops.costs import cost_history, stage_cost
from graphwright.storage.delta import IndexStore
from graphwright.storage.manifest import PublishedIndex

runner = CliRunner()
PRICES = {"cpu_hour": 36.0, "gpu_hour": 3600.0, "llm": {"fake-model": {"prompt_per_million": 1e6, "completion_per_million": 2e6}}}


def test_stage_cost_adds_cpu_gpu_and_token_prices():
    prices = CostConfig(cpu_hour=3600, gpu_hour=7200, llm={"m": ModelPrice(prompt_per_million=1e6, completion_per_million=3e6), "*": ModelPrice(prompt_per_million=5e6)})
    row = {"cpu_s": 1.5, "worker_cpu_s": 0.5, "gpu_s": 2.0, "prompt_tokens": 10, "completion_tokens": 4}
    assert stage_cost(row, prices, "m") == pytest.approx(2 + 4 + 10 + 12)
    assert stage_cost(row, prices, "other") == pytest.approx(2 + 4 + 50)  # the "*" price
    assert stage_cost({"cpu_s": 1.0}, CostConfig(cpu_hour=0, gpu_hour=0), "m") == 0


@pytest.fixture
def server():
    with FakeOpenAI() as fake:
        yield fake


def _llm_config(server):
    return make_config(extract={"engine": "llm", "batch_size": 4},
                       llm={"model": "fake-model", "base_url": server.base_url, "api_key_env": None, "backoff_s": 0.01},
                       cost=PRICES)


def test_history_records_usage_and_estimates_a_full_rebuild(server, tmp_path):
    corpus = tmp_path / "corpus"
    shutil.copytree(CORPUS, corpus)
    index = tmp_path / "index"
    first = run([corpus], index, _llm_config(server))
    (corpus / "added.txt").write_text("Ada Lovelace wrote to Charles Babbage about the Analytical Engine.\n")
    second = run([corpus], index, _llm_config(server))
    run([corpus], index, _llm_config(server))  # nothing changed

    history = cost_history(IndexStore(index))
    assert [h["run_id"] for h in history] == [first["run_id"], second["run_id"], history[2]["run_id"]]
    full, added, noop = history
    extract = {h["run_id"]: next(s for s in h["stages"] if s["stage"] == "extract") for h in history}
    e1, e2, e3 = (extract[h["run_id"]] for h in history)
    # usage: one call per chunk, tokens priced at the run's table, bytes committed
    assert e1["llm_calls"] == first["chunks"] and e1["cache_hits"] == 0
    assert e1["prompt_tokens"] == first["llm"]["prompt_tokens"] > 0
    assert e1["work_done"] == e1["work_total"] == first["chunks"]
    assert e1["cost"] >= e1["prompt_tokens"] + 2 * e1["completion_tokens"]
    assert e1["bytes_written"] > 0
    assert e2["work_done"] == 1 and e2["work_total"] == second["chunks"]
    assert e3["work_done"] == 0 and e3["llm_calls"] == 0 and e3["prompt_tokens"] == 0
    # a run that did everything costs what a rebuild would; later runs cost less than one
    assert full["full_rebuild_cost"] == pytest.approx(full["cost"])
    assert added["cost"] < added["full_rebuild_cost"] and noop["cost"] < noop["full_rebuild_cost"]
    # later runs' extraction estimate: the per-chunk cost of the largest extraction times the chunks now held
    per_chunk = e1["cost"] / e1["work_done"]
    assert e2["full_rebuild_cost"] == pytest.approx(max(e2["cost"], per_chunk * e2["work_total"]))
    assert e3["full_rebuild_cost"] == pytest.approx(max(e3["cost"], per_chunk * e3["work_total"]))
    assert noop["full_rebuild_tokens"] == sum(r["prompt_tokens"] + r["completion_tokens"] for r in IndexStore(index).read("llm_cache").to_pylist())
    # re-pricing: free CPU and tokens leave nothing to pay
    free = cost_history(IndexStore(index), CostConfig(cpu_hour=0, gpu_hour=0))
    assert all(h["cost"] == 0 for h in free)


def test_a_table_written_under_an_older_contract_gains_the_new_columns(tmp_path):
    store = IndexStore(tmp_path)
    old = pa.table({"run_id": ["r1"], "stage": ["chunk"], "wall_s": [1.0], "cpu_s": [0.5], "rows_in": pa.array([1], pa.int64()),
                    "rows_out": pa.array([2], pa.int64()), "details": ["{}"]})
    write_deltalake(store.path("stage_metrics"), old)
    rows = store.read("stage_metrics").to_pylist()
    assert rows[0]["cpu_s"] == 0.5 and rows[0]["gpu_s"] is None and rows[0]["cost"] is None
    new = store.read("stage_metrics").to_pylist()[0] | {"run_id": "r2", "gpu_s": 3.0, "work_unit": "documents", "work_done": 1}
    store.upsert("stage_metrics", pa.Table.from_pylist([new]))
    assert {r["run_id"]: r["gpu_s"] for r in store.read("stage_metrics").to_pylist()} == {"r1": None, "r2": 3.0}
    assert store.read("stage_metrics", version=0).column("gpu_s").null_count == 1  # the old version still reads


def test_cost_command_prints_history_json_and_a_plot(indexed_copy, tmp_path):
    run([indexed_copy.corpus], indexed_copy.index)  # a no-op second run
    plot = tmp_path / "cost.png"
    result = runner.invoke(app, ["cost", "--index", str(indexed_copy.index), "--json", "--plot", str(plot)])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert len(report["runs"]) == 2 and report["currency"] == "USD"
    assert {s["stage"] for s in report["runs"][0]["stages"]} >= {"ingest", "chunk", "extract", "resolve", "cluster", "report", "embed", "publish"}
    assert report["runs"][1]["saved_cost"] > 0
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = runner.invoke(app, ["cost", "--index", str(indexed_copy.index)])
    assert text.exit_code == 0 and "history" in text.output and "extract" in text.output


def test_plan_prints_the_resolved_stages(tmp_path):
    result = runner.invoke(app, ["plan", "--json", "--config", "pipelines/gpu-cluster.yaml"])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    stages = {s["stage"]: s for s in plan["stages"]}
    assert list(stages) == ["ingest", "chunk", "extract", "resolve", "cluster", "report", "embed", "publish"]
    assert "4 vLLM replicas x 1 GPU, started once per run" in stages["extract"]["resources"]
    assert "Ray Serve LLM application" in stages["extract"]["runs_on"]
    assert plan["executor"].startswith("ray: the Ray cluster at auto")
    bad = tmp_path / "bad.yaml"
    bad.write_text("extract:\n  engin: nlp\n")
    assert runner.invoke(app, ["plan", "--config", str(bad)]).exit_code == 2


def test_rebuild_recomputes_everything_and_keeps_published_versions(indexed_copy):
    before = indexed_copy.summary
    result = jobs.rebuild([str(indexed_copy.corpus)], str(indexed_copy.index), make_config())
    after = result["run"]
    assert after["chunks_extracted"] == after["chunks"] == before["chunks"]
    assert (after["entities"], after["relationships"]) == (before["entities"], before["relationships"])
    assert PublishedIndex(indexed_copy.store, before["version"]).read("entities").num_rows == before["entities"]
    assert result["cost"]["full_rebuild_cost"] == pytest.approx(result["cost"]["cost"])

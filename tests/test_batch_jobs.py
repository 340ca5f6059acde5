"""The nightly job with llm.engine openai-batch, against the loopback Batch API: one night's run
sends the batch and ends waiting (exit 3, its JSON line says so, nothing published); the next
night's collects it, publishes, and reports the batch's tokens at the batch price."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from _helpers import CONFIG_FILE, CORPUS
from fake_batch_api import FakeBatchAPI

from graphwright.storage.delta import IndexStore
from graphwright.storage.manifest import manifests

ROOT = Path(__file__).resolve().parents[1]
PRICE = {"prompt_per_million": 1.0, "completion_per_million": 2.0}


def _profile(path: Path, api, wait_s: float) -> Path:
    """The fast test profile with LLM extraction through the fake Batch API."""
    profile = yaml.safe_load(CONFIG_FILE.read_text())
    profile.update(extract={"engine": "llm"}, cost={"cpu_hour": 0.0, "gpu_hour": 0.0, "llm": {"fake-model": PRICE}},
                   llm={"engine": "openai-batch", "model": "fake-model", "base_url": api.base_url, "api_key_env": None,
                        "timeout_s": 10, "batch": {"wait_s": wait_s, "poll_s": 0.02}})
    path.write_text(yaml.safe_dump(profile))
    return path


def _nightly(corpus: Path, index: Path, config: Path) -> tuple[int, dict, str]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS" and not k.startswith("GRAPHWRIGHT_")}
    result = subprocess.run([sys.executable, "jobs/nightly.py", str(corpus), "--index", str(index), "--config", str(config)],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1, (result.stdout, result.stderr[-2000:])
    return result.returncode, json.loads(lines[0]), result.stderr


def test_a_nightly_job_sends_on_one_run_and_collects_and_publishes_on_the_next(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name in ("harbor.txt", "festival.md"):
        shutil.copy(CORPUS / name, corpus / name)
    index = tmp_path / "index"
    with FakeBatchAPI() as api:
        code, first, stderr = _nightly(corpus, index, _profile(tmp_path / "night1.yaml", api, wait_s=0))
        assert code == 3 and first["status"] == "waiting" and "waiting: extract: 9 LLM request(s) wait on 1 batch(es)" in stderr
        assert first["run"]["status"] == "waiting" and first["run"]["waiting"]["stage"] == "extract"
        (batch,) = first["run"]["waiting"]["batches"]
        assert first["cost"]["waiting_batches"]["batch_ids"] == [batch["batch_id"]] and first["cost"]["waiting_batches"]["requests"] == 9
        assert first["cost"]["waiting_batches"]["estimated_cost"] > 0 and first["cost"]["batch_tokens"] == 0
        assert manifests(IndexStore(index)) == [] and api.creates == 1

        api.complete_all()
        api.auto = "complete"
        code, second, stderr = _nightly(corpus, index, _profile(tmp_path / "night2.yaml", api, wait_s=30))
        assert code == 0 and second["status"] == "succeeded", stderr[-2000:]
        assert second["run"]["version"] == 1 and second["run"]["chunks_extracted"] == 9 and api.creates == 1
        assert second["cost"]["waiting_batches"]["batches"] == 0
    store = IndexStore(index)
    rows = [r for r in store.read("stage_metrics").to_pylist() if r["run_id"] == second["run"]["run_id"]]
    extract = next(r for r in rows if r["stage"] == "extract")
    collected = next(r for r in store.read("llm_batches").to_pylist() if r["state"] == "collected")
    assert (extract["batch_prompt_tokens"], extract["batch_completion_tokens"]) == (collected["prompt_tokens"], collected["completion_tokens"])
    price = (collected["prompt_tokens"] * PRICE["prompt_per_million"] + collected["completion_tokens"] * PRICE["completion_per_million"]) / 2e6
    assert extract["cost"] == pytest.approx(price) and second["cost"]["cost"] == pytest.approx(price)
    assert second["cost"]["batch_tokens"] == second["cost"]["tokens"] == collected["prompt_tokens"] + collected["completion_tokens"]


def test_a_job_that_ends_waiting_exits_as_told():
    sys.path.insert(0, str(ROOT / "jobs"))
    try:
        from _entry import run
    finally:
        sys.path.pop(0)
    waiting = {"status": "waiting", "run": {"waiting": {"message": "extract: 3 LLM request(s) wait on 1 batch(es)"}}}
    assert run(lambda: waiting) == 3 and run(lambda: waiting, 0) == 0 and run(lambda: {"status": "succeeded"}) == 0

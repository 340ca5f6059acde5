"""The real thing: the CLI in a subprocess with the default configuration (Ray executor,
sentence-transformers all-MiniLM-L6-v2). Run with `python -m pytest -m slow`."""

import json
import subprocess
import sys

import pytest
from _helpers import CORPUS

from graphwright import ids
from graphwright.storage.delta import IndexStore

pytestmark = pytest.mark.slow


def cli(*args, timeout=600):
    proc = subprocess.run([sys.executable, "-m", "graphwright.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-5000:]}"
    return json.loads(proc.stdout), proc.stderr


def test_cli_with_ray_and_sentence_transformers(tmp_path):
    index = tmp_path / "index"
    summary, log = cli("index", CORPUS, "--index", index, "--json")
    assert "executor=ray" in log and "all-MiniLM-L6-v2" in log
    assert summary["documents"] == 6 and summary["version"] == 1
    assert summary["chunks_extracted"] == summary["chunks"] > 0
    assert summary["entities"] > 10 and summary["communities"] > 0 and summary["reports"] > 0

    store = IndexStore(index)
    vectors = store.read("embeddings", columns=["model", "vector"]).to_pylist()
    assert {v["model"] for v in vectors} == {"all-MiniLM-L6-v2"}
    assert {len(v["vector"]) for v in vectors} == {384}

    result, _ = cli("query", "Who wrote a letter about the copper from Kestrel Island?", "--index", index, "--json", "-k", 3)
    evidence = result["evidence"]
    assert evidence and all({"doc_id", "chunk_id", "text", "score"} <= set(e) for e in evidence)
    assert evidence[0]["doc_id"] in {ids.doc_id("letter-1"), ids.doc_id("letter-2")}
    naive, _ = cli("query", "the Lantern Festival fireworks", "--index", index, "--mode", "naive", "--json", "-k", 2)
    assert naive["evidence"][0]["doc_id"] == ids.doc_id("festival.md")

    again, _ = cli("index", CORPUS, "--index", index, "--json")
    assert again["chunks_extracted"] == 0 and again["new_version"] is False and again["version"] == 1

"""The round trip of our exports through the reference engines' own packages (graphrag 3.3,
lightrag-hku 1.5.7, in their own venv: scripts/check-exports builds it), driven from here:
running their commands and scripts, and reading what they leave behind. Plain functions for
tests/test_export_roundtrip.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import networkx as nx
import pyarrow.parquet as pq

from graphwright.text.sentences import split_sentences

REPO = Path(__file__).resolve().parents[1]
REF_VENV = Path(os.environ.get("GRAPHWRIGHT_REF_VENV", REPO / ".venv-ref"))
REF_PYTHON = REF_VENV / "bin" / "python"
SEP = "<SEP>"


def reference_env() -> dict[str, str]:
    """The environment a user's shell would give the engines: none of the variables an export's
    .env sets (so the .env is what they read), offline tokenizers and price list."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GRAPHRAG_", "LLM_", "EMBEDDING_", "OPENAI_"))}
    tokenizers = next(REF_VENV.glob("lib/python3*/site-packages/litellm/litellm_core_utils/tokenizers"), None)
    if tokenizers is not None:
        env["TIKTOKEN_CACHE_DIR"] = str(tokenizers)
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    return env


def run(command: list[str], cwd: Path | None = None, timeout: int = 900) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in command], cwd=cwd, env=reference_env(), capture_output=True, text=True,
                          timeout=timeout, check=False)
    if proc.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, command))} exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return proc


def under_embeddings(index: Path, command: list) -> list:
    """`command` run under our embedding server for `index` (the one-command form)."""
    return [sys.executable, "-m", "graphwright.exports.embed_server", "--index", str(index), "--", *command]


def json_lines(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


# ------------------------------------------------------------------ graphrag

def graphrag_entities(root: Path) -> dict:
    """What a graphrag project's entities table says about duplicates and its conventions."""
    rows = pq.read_table(root / "output" / "entities.parquet").to_pylist()
    titles = Counter(r["title"] for r in rows)
    folded = Counter(r["title"].casefold() for r in rows)
    return {"entities": len(rows), "ids": {r["id"] for r in rows}, "by_title": {r["title"]: r for r in rows},
            "duplicate_titles": sorted(t for t, n in titles.items() if n > 1),
            "case_duplicates": sorted(t for t, n in folded.items() if n > 1),
            "frequency_mismatch": sum(r["frequency"] != len(r["text_unit_ids"]) for r in rows),
            "documents": pq.read_table(root / "output" / "documents.parquet").column("title").to_pylist()}


# ------------------------------------------------------------------ LightRAG

def _load(workdir: Path, name: str) -> dict:
    path = workdir / name
    return json.loads(path.read_text()) if path.exists() else {}


def lightrag_leftovers(workdir: Path, deleted_chunks: set[str], deleted_text: str) -> dict:
    """Everything in a LightRAG working directory that still cites `deleted_chunks`, and every
    description sentence found only in the deleted document's text."""
    kg = nx.read_graphml(workdir / "graph_chunk_entity_relation.graphml")
    remaining = [d["content"] for d in _load(workdir, "kv_store_full_docs.json").values()]

    def cites(source_id: str) -> bool:
        return bool(set(source_id.split(SEP)) & deleted_chunks)

    def stale(description: str) -> list[str]:
        sentences = [part[a:b].strip() for part in description.split(SEP) for a, b in split_sentences(part)]
        return [s for s in sentences if len(s) > 15 and s in deleted_text and not any(s in text for text in remaining)]

    out = {
        "nodes": kg.number_of_nodes(), "edges": kg.number_of_edges(),
        "nodes_citing": sorted(n for n, a in kg.nodes(data=True) if cites(a.get("source_id", ""))),
        "edges_citing": sorted(f"{s}~{t}" for s, t, a in kg.edges(data=True) if cites(a.get("source_id", ""))),
        "stale_descriptions": sorted({s for _, a in kg.nodes(data=True) for s in stale(a.get("description", ""))}
                                     | {s for _, _, a in kg.edges(data=True) for s in stale(a.get("description", ""))}),
        "chunk_lists_citing": sorted(k for name in ("kv_store_entity_chunks.json", "kv_store_relation_chunks.json")
                                     for k, v in _load(workdir, name).items() if set(v.get("chunk_ids", [])) & deleted_chunks),
        "vectors_citing": sorted(r["__id__"] for name in ("vdb_entities.json", "vdb_relationships.json")
                                 for r in _load(workdir, name).get("data", []) if cites(r.get("source_id", ""))),
        "chunks_left": sorted(set(_load(workdir, "kv_store_text_chunks.json")) & deleted_chunks),
        "types": sorted({a.get("entity_type", "") for _, a in kg.nodes(data=True)}),
    }
    out["clean"] = not any(out[k] for k in ("nodes_citing", "edges_citing", "stale_descriptions", "chunk_lists_citing",
                                            "vectors_citing", "chunks_left"))
    return out


def lightrag_names(workdir: Path) -> tuple[set[str], set[tuple[str, str]], set[str]]:
    """(entity names, relationship pairs, chunk ids) of a LightRAG working directory."""
    kg = nx.read_graphml(workdir / "graph_chunk_entity_relation.graphml")
    return set(kg.nodes), {tuple(sorted(e)) for e in kg.edges}, set(_load(workdir, "kv_store_text_chunks.json"))

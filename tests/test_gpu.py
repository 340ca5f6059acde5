"""GPU checks (marked `gpu`; run by scripts/gpu-check on a machine with an NVIDIA GPU and a local
model directory in GRAPHWRIGHT_GPU_MODEL). Never run by the default suite or CI. The cuGraph and
cuVS checks compare the GPU engines with the CPU ones through the same interfaces."""

from __future__ import annotations

import os
import time

import pytest

pytestmark = pytest.mark.gpu

MODEL = os.environ.get("GRAPHWRIGHT_GPU_MODEL")


@pytest.fixture(scope="module")
def prompts():
    from _helpers import CORPUS

    from graphwright.stages.chunk import chunk_text

    text = " ".join(p.read_text() for p in sorted(CORPUS.rglob("*.txt")))
    return [c["text"] for c in chunk_text("gpu", text * 8, 254, 32)][:64]


@pytest.mark.skipif(not MODEL, reason="GRAPHWRIGHT_GPU_MODEL is not set")
def test_vllm_extraction_throughput_against_bare_vllm(prompts):
    """The run's Ray Serve LLM application (started once, timed apart) against bare vLLM on the
    same prompts."""
    import ray
    from vllm import LLM, SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    from graphwright.config import LLMConfig
    from graphwright.engines.llm.session import LLMSession
    from graphwright.stages.extract.parse import parse_extraction
    from graphwright.stages.extract.prompts import EXTRACTION_SCHEMA, system_prompt
    from graphwright.stages.extract.requests import extraction_request

    system = system_prompt(["PERSON", "ORGANIZATION", "GEO", "EVENT", "CONCEPT"])
    config = LLMConfig(engine="vllm", model=MODEL, replicas=1, batch_size=64, max_tokens=512, max_model_len=4096, concurrency=64)
    requests = [extraction_request(system, (("user", p),), config) for p in prompts]

    session = LLMSession(config, name="graphwright-gpu-check")
    engine = session.engine()
    started = time.perf_counter()
    responses = engine.complete(requests)
    ours = time.perf_counter() - started
    session.close()
    ray.shutdown()
    ok = [r for r in responses if r.ok]
    assert len(ok) >= 0.9 * len(requests)
    parsed = sum(1 for r in ok if parse_extraction(r.text, ["PERSON", "ORGANIZATION", "GEO", "EVENT", "CONCEPT"]))
    ours_tokens = sum(r.completion_tokens for r in ok)

    llm = LLM(model=MODEL, max_model_len=4096, enable_prefix_caching=True)
    params = SamplingParams(temperature=0.0, max_tokens=512, structured_outputs=StructuredOutputsParams(json=EXTRACTION_SCHEMA))
    messages = [[{"role": r, "content": c} for r, c in req.messages] for req in requests]
    started = time.perf_counter()
    outputs = llm.chat(messages, params)
    bare = time.perf_counter() - started
    bare_tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
    print(f"\ngraphwright vllm engine: start-up {session.startup_s:.1f} s, then {ours_tokens / ours:.0f} output tok/s "
          f"({len(ok)} answers, {parsed} parsed, {ours:.1f} s)")
    print(f"bare vLLM LLM.chat:      {bare_tokens / bare:.0f} output tok/s ({bare:.1f} s, engine already loaded)")
    print(f"throughput ratio graphwright / bare vLLM: {(ours_tokens / ours) / (bare_tokens / bare):.2f}")


@pytest.mark.skipif(not MODEL, reason="GRAPHWRIGHT_GPU_MODEL is not set")
def test_vllm_replicas_start_once_per_run(tmp_path):
    """A run that extracts several commits' worth of chunks with vLLM and then writes LLM reports
    starts its Serve replicas once: Ray's state API lists every replica actor the run created."""
    import ray
    from _helpers import CORPUS, make_config, run
    from ray.util.state import list_actors

    cfg = make_config(extract={"engine": "llm", "batch_size": 4},
                      llm={"engine": "vllm", "model": MODEL, "replicas": 1, "max_model_len": 4096, "max_tokens": 512},
                      report={"mode": "llm"}, execution={"executor": "local", "commit_every": 4})
    summary = run([CORPUS], tmp_path / "index", cfg)
    assert summary["chunks_extracted"] >= 3 * cfg.execution.commit_every and summary["recomputed"]["reports_built"] > 0
    app = f"graphwright-{summary['run_id']}"
    replicas = [a for a in list_actors(detail=True, limit=10_000) if f"ServeReplica:{app}:" in (a.class_name or "")]
    print(f"\n{len(replicas)} replica actor(s) of {app} for {summary['chunks_extracted']} chunks and "
          f"{summary['recomputed']['reports_built']} reports")
    ray.shutdown()
    assert len(replicas) == cfg.llm.replicas


def test_cugraph_hierarchy_against_igraph():
    pytest.importorskip("pylibcugraph")
    import numpy as np
    from test_cluster import check_hierarchy, planted_partition

    from graphwright.config import ClusterConfig
    from graphwright.engines.graph.cugraph_engine import CugraphEngine
    from graphwright.engines.graph.graphs import modularity
    from graphwright.engines.graph.igraph_engine import IgraphEngine
    from graphwright.stages.cluster.hierarchy import hierarchical_leiden

    n, edges, weights, planted = planted_partition([120] * 8 + [40] * 10, 0.15, 0.004, seed=9)
    cfg = ClusterConfig(engine="cugraph", max_cluster_size=30)
    engine = CugraphEngine(gpu_min_edges=1)  # every split on the GPU
    communities = hierarchical_leiden(n, edges, weights, cfg, engine)
    check_hierarchy(n, communities, 30, edges, engine, cfg)
    assert max(c.level for c in communities) >= 1

    def top(result):
        labels = np.empty(n, dtype=np.int64)
        for k, c in enumerate(c for c in result if c.level == 0):
            labels[c.members] = k
        return labels

    cpu = hierarchical_leiden(n, edges, weights, ClusterConfig(max_cluster_size=30), IgraphEngine())
    gpu_q, cpu_q = modularity(n, edges, weights, top(communities)), modularity(n, edges, weights, top(cpu))
    print(f"\ntop-level modularity: cugraph {gpu_q:.4f}, igraph {cpu_q:.4f}, planted {modularity(n, edges, weights, planted):.4f}")
    assert gpu_q >= cpu_q - 0.02


def test_cuvs_index_against_faiss(tmp_path):
    pytest.importorskip("cuvs")
    import numpy as np

    from graphwright.config import VectorConfig
    from graphwright.engines.vectors import build_index, load_index, save_index

    rng = np.random.default_rng(3)
    centers = rng.normal(size=(50, 64))
    data = centers[rng.integers(0, 50, 20_000)] + 0.3 * rng.normal(size=(20_000, 64))
    data = (data / np.linalg.norm(data, axis=1, keepdims=True)).astype(np.float32)
    queries = data[:200]
    ids = [f"v{i}" for i in range(len(data))]
    exact = build_index(ids, data, VectorConfig(engine="faiss", hnsw_threshold=10**9)).search(queries, 10)

    def recall(hits):
        return np.mean([len({h for h, _ in a} & {h for h, _ in b}) / 10 for a, b in zip(hits, exact)])

    brute = build_index(ids, data, VectorConfig(engine="cuvs", hnsw_threshold=10**9))
    assert brute.index.kind == "brute_force"
    hits = brute.search(queries, 10)
    assert recall(hits) >= 0.99
    assert np.allclose([s for row in hits for _, s in row], [s for row in exact for _, s in row], atol=1e-3)
    cagra = build_index(ids, data, VectorConfig(engine="cuvs", hnsw_threshold=1000))
    assert cagra.index.kind == "cagra"
    assert recall(cagra.search(queries, 10)) >= 0.9
    save_index(cagra, tmp_path / "v.index")
    loaded = load_index(tmp_path / "v.index")
    assert loaded.index.kind == "cagra"
    assert [[h for h, _ in row] for row in loaded.search(queries, 10)] == [[h for h, _ in row] for row in cagra.search(queries, 10)]

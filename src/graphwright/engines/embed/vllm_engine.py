"""vLLM's embedding task on GPU replicas (the [gpu] extra), through Ray Data's LLM processor."""

from __future__ import annotations

import numpy as np

from graphwright.config import EmbedConfig


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

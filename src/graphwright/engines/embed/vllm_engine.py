"""vLLM's embedding task on GPU replicas (the [gpu] extra), through Ray Data's LLM processor.

A processor builds its own actor pool, and so its own vLLM engines, every time it runs: the embed
stage therefore runs it once over everything it embeds (`stream`), never once per batch. `encode`
(one execution per call) is for a query's few texts."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from graphwright.config import EmbedConfig


class VLLMEmbedder:
    """vLLM's embedding task on GPU replicas through Ray Data's LLM processor (task_type="embed")."""

    def __init__(self, config: EmbedConfig):
        from ray.data.llm import build_processor, vLLMEngineProcessorConfig

        self.name = config.model
        self.replicas = config.concurrency
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

    def stream(self, texts: pa.Array, batch_rows: int, staging=None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(positions into `texts`, their normalized vectors) for every text, batch by batch as
        the replicas finish them, from one execution of the processor: its engines start once.
        With `staging` (pipeline.staging.Staging) the texts reach the replicas through files
        staged in the index, not through the driver's own puts into the object store, whose pages
        would stay in the driver's resident set."""
        import ray.data

        from graphwright.pipeline.executors import rows_per_block
        from graphwright.pipeline.staging import PART_COLUMN, read_staged

        if not len(texts):
            return
        table = pa.table({"index": pa.array(np.arange(len(texts), dtype=np.int64)), "text": texts})
        size = rows_per_block(table.num_rows, batch_rows, self.replicas)
        blocks = [table.slice(o, size) for o in range(0, table.num_rows, size)]
        folder = None
        if staging is None:
            ds = ray.data.from_arrow(blocks)
        else:
            folder, parts = staging.write("embed-vllm", blocks)
            ds = ray.data.from_items([{PART_COLUMN: p} for p in parts], override_num_blocks=len(parts)).map_batches(
                read_staged, fn_kwargs={"root": staging.root}, batch_size=1, batch_format="pyarrow")
        del table, blocks
        try:
            for batch in self.processor(ds).iter_batches(batch_size=batch_rows, batch_format="pyarrow"):
                vectors = np.vstack([np.asarray(v, dtype=np.float32) for v in batch.column("embeddings").to_pylist()])
                norms = np.linalg.norm(vectors, axis=1, keepdims=True)
                yield batch.column("index").to_numpy(), vectors / np.where(norms == 0, 1, norms)
        finally:  # also when the consumer stops early or the stage fails
            if folder is not None:
                staging.remove(folder)

"""A stand-in for Ray Data LLM's vLLM engine stage UDF in the embed task: same constructor
arguments, deterministic hashed vectors, and one line appended to $GRAPHWRIGHT_STANDIN_LOG per
construction (where vLLM would start an engine). Pickled by value into the Ray workers."""

from __future__ import annotations

import asyncio
import hashlib
import os

from ray.llm._internal.batch.stages.base import StatefulStageUDF


class FakeEmbedUDF(StatefulStageUDF):
    def __init__(self, data_column, expected_input_keys, batch_size, max_concurrent_batches, model, engine_kwargs,
                 task_type="embed", max_pending_requests=None, dynamic_lora_loading_path=None,
                 should_continue_on_error=False, log_engine_metrics=True):
        super().__init__(data_column, expected_input_keys)
        with open(os.environ["GRAPHWRIGHT_STANDIN_LOG"], "a") as f:
            f.write(f"{os.getpid()}\n")

    async def udf(self, batch):
        for row in batch:
            await asyncio.sleep(0)
            digest = hashlib.sha256(row["prompt"].encode()).digest()
            yield {self.IDX_IN_BATCH_COLUMN: row[self.IDX_IN_BATCH_COLUMN], "__inference_error__": "",
                   "embeddings": [b / 255 for b in digest[:16]]}

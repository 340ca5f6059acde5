"""A stand-in for Ray Data LLM's vLLM engine stage (vLLMEngineStageUDF), for counting engine
starts on a CPU: same constructor arguments, answers graphwright's prompts with
graphwright.engines.llm.standin, and appends a line to $GRAPHWRIGHT_STANDIN_LOG each time it is
constructed (where the real one would load a model and capture CUDA graphs)."""

from __future__ import annotations

import asyncio
import os

from ray.llm._internal.batch.stages.base import StatefulStageUDF


class FakeVLLMEngineUDF(StatefulStageUDF):
    def __init__(self, data_column, expected_input_keys, batch_size, max_concurrent_batches, model, engine_kwargs,
                 task_type="generate", max_pending_requests=None, dynamic_lora_loading_path=None,
                 should_continue_on_error=False, log_engine_metrics=True):
        super().__init__(data_column, expected_input_keys)
        log = os.environ.get("GRAPHWRIGHT_STANDIN_LOG")
        if log:
            with open(log, "a") as f:
                f.write(f"{os.getpid()}\n")

    async def udf(self, batch):
        from graphwright.engines.llm import standin

        for row in batch:
            await asyncio.sleep(0)
            messages = [dict(m) for m in row["messages"]]
            text = standin.answer(messages)
            yield {self.IDX_IN_BATCH_COLUMN: row[self.IDX_IN_BATCH_COLUMN], "__inference_error__": "",
                   "generated_text": text, "num_input_tokens": sum(len(m["content"]) for m in messages) // 4,
                   "num_generated_tokens": len(text) // 4}

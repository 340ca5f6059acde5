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
        for row in batch:
            await asyncio.sleep(0)
            messages = [dict(m) for m in row["messages"]]
            text = answer(messages)
            yield {self.IDX_IN_BATCH_COLUMN: row[self.IDX_IN_BATCH_COLUMN], "__inference_error__": "",
                   "generated_text": text, "num_input_tokens": sum(len(m["content"]) for m in messages) // 4,
                   "num_generated_tokens": len(text) // 4}


def answer(messages: list[dict]) -> str:
    """graphwright's prompts answered as graphwright.engines.llm.standin does, importable from a
    checkout of any layout."""
    import json

    try:
        from graphwright.engines.llm.standin import answer as standin_answer

        return standin_answer(messages)
    except ImportError:  # a checkout from before the package layout
        pass
    from graphwright.config import ExtractConfig
    from graphwright.extract.nlp import extract_chunk

    users = [m["content"] for m in messages if m["role"] == "user"]
    if messages[0]["content"].startswith("You write a report about one community"):
        rows = [line.split("|") for line in users[0].splitlines() if line[:1].isdigit()]
        first = rows[0][1] if rows and len(rows[0]) > 1 else "nothing"
        return json.dumps({"title": f"Report on {first}", "summary": f"{len(rows)} rows.", "rating": 5,
                           "rating_explanation": "stand-in", "findings": []})
    if len(users) > 1:
        return json.dumps({"entities": [], "relationships": []})
    mentions, assertions = extract_chunk(users[0], ExtractConfig())
    return json.dumps({
        "entities": [{"name": m["name"], "type": m["type"] if m["type"] != "ENTITY" else "CONCEPT", "description": m["description"]}
                     for m in mentions],
        "relationships": [{"source": a["source"], "target": a["target"], "description": a["description"] or "co-occur",
                           "strength": min(10, a["weight"] * 2)} for a in assertions]})

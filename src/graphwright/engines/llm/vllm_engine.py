"""The `vllm` engine: vLLM replicas on GPU workers through Ray Data's LLM processor
(`ray.data.llm.vLLMEngineProcessorConfig` + `build_processor`, Ray 2.60). Ray schedules one
replica per `llm.replicas` (each on `tensor_parallel_size` GPUs), batches requests, restarts
failed actors and, with should_continue_on_error, returns a per-row error instead of failing.

A call to `complete` runs one Ray Data job over the requests; the extraction stage calls it from
the driver with many chunks at a time. JSON-schema output uses Ray 2.60's
`sampling_params={"structured_outputs": {"json": schema}}` (the older guided_decoding key is
ignored there). Needs a GPU cluster and the [gpu] extra; this module only imports ray.data.llm.
"""

from __future__ import annotations

import time

from graphwright.engines.llm.interface import LLMRequest, LLMResponse


def processor_config(config):
    from ray.data.llm import vLLMEngineProcessorConfig

    engine_kwargs = {
        "tensor_parallel_size": config.tensor_parallel_size,
        "enable_prefix_caching": True,  # the fixed part of every extraction prompt comes first
    }
    if config.max_model_len:
        engine_kwargs["max_model_len"] = config.max_model_len
    return vLLMEngineProcessorConfig(
        model_source=config.model,
        engine_kwargs=engine_kwargs,
        concurrency=(config.replicas, config.replicas),
        batch_size=config.batch_size,
        should_continue_on_error=True,
    )


def request_row(index: int, request: LLMRequest) -> dict:
    sampling = {"temperature": request.temperature, "max_tokens": request.max_tokens}
    if request.json_schema is not None:
        sampling["structured_outputs"] = {"json": request.json_schema}
    return {"request_index": index, "messages": [{"role": r, "content": c} for r, c in request.messages], "sampling_params": sampling}


def _postprocess(row: dict) -> dict:
    return {
        "request_index": row["request_index"],
        "generated_text": row.get("generated_text"),
        "num_input_tokens": int(row.get("num_input_tokens") or 0),
        "num_generated_tokens": int(row.get("num_generated_tokens") or 0),
        "error": str(row["__inference_error__"]) if row.get("__inference_error__") else None,
    }


class VLLMEngine:
    def __init__(self, config):
        from ray.data.llm import build_processor

        self.config = config
        self.model = config.model
        self.processor = build_processor(processor_config(config), preprocess=lambda row: row, postprocess=_postprocess)

    @property
    def name(self) -> str:
        return f"vllm:{self.model}"

    def complete(self, requests: list[LLMRequest]) -> list[LLMResponse]:
        import ray.data

        if not requests:
            return []
        started = time.perf_counter()
        ds = ray.data.from_items([request_row(i, r) for i, r in enumerate(requests)])
        rows = {r["request_index"]: r for r in self.processor(ds).take_all()}
        elapsed = (time.perf_counter() - started) / len(requests)
        out = []
        for i in range(len(requests)):
            row = rows.get(i)
            if row is None:
                out.append(LLMResponse(text=None, error="no result returned for this request"))
                continue
            out.append(LLMResponse(text=row["generated_text"], prompt_tokens=row["num_input_tokens"],
                                   completion_tokens=row["num_generated_tokens"], latency_s=elapsed, error=row["error"]))
        return out

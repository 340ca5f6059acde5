"""LLM engines behind one interface, used by extraction (and later summarization, reports and
answers). An engine takes a list of requests and returns one response per request, never
raising for a single request's failure: the response carries the error instead.

Engines are chosen by `llm.engine` and imported only when chosen:
- `openai`: any OpenAI-compatible chat-completions endpoint (vLLM server, llama.cpp server,
  hosted APIs), with bounded concurrency, a request rate limit, timeouts and retries.
- `llamacpp`: a small GGUF model in-process on the CPU (llamacpp_engine).
- `vllm`: vLLM replicas on GPUs through Ray Data's LLM processor (vllm_engine).
"""

from __future__ import annotations

from graphwright.engines.llm.interface import LLMRequest, LLMResponse

__all__ = ["LLMRequest", "LLMResponse", "make_llm"]


def make_llm(config):
    if config.engine == "openai":
        from graphwright.engines.llm.openai_engine import OpenAIEngine

        return OpenAIEngine(config)
    if config.engine == "llamacpp":
        from graphwright.engines.llm.llamacpp_engine import LlamaCppEngine

        return LlamaCppEngine(config)
    if config.engine == "vllm":
        try:
            from graphwright.engines.llm.vllm_engine import VLLMEngine
        except ImportError as exc:
            raise ImportError(f"the vllm engine needs ray[llm] and the GPU extra (pip install 'graphwright[gpu]'): {exc}") from exc
        return VLLMEngine(config)
    raise ValueError(f"unknown LLM engine {config.engine!r}")

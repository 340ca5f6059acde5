"""LLM engines behind one interface (interface.py): a list of requests in, one response per
request out, never raising for a single request's failure (the response carries the error).
Every stage reaches its engine through the run's LLM session (session.py), which starts it once,
and through the index's cache (cache.py).

Engines are chosen by `llm.engine` and imported only when chosen:
- `openai`: any OpenAI-compatible chat-completions endpoint (a vLLM server, llama.cpp's server,
  hosted APIs), with bounded concurrency, a request rate limit, timeouts and retries.
- `llamacpp`: a small GGUF model in-process on the CPU (llamacpp_engine).
- `vllm`: vLLM replicas on GPUs behind one Ray Serve LLM application per run (vllm_engine),
  reached with the `openai` client.
- `openai-batch`: an index run's requests go out as batch request files (batch/): the OpenAI
  Batch API, or files for `vllm run-batch`. A run's session makes that engine; everywhere else
  (queries) the same endpoint is called synchronously, as `openai`.
"""

from __future__ import annotations

from graphwright.engines.llm.interface import LLMRequest, LLMResponse

__all__ = ["LLMRequest", "LLMResponse", "make_llm"]


def make_llm(config):
    if config.engine in ("openai", "openai-batch"):
        from graphwright.engines.llm.openai_engine import OpenAIEngine

        return OpenAIEngine(config)
    if config.engine == "llamacpp":
        from graphwright.engines.llm.llamacpp_engine import LlamaCppEngine

        return LlamaCppEngine(config)
    if config.engine == "vllm":
        raise ValueError("llm.engine vllm runs as a Ray Serve application that an LLM session starts once "
                         "(graphwright.engines.llm.session.LLMSession); it has no per-call engine")
    raise ValueError(f"unknown LLM engine {config.engine!r}")

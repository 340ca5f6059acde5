"""LLM replies are data, not trusted code paths: any reply shape or size gives a bounded,
validated extraction or a named failure, never an exception that kills the run."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graphwright.config import ExtractConfig
from graphwright.engines.llm.openai_engine import chat_response
from graphwright.stages.extract.extractors import extractor_key
from graphwright.stages.extract.parse import ParseError, loads_lenient, parse_extraction

TYPES = ExtractConfig().entity_types
CHUNK = "Mara Voss met Tobias Reed in Port Elling. The Harbor Council thanked Mara Voss."
BOUNDS = ExtractConfig()


def extract(reply):
    notes: dict = {}
    return (*parse_extraction(reply, TYPES, CHUNK, BOUNDS, notes), notes)


def entity(name, **kw):
    return {"name": name, "type": "PERSON", "description": "d", **kw}


@pytest.mark.parametrize("content", [7, {"entities": []}, ["a"], None, True, 3.5])
def test_a_reply_that_is_not_text_is_a_named_failure(content):
    with pytest.raises(ParseError, match="not text|empty"):
        loads_lenient(content)


def test_a_reply_nested_past_the_decoders_depth_is_a_named_failure():
    with pytest.raises(ParseError, match="nested too deeply"):
        loads_lenient("[" * 100_000 + "]" * 100_000)


@pytest.mark.parametrize("reply, reason", [
    (json.dumps({"entities": [entity("Mara Voss")] * 101, "relationships": []}), "max_entities_per_chunk"),
    (json.dumps({"entities": [entity("Mara Voss"), entity("Tobias Reed")],
                 "relationships": [{"source": "Mara Voss", "target": "Tobias Reed"}] * 201}), "max_relationships_per_chunk"),
    (json.dumps({"entities": [entity("Mara Voss", description="x" * 3000)]}), "max_description_chars"),
    (json.dumps({"entities": [entity("Mara Voss")], "pad": "y" * 200_000}), "max_reply_chars"),
    (json.dumps({"entities": [entity(str(n)) for n in range(10)] + [entity("Mara Voss")]}), "max_dropped_fraction"),
    (json.dumps({"entities": [entity(f"Invented {n}") for n in range(5)]}), "max_dropped_fraction"),
    (json.dumps({"entities": {"Mara Voss": {}}, "relationships": []}), "must be lists"),
])
def test_replies_over_a_bound_fail_with_the_bound_named(reply, reason):
    with pytest.raises(ParseError, match=reason):
        extract(reply)


def test_names_that_are_not_names_or_not_in_the_chunk_are_dropped_and_counted():
    reply = json.dumps({"entities": [entity("Mara Voss"), entity("Tobias Reed"), entity("Port Elling"), entity("000"),
                                     entity({"no": "dict"}), entity("Someone Else")],
                        "relationships": [{"source": "Mara Voss", "target": "Someone Else", "strength": float("nan")},
                                          {"source": "Mara Voss", "target": "Tobias Reed", "strength": "NaN"},
                                          {"source": "--", "target": "Tobias Reed"}]})
    entities, relationships, notes = extract(reply)
    assert sorted(e["name"] for e in entities) == ["Mara Voss", "Port Elling", "Tobias Reed"]
    assert relationships == [{"source": "Mara Voss", "target": "Tobias Reed", "description": "", "weight": 1.0}]
    assert notes == {"not_a_name": 2, "not_in_chunk": 1, "not_an_entity": 1, "not_text": 1, "strength_out_of_range": 2}


def test_lone_surrogates_in_a_reply_become_replacement_characters():
    entities, _, _ = extract('{"entities": [{"name": "Mara Voss", "type": "PERSON", "description": "a \\ud800 b"}]}')
    assert entities[0]["description"] == "a \ufffd b"
    entities[0]["description"].encode("utf-8")  # writable


@pytest.mark.parametrize("body, reason", [
    ({"choices": [{"message": {"content": None}, "finish_reason": "content_filter"}]}, "no message content"),
    ({"choices": [{"message": {"content": 12}}]}, "content is int"),
    ({"choices": [{"message": {"content": {"entities": []}}}]}, "content is dict"),
    ({"choices": []}, "no choices"),
    ({"choices": "x"}, "no choices"),
    ([1, 2], "no choices"),
    ("text", "no choices"),
])
def test_chat_replies_of_the_wrong_shape_name_what_is_wrong(body, reason):
    with pytest.raises(ValueError, match=reason):
        chat_response(body)


def test_usage_of_any_shape_counts_zero_rather_than_failing():
    for usage in ([1, 2], "lots", {"prompt_tokens": "9"}, {"prompt_tokens": -3, "completion_tokens": 1e30}, None):
        response = chat_response({"choices": [{"message": {"content": "{}"}}], "usage": usage})
        assert response.text == "{}" and response.prompt_tokens == 0


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.sampled_from(["entities", "relationships", "name", "type",
                                                                                   "description", "source", "target",
                                                                                   "strength", "x"]), inner, max_size=6),
    max_leaves=40)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_any_json_reply_gives_an_extraction_or_a_parse_error(value):
    try:
        entities, relationships, _ = extract(json.dumps(value))
    except ParseError:
        return
    for e in entities:
        assert isinstance(e["name"], str) and e["name"].casefold() in CHUNK.casefold()
        assert len(e["description"]) <= BOUNDS.max_description_chars
    names = {e["name"] for e in entities}
    assert all(r["source"] in names and r["target"] in names and 0 <= r["weight"] <= 10 for r in relationships)


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_any_chat_body_gives_a_response_or_a_value_error(value):
    try:
        chat_response(value)
    except ValueError:
        pass


def test_the_extractor_key_changes_with_the_reply_bounds():
    from graphwright.config import LLMConfig

    llm = LLMConfig(model="m")
    assert extractor_key(ExtractConfig(engine="llm"), llm) != extractor_key(ExtractConfig(engine="llm", max_entities_per_chunk=50), llm)


def test_a_repaired_reply_is_used_then_asked_once_more_and_the_second_is_trusted(tmp_path):
    import shutil

    from _helpers import CORPUS, make_config, run
    from fake_openai import FakeOpenAI

    from graphwright.storage.delta import IndexStore

    shutil.copytree(CORPUS, tmp_path / "corpus")
    with FakeOpenAI() as server:
        cfg = make_config(extract={"engine": "llm"},
                          llm={"engine": "openai", "model": "fake-model", "base_url": server.base_url, "api_key_env": None,
                               "backoff_s": 0.01, "max_backoff_s": 0.05})
        server.fault("Tobias Reed", "invent")  # the first chunk naming him gets an invented entity added
        run([tmp_path / "corpus"], tmp_path / "index", cfg)
        store = IndexStore(tmp_path / "index")
        partial = store.read("extractions", where="status = 'partial'").to_pylist()
        assert len(partial) == 1 and json.loads(partial[0]["notes"]) == {"not_in_chunk": 1}
        assert "Zorblax Quux" not in {e["name"] for e in store.read("entities").to_pylist()}  # never in the graph
        asked = len(server.requests)
        server.fault("Tobias Reed", "invent")  # the second reply needs repairs too: it is trusted as it is
        run([tmp_path / "corpus"], tmp_path / "index", cfg)  # that chunk is asked once more, the rest come from nowhere
        extraction_asks = [r for r in server.requests[asked:] if r["messages"][0]["content"].startswith("You extract")]
        assert len(extraction_asks) == 1
        assert store.count("extractions", where="status = 'partial'") == 0
        asked = len(server.requests)
        run([tmp_path / "corpus"], tmp_path / "index", cfg)
        assert len(server.requests) == asked  # trusted now, answered from the cache


def test_a_cut_off_reply_is_read_but_counted_as_truncated():
    entities, _, notes = extract('{"entities": [{"name": "Mara Voss", "type": "PERSON"}, {"name": "Tobias Reed", "ty')
    assert [e["name"] for e in entities] == ["Mara Voss", "Tobias Reed"] and notes == {"truncated": 1}
    _, _, clean = extract('Here:\n```json\n{"entities": [{"name": "Mara Voss", "type": "PERSON",},],}\n```')
    assert clean == {}  # fences, prose and trailing commas lose nothing

"""The openai-compatible engine and LLM extraction, against a fake server on loopback."""

from __future__ import annotations

import shutil

import pytest
from _helpers import CORPUS, DATA, make_config, run
from fake_openai import FakeOpenAI

from graphwright.config import LLMConfig
from graphwright.engines.llm.interface import LLMRequest
from graphwright.engines.llm.openai_engine import OpenAIEngine
from graphwright.pipeline.errors import TooManyFailures
from graphwright.stages.extract.parse import ParseError, loads_lenient, parse_extraction
from graphwright.storage.delta import IndexStore

FAST = dict(backoff_s=0.01, max_backoff_s=0.05, timeout_s=5)


@pytest.fixture
def server():
    with FakeOpenAI() as fake:
        yield fake


def engine(server, **kw) -> OpenAIEngine:
    return OpenAIEngine(LLMConfig(model="fake-model", base_url=server.base_url, api_key_env=None, **{**FAST, **kw}))


def request(text: str) -> LLMRequest:
    return LLMRequest(messages=(("system", "extract"), ("user", text)), json_schema={"type": "object"})


def test_engine_answers_with_tokens(server):
    resp = engine(server).complete([request("Mara Voss met Tobias Reed in Port Elling.")])[0]
    assert resp.ok and resp.attempts == 1
    assert "Mara Voss" in resp.text and resp.prompt_tokens > 0 and resp.completion_tokens > 0


@pytest.mark.parametrize("fault", ["503", "drop", "badbody"])
def test_engine_retries_transient_failures(server, fault):
    server.fault("Voss", fault, fault)
    resp = engine(server).complete([request("Mara Voss sailed.")])[0]
    assert resp.ok and resp.attempts == 3


def test_engine_gives_up_with_the_reason_and_does_not_raise(server):
    server.fault("Voss", "always:503")
    resp = engine(server, max_attempts=3).complete([request("Mara Voss sailed.")])[0]
    assert not resp.ok and resp.attempts == 3 and "HTTP 503" in resp.error


def test_engine_does_not_retry_client_errors(server):
    server.fault("Voss", "400")
    resp = engine(server).complete([request("Mara Voss sailed.")])[0]
    assert not resp.ok and resp.attempts == 1 and "HTTP 400" in resp.error


def test_response_format_per_backend(server):
    for fmt, expected in (("json_schema", "json_schema"), ("json_object", "json_object"), ("none", None)):
        engine(server, response_format=fmt).complete([request("Ada Byron.")])
        got = server.requests[-1].get("response_format")
        assert (got or {}).get("type") == expected
        if fmt == "json_object":
            assert got["schema"] == {"type": "object"}  # llama.cpp takes the schema here


def test_concurrent_requests_keep_their_order(server):
    texts = [f"Person Number{i} met Other Person{i}." for i in range(12)]
    out = engine(server, concurrency=4).complete([request(t) for t in texts])
    assert [f"Number{i}" in r.text for i, r in enumerate(out)] == [True] * 12


def test_lenient_parsing_repairs_only_what_the_decoder_refuses(monkeypatch):
    """A well-formed answer (nearly every one) is decoded as it is: the character-by-character
    scan for a cut-off tail runs only after the decoder refused the answer and its commas
    mended, and only an answer whose tail it closed counts as truncated."""
    from graphwright.stages.extract import parse

    scanned = []
    real = parse._close_truncated
    monkeypatch.setattr(parse, "_close_truncated", lambda text: scanned.append(text) or real(text))
    notes: dict = {}
    assert loads_lenient('Sure. {"entities": [{"name": "A"}], "relationships": []} Hope this helps', notes) == {
        "entities": [{"name": "A"}], "relationships": []}
    assert loads_lenient('{"a": [1, 2,],}', notes) == {"a": [1, 2]}
    assert scanned == [] and notes == {}
    assert loads_lenient("{'a': 'b'}", notes) == {"a": "b"}  # quotes mended: not a cut-off answer
    assert len(scanned) == 1 and notes == {}
    assert loads_lenient('{"entities": [{"name": "A"}, {"na', notes) == {"entities": [{"name": "A"}]}
    assert len(scanned) == 2 and notes == {"truncated": 1}


def test_lenient_parsing_repairs_usual_defects():
    assert loads_lenient('Here you go:\n```json\n{"a": [1, 2,],}\n```') == {"a": [1, 2]}
    # a cut-off answer keeps its complete fields; parse_extraction then fills what is missing
    assert loads_lenient('{"entities": [{"name": "A"}, {"name": "B", "ty') == {"entities": [{"name": "A"}, {"name": "B"}]}
    assert loads_lenient('{"entities": [{"name": "A"}, {"na') == {"entities": [{"name": "A"}]}
    with pytest.raises(ParseError):
        loads_lenient("I cannot help with that.")
    entities, rels = parse_extraction(
        '{"entities": [{"name": "Ada", "type": "person", "description": "x"}],'
        ' "relationships": [{"source": "Ada", "target": "Babbage", "description": "worked with", "strength": "12"}]}',
        ["PERSON"],
    )
    assert {e["name"]: e["type"] for e in entities} == {"Ada": "PERSON", "Babbage": "ENTITY"}
    assert rels[0]["weight"] == 10.0  # clamped


def llm_config(server, **extract):
    return make_config(extract={"engine": "llm", "batch_size": 4, **extract},
                       llm={"model": "fake-model", "base_url": server.base_url, "api_key_env": None, **FAST})


def test_pipeline_with_llm_extraction_and_cache(server, tmp_path):
    corpus = tmp_path / "corpus"
    shutil.copytree(CORPUS, corpus)
    index = tmp_path / "index"
    first = run([corpus], index, llm_config(server))
    n_chunks = first["chunks"]
    assert first["llm"]["calls"] == n_chunks and first["llm"]["cache_hits"] == 0
    assert first["llm"]["prompt_tokens"] > 0 and first["entities"] > 0
    store = IndexStore(index)
    assert store.count("llm_cache") == n_chunks
    calls = store.read("llm_calls").to_pylist()
    assert len(calls) == n_chunks and all(c["status"] == "ok" and not c["cache_hit"] for c in calls)

    # delete a document, then bring it back: its chunks are extracted again, from the cache
    moved = next(corpus.glob("*.txt"))
    saved = moved.read_text()
    moved.unlink()
    run([corpus], index, llm_config(server))
    before = len(server.requests)
    moved.write_text(saved)
    again = run([corpus], index, llm_config(server))
    assert again["chunks_extracted"] > 0
    assert len(server.requests) == before  # no new LLM request
    assert again["llm"]["cache_hits"] == again["llm"]["calls"] == again["chunks_extracted"]
    assert again["llm"]["prompt_tokens"] == 0  # nothing spent
    # what a full extraction of the current corpus costs, from the recorded token counts
    cache = store.read("llm_cache").to_pylist()
    assert again["llm"]["full_rebuild_tokens"] == sum(c["prompt_tokens"] + c["completion_tokens"] for c in cache)


def test_failed_chunks_are_recorded_and_retried(server, tmp_path):
    index = tmp_path / "index"
    server.fault("Hollis Wren", "always:503")
    with pytest.raises(TooManyFailures, match="HTTP 503"):
        run([CORPUS], index, llm_config(server))
    store = IndexStore(index)
    failed = [m for m in store.read("extractions").to_pylist() if m["status"] == "failed"]
    assert failed and all("HTTP 503" in m["error"] for m in failed)
    assert store.count("index_manifest") == 0  # above the threshold nothing is published

    server.fault("Hollis Wren", "malformed")
    partial = run([CORPUS], index, llm_config(server, max_failed_fraction=1.0))
    assert partial["chunks_extracted"] == len(failed)  # only the failed chunks were retried
    assert partial["chunks_failed"] >= 1 and partial["version"] == 1
    bad = [c for c in store.read("llm_calls").to_pylist() if c["status"] == "failed" and c["run_id"] == partial["run_id"]]
    assert bad and "unparseable" in bad[0]["error"]

    done = run([CORPUS], index, llm_config(server))  # the server behaves now
    assert done["chunks_failed"] == 0 and done["chunks_extracted"] == partial["chunks_failed"]
    assert {m["status"] for m in store.read("extractions").to_pylist()} == {"ok"}


def test_query_answers_citing_the_evidence(server, tmp_path, monkeypatch):
    from graphwright.query import query

    index = tmp_path / "index"
    run([CORPUS], index, llm_config(server))
    monkeypatch.setenv("GRAPHWRIGHT_LLM__BASE_URL", server.base_url)
    result = query(str(index), "Who leads the council of Port Elling?")
    assert result["answer"].startswith("The evidence says so [1]")
    assert result["citations"][0]["n"] == 1
    assert result["citations"][0]["chunk_id"] == result["evidence"][0]["chunk_id"]
    assert result["llm"]["completion_tokens"] > 0 and result["llm"]["cache_hit"] is False
    assert query(str(index), "Who leads the council of Port Elling?", answer=False).get("answer") is None


def test_repeated_relationships_are_merged():
    from graphwright.stages.extract.llm import merge_relationships

    merged = merge_relationships([
        {"source": "A", "target": "B", "description": "x.", "weight": 3.0},
        {"source": "A", "target": "B", "description": "y.", "weight": 7.0},
        {"source": "A", "target": "B", "description": "x.", "weight": 1.0},
        {"source": "B", "target": "C", "description": "z.", "weight": 2.0},
    ])
    assert merged == [
        {"source": "A", "target": "B", "description": "x. y.", "weight": 7.0},
        {"source": "B", "target": "C", "description": "z.", "weight": 2.0},
    ]


def test_names_not_in_the_passage_are_dropped():
    answer = ('{"entities": [{"name": "Marley", "type": "PERSON", "description": "dead"},'
              ' {"name": "Charles Babbage", "type": "PERSON", "description": "copied from the example"}],'
              ' "relationships": [{"source": "Marley", "target": "Charles Babbage", "description": "x", "strength": 9}]}')
    entities, rels = parse_extraction(answer, ["PERSON"], "Marley was dead, to begin with.")
    assert [e["name"] for e in entities] == ["Marley"] and rels == []
    assert parse_extraction(answer, ["PERSON"], "Nobody here.") == ([], [])  # all invented: nothing kept
    assert parse_extraction('{"entities": [], "relationships": []}', ["PERSON"]) == ([], [])  # a passage may name nothing
    with pytest.raises(ParseError, match="no 'entities'"):
        parse_extraction('{"answer": 42}', ["PERSON"])


def test_openai_embeddings_are_batched_ordered_and_retried(server, tmp_path):
    from graphwright.config import EmbedConfig
    from graphwright.engines.embed.hashing_engine import HashingEmbedder
    from graphwright.engines.embed.openai_engine import OpenAIEmbedder

    config = EmbedConfig(engine="openai", model="fake-embed", base_url=server.base_url, api_key_env=None,
                         batch_size=3, concurrency=2, backoff_s=0.01, max_backoff_s=0.05)
    texts = [f"text number {i} about Port Elling" for i in range(8)] + ["Voss is here"]
    server.fault("Voss", "503")
    vectors = OpenAIEmbedder(config).encode(texts)
    expected = HashingEmbedder(EmbedConfig(engine="hashing", dim=32)).encode(texts)
    assert vectors.shape == (9, 32) and abs(vectors - expected).max() < 1e-5  # order kept across batches
    assert sum(1 for r in server.requests if "input" in r) == 4  # 3 batches + 1 retry

    index = tmp_path / "index"
    summary = run([CORPUS], index, make_config(embed={"engine": "openai", "model": "fake-embed", "base_url": server.base_url,
                                                      "api_key_env": None, "batch_size": 16}))
    assert summary["recomputed"]["embeddings"]["chunk"]["embedded"] == summary["chunks"]


def test_descriptions_over_budget_are_summarized_once_and_cached(server, tmp_path):
    config = make_config(resolve={"summarize": True, "description_max_chars": 100},
                         llm={"model": "fake-model", "base_url": server.base_url, "api_key_env": None, **FAST})
    index = tmp_path / "index"
    first = run([CORPUS], index, config)
    store = IndexStore(index)
    calls = [c for c in store.read("llm_calls").to_pylist() if c["stage"] == "resolve"]
    assert calls and all(not c["cache_hit"] for c in calls)
    summarized = {c["item_id"] for c in calls}
    entities = {e["entity_id"]: e for e in store.read("entities").to_pylist()}
    assert any(e in summarized for e in entities)
    assert all(len(e["description"]) <= 100 for e in entities.values())
    assert first["llm"]["prompt_tokens"] > 0

    # a later run after a new document asks the LLM only for rows whose inputs changed (resolve
    # rebuilds only what can change; the rest keep their summaries)
    corpus = tmp_path / "corpus"
    shutil.copytree(CORPUS, corpus)
    first = run([corpus], tmp_path / "index2", config)
    store2 = IndexStore(tmp_path / "index2")

    def rows_without_descriptions():
        out = {e["entity_id"]: e for e in store2.read("entities").to_pylist()}
        out.update({r["relationship_id"]: r for r in store2.read("relationships").to_pylist()})
        return {k: {c: v for c, v in r.items() if c != "description"} for k, r in out.items()}

    earlier = rows_without_descriptions()
    before = len(server.requests)
    (corpus / "extra.txt").write_text("Mara Voss met Tobias Reed at the harbour. " * 6)
    again = run([corpus], tmp_path / "index2", config)
    resolve_calls = [c for c in store2.read("llm_calls").to_pylist() if c["stage"] == "resolve" and c["run_id"] == again["run_id"]]
    hits = sum(c["cache_hit"] for c in resolve_calls)
    changed = {k for k, r in rows_without_descriptions().items() if earlier.get(k) != r}
    misses = {c["item_id"] for c in resolve_calls if not c["cache_hit"]}
    assert misses and misses <= changed and len(resolve_calls) < len(earlier)
    assert len(server.requests) - before == len(resolve_calls) - hits


def test_gleaning_rounds_continue_the_conversation(server, tmp_path):
    summary = run([CORPUS], tmp_path / "index", llm_config(server, gleanings=1))
    rounds = [r for r in server.requests if "messages" in r]
    assert summary["llm"]["calls"] == 2 * summary["chunks"] == len(rounds)
    follow_ups = [r for r in rounds if len(r["messages"]) == 4]
    assert len(follow_ups) == summary["chunks"]
    assert [m["role"] for m in follow_ups[0]["messages"]] == ["system", "user", "assistant", "user"]
    assert summary["chunks_failed"] == 0  # an empty gleaning answer keeps the first round's findings


def test_eval_scores_answers_and_counts_their_tokens(server, tmp_path, monkeypatch):
    from graphwright.query.evaluate import answer_scores, evaluate, load_questions

    index = tmp_path / "index"
    run([CORPUS], index, llm_config(server))
    monkeypatch.setenv("GRAPHWRIGHT_LLM__BASE_URL", server.base_url)
    questions = load_questions(DATA / "questions.jsonl")
    result = evaluate(str(index), questions, "naive", 5, answer=True)
    assert result["answered"] == len(questions)
    assert result["prompt_tokens"] > 0 and result["completion_tokens"] > 0
    # the fake model answers "The evidence says so [1]." to everything: no gold answer is that
    assert result["exact_match"] == 0 and 0 <= result["f1"] < 0.5
    assert all(0 <= p["f1"] <= 1 for p in result["per_question"])
    assert answer_scores("It rises in the hills above Amberfield [2].", "in the hills above Amberfield") == (1.0, pytest.approx(0.8))
    assert evaluate(str(index), questions, "naive", 5, answer=False).get("answered") is None


def test_a_requests_cache_key_is_made_once_per_model(monkeypatch):
    """A report's request is keyed for its cache lookup and again when its answer is recorded:
    the JSON and SHA-256 are made once per model, and a copy with other sampling gets its own key."""
    import dataclasses
    import hashlib

    from graphwright.engines.llm import interface

    made = []
    real = hashlib.sha256
    monkeypatch.setattr(interface.hashlib, "sha256", lambda data: made.append(data) or real(data))
    request = interface.LLMRequest(messages=(("user", "a long context " * 500),), json_schema={"type": "object"})
    first = request.cache_key("m")
    assert request.cache_key("m") == first and len(made) == 1
    assert request.cache_key("other") != first and len(made) == 2
    hotter = dataclasses.replace(request, temperature=0.5)
    assert hotter.cache_key("m") != first and len(made) == 3
    assert request == interface.LLMRequest(messages=request.messages, json_schema={"type": "object"})
    assert "_keys" not in repr(request)

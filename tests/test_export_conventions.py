"""The conventions an export follows so that the other engines' own write paths land on our rows
(graphwright.exports.names, relations, endpoints), and the embedding server's command form."""

from __future__ import annotations

import re
import sys

from hypothesis import given
from hypothesis import strategies as st

from graphwright.config import load_config
from graphwright.exports import relations
from graphwright.exports.embed_server import main as embed_server
from graphwright.exports.endpoints import endpoints, graphrag_env, lightrag_env
from graphwright.exports.graphrag import settings_yaml
from graphwright.exports.names import graphrag_title, lightrag_name, lightrag_type, unique_names


def test_graphrag_titles_are_what_its_extractor_writes():
    assert graphrag_title("Tiny Tim") == "TINY TIM"
    assert graphrag_title(" Bob &amp; Co\x07 ") == "BOB & CO"  # entities decoded, control characters dropped
    assert graphrag_title("Ebenezer Scrooge") == graphrag_title("EBENEZER SCROOGE")


def test_lightrag_names_survive_its_normalisation():
    assert lightrag_name("“Scrooge”") == "Scrooge"
    assert lightrag_name("O’Brien") == "OBrien"  # LightRAG drops curly quotes inside names
    assert lightrag_name("Ａｌｉｃｅ\u00a0Smith") == "Alice Smith"
    assert lightrag_name("Fort <br>Elling") == "Fort Elling"
    assert lightrag_name("12") == "" and lightrag_name("1.2") == ""  # LightRAG drops these
    assert len(lightrag_name("x" * 300)) == 256


@given(st.text(max_size=40))
def test_lightrag_name_is_a_fixed_point(text):
    assert lightrag_name(lightrag_name(text)) == lightrag_name(text)


def test_lightrag_types():
    assert lightrag_type("PERSON") == "person"
    assert lightrag_type("ENTITY") == "other"  # our untyped names: LightRAG's 'other'
    assert lightrag_type("Geo Location") == "geolocation"
    assert lightrag_type("a/b, c") == "ab" and lightrag_type("__proto__") == "other"


def test_unique_names_tell_apart_what_normalising_merges():
    entities = [{"entity_id": "aaaa1111x", "name": "Fred"}, {"entity_id": "bbbb2222y", "name": "FRED"},
                {"entity_id": "cccc3333z", "name": "Tim"}, {"entity_id": "dddd4444w", "name": "12"}]
    titles = unique_names(entities, graphrag_title)
    assert titles == {"aaaa1111x": "FRED [AAAA1111]", "bbbb2222y": "FRED [BBBB2222]", "cccc3333z": "TIM", "dddd4444w": "12"}
    names = unique_names(entities, lightrag_name)
    assert names["dddd4444w"] == "12 [dddd4444]" and names["aaaa1111x"] == "Fred"  # LightRAG keeps case
    assert len(set(names.values())) == len(names)


def test_relationship_keywords_and_descriptions():
    ends, types = ("Scrooge", "Fred"), ("PERSON", "PERSON")
    said = ["Scrooge dined with his nephew Fred at Christmas; the nephew laughed."]
    assert relations.keywords(said, ends, types) == "nephew, dined, laughed"  # most frequent first, names left out
    assert relations.keywords([""], ("Port Elling", "Tobias Reed"), ("GEO", "PERSON")) == "geo, person"
    assert relations.keywords([""], ends, ("ENTITY", "other")) == "co-occurrence"
    assert len(relations.keywords(["alpha beta gamma delta epsilon zeta eta"], ends, types).split(", ")) == 5
    assert relations.description("", ends, 1) == "Scrooge and Fred are named in the same passage."
    assert relations.description("", ends, 3) == "Scrooge and Fred are named together in 3 passages."
    assert relations.description(said[0], ends, 3) == said[0]


def test_env_files_name_the_index_endpoints_and_no_secret(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    config = load_config(None, {"llm": {"model": "qwen", "base_url": "http://llm:8000/v1"}, "embed": {"engine": "hashing", "dim": 64}})
    found = endpoints(config, "hashing-64", 64)
    gr, lr = graphrag_env(found), lightrag_env(found)
    assert "GRAPHRAG_COMPLETION_MODEL=qwen" in gr and "GRAPHRAG_API_BASE=http://llm:8000/v1" in gr
    assert "GRAPHRAG_API_KEY=${OPENAI_API_KEY:-not-needed}" in gr and "sk-secret" not in gr + lr
    assert "GRAPHRAG_EMBEDDING_API_BASE=http://127.0.0.1:8091/v1" in gr  # the index's embedder, through our server
    assert "LLM_MODEL=qwen" in lr and "EMBEDDING_DIM=64" in lr and "EMBEDDING_MODEL=hashing-64" in lr and "WORKING_DIR=." in lr
    # every variable graphrag's settings name is set by the .env written beside them
    named = set(re.findall(r"(?<!\$)\$\{(\w+)\}", settings_yaml(64, "hashing-64", 254, 32)))
    assert named == {line.split("=", 1)[0] for line in gr.splitlines() if line.startswith("GRAPHRAG_")}
    remote = endpoints(load_config(None, {"embed": {"engine": "openai", "base_url": "http://emb:9/v1"}}), "e5", 768)
    assert remote.embed_base_url == "http://emb:9/v1" and remote.llm_model == ""  # no LLM configured: the user sets one


def test_embed_server_runs_a_command_that_reaches_it(indexed, capfd):
    """`embed_server --index DIR -- COMMAND`: the command finds the server in the variables an
    export's .env names, and its exit status is ours."""
    child = ("import json, os, sys, urllib.request\n"
             "for name in ('GRAPHRAG_EMBEDDING_API_BASE', 'EMBEDDING_BINDING_HOST'):\n"
             "    request = urllib.request.Request(os.environ[name] + '/embeddings', data=json.dumps({'input': ['Tobias Reed']}).encode(),\n"
             "                                     headers={'Content-Type': 'application/json'})\n"
             "    print(name, len(json.load(urllib.request.urlopen(request))['data'][0]['embedding']))\n"
             "sys.exit(3)\n")
    assert embed_server(["--index", str(indexed.index), "--", sys.executable, "-c", child]) == 3
    out = capfd.readouterr().out
    assert "GRAPHRAG_EMBEDDING_API_BASE 64" in out and "EMBEDDING_BINDING_HOST 64" in out

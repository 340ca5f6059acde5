import pyarrow as pa
import pytest
from _helpers import CORPUS, make_extraction_fail

from graphwright.config import ExtractConfig
from graphwright.stages.extract.extractors import extractor_key
from graphwright.stages.extract.nlp import (
    RULES_VERSION,
    NlpExtractor,
    extract_chunk,
    find_names,
)
from graphwright.stages.extract.rows import EXTRACTION_BATCH_SCHEMA
from graphwright.text.sentences import split_sentences

CFG = ExtractConfig()


def names(text):
    occurrences, _ = find_names(text)
    return [(o["surface"], o["type"]) for o in occurrences]


def test_split_sentences_respects_abbreviations_and_initials():
    text = "Mr. Smith went to Washington. He met J. R. Ewing there! Did he? Yes.\n\nA new paragraph"
    sentences = [text[a:b] for a, b in split_sentences(text)]
    assert sentences == ["Mr. Smith went to Washington.", "He met J. R. Ewing there!", "Did he?", "Yes.", "A new paragraph"]


def test_finds_multi_word_names_with_connectors():
    found = names("Captain Mara Voss met Tobias Reed at the Bank of England near Kestrel Island.")
    surfaces = [s for s, _ in found]
    assert "Mara Voss" in " ".join(surfaces)
    assert "Tobias Reed" in surfaces
    assert "Bank of England" in surfaces
    assert "Kestrel Island" in surfaces


@pytest.mark.parametrize(
    "text, surface, etype",
    [
        ("Yesterday we met Mr. Scrooge at home.", "Mr. Scrooge", "PERSON"),
        ("The parcel went to Dr. Ilse Brandt today.", "Dr. Ilse Brandt", "PERSON"),
        ("We walked along Saltmarsh Road at dusk.", "Saltmarsh Road", "GEO"),
        ("Ships leave from Port Elling daily.", "Port Elling", "GEO"),
        ("He works for the Elling Harbor Company now.", "Elling Harbor Company", "ORGANIZATION"),
        ("We all went to the Lantern Festival together.", "Lantern Festival", "EVENT"),
        ("The crowd cheered when Hollis said nothing.", "Hollis", "PERSON"),  # '<name> said'
        ("They settled in Amberfield last year.", "Amberfield", "GEO"),  # 'in <name>'
    ],
)
def test_entity_types_from_cues(text, surface, etype):
    assert (surface, etype) in names(text)


def test_a_double_hyphen_is_a_dash_that_ends_a_name():
    # plain-text books (Project Gutenberg) write an em-dash as two hyphens
    text = "We reached Cornwall--all the coast was ours. Then Mr. Grey--not Arthur--spoke of the Rolls-Royce."
    surfaces = [s for s, _ in names(text)]
    assert "Cornwall" in surfaces and "Mr. Grey" in surfaces and "Arthur" in surfaces and "Rolls-Royce" in surfaces
    assert not [s for s in surfaces if "--" in s]


def test_a_stop_word_with_a_contraction_is_not_a_name():
    text = ("Then Brice laughed, and I'll tell you what I'm going to do, THAT'll show Ye'll see. "
            "Miss Trotter said she Don't know; I've seen Arthur's boat and O'Brien's, Can't you?")
    surfaces = [s for s, _ in names(text)]
    assert not {"I'll", "I'm", "THAT'll", "Ye'll", "Don't", "I've", "Can't"} & set(surfaces)
    assert {"Brice", "Miss Trotter", "Arthur", "O'Brien"} <= set(surfaces)
    assert "I'll Be Here Awhile" in [s for s, _ in names("The band released I'll Be Here Awhile in 1970.")]  # a title


def test_sentence_initial_common_words_are_not_entities():
    text = "However, the rain came. Rain fell on the town. Later the boats returned. The harbor was quiet."
    assert names(text) == []


def test_sentence_initial_word_is_a_name_when_it_also_appears_mid_sentence():
    found = names("Marley was dead. Everyone knew Marley well.")
    assert [s for s, _ in found] == ["Marley", "Marley"]


def test_possessives_are_stripped_from_surfaces():
    assert ("Scrooge", "ENTITY") in names("Everyone feared Scrooge's temper.")


def test_shouted_headings_are_skipped():
    assert names("THE COUNCIL OF PORT ELLING MEETS AGAIN") == []


def test_extract_chunk_mentions_and_cooccurrence_weights():
    text = ("Mara Voss met Tobias Reed in Port Elling. Mara Voss and Tobias Reed ate supper. "
            "Later Hollis Wren wrote a letter.")
    mentions, assertions = extract_chunk(text, CFG)
    by_name = {m["name"]: m for m in mentions}
    assert set(by_name) == {"Mara Voss", "Tobias Reed", "Port Elling", "Hollis Wren"}
    assert by_name["Mara Voss"]["count"] == 2
    assert by_name["Port Elling"]["type"] == "GEO"
    # the description is the sentences that mention it, at most max_description_sentences
    assert by_name["Mara Voss"]["description"] == "Mara Voss met Tobias Reed in Port Elling. Mara Voss and Tobias Reed ate supper."
    pairs = {frozenset((a["source"], a["target"])): a for a in assertions}
    # one per sentence shared
    assert pairs[frozenset(("Mara Voss", "Tobias Reed"))]["weight"] == 2.0
    assert pairs[frozenset(("Mara Voss", "Port Elling"))]["weight"] == 1.0
    # no shared sentence: only the chunk-level co-occurrence weight, no description
    hw = pairs[frozenset(("Hollis Wren", "Mara Voss"))]
    assert hw["weight"] == CFG.chunk_pair_weight and hw["description"] == ""
    assert len(pairs) == len(assertions) == 6  # every pair of the 4 entities exactly once


def test_extract_chunk_pair_weight_can_be_disabled():
    cfg = ExtractConfig(chunk_pair_weight=0)
    _, assertions = extract_chunk("Mara Voss sailed. Later Tobias Reed counted crates.", cfg)
    assert assertions == []


def test_extract_chunk_relates_entities_by_merge_key():
    # 'Mr. Reed' and 'Reed' are one entity in the chunk: no self relationship between them
    _, assertions = extract_chunk("Mr. Reed counted crates. Reed was tired and Mara Voss laughed.", CFG)
    for a in assertions:
        assert {a["source"], a["target"]} != {"Mr. Reed", "Reed"}


def test_extract_chunk_is_deterministic():
    text = (CORPUS / "harbor.txt").read_text()
    assert extract_chunk(text, CFG) == extract_chunk(text, CFG)


def test_description_sentence_limit():
    cfg = ExtractConfig(max_description_sentences=1)
    mentions, _ = extract_chunk("Mara Voss sailed. Mara Voss docked. Mara Voss slept.", cfg)
    assert mentions == [{"name": "Mara Voss", "type": "ENTITY", "description": "Mara Voss sailed.", "count": 3}]


def test_nlp_extractor_batch_function():
    chunks = pa.table({
        "chunk_id": ["c1", "c2", "c3"],
        "doc_id": ["d1", "d1", "d2"],
        "text": ["Mara Voss met Tobias Reed.", "nothing to see here", (CORPUS / "council.txt").read_text()],
    })
    extractor = NlpExtractor(CFG)
    out = extractor(chunks)
    assert out.schema.equals(EXTRACTION_BATCH_SCHEMA)
    rows = out.to_pylist()
    assert [r["chunk_id"] for r in rows] == ["c1", "c2", "c3"]
    assert all(r["status"] == "ok" and r["error"] is None for r in rows)
    assert all(r["extractor"] == extractor_key(CFG) == f"nlp@{RULES_VERSION}" for r in rows)
    assert rows[1]["mentions"] == [] and rows[1]["assertions"] == []
    assert len(rows[0]["mentions"]) == 2 and len(rows[0]["assertions"]) == 1
    assert out.equals(extractor(chunks))  # deterministic


def test_nlp_extractor_records_failures_per_chunk(monkeypatch):
    make_extraction_fail(monkeypatch, "boom", "boom")
    out = NlpExtractor(CFG)(pa.table({"chunk_id": ["c1", "c2"], "doc_id": ["d", "d"],
                                      "text": ["Mara Voss sailed.", "boom goes Mara Voss"]})).to_pylist()
    assert [r["status"] for r in out] == ["ok", "failed"]
    assert out[1]["error"] == "RuntimeError: boom" and out[1]["mentions"] == []


def test_unknown_engine_is_rejected():
    cfg = ExtractConfig.model_construct(engine="telepathy")
    with pytest.raises(ValueError, match="unknown extraction engine"):
        extractor_key(cfg)


def test_llm_engine_needs_a_model():
    cfg = ExtractConfig(engine="llm")
    with pytest.raises(ValueError, match="llm.model is not set"):
        extractor_key(cfg, None)

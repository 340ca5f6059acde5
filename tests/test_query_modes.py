"""Every query mode over a published version: evidence with provenance, the mode's own behaviour
(token budget, PageRank, map-reduce with helpfulness scores, LightRAG keywords), CLI and eval."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from _helpers import DATA, make_config, run
from fake_openai import FakeOpenAI
from typer.testing import CliRunner

from graphwright.cli import app
from graphwright.ids import doc_id
from graphwright.query import query
from graphwright.query.evaluate import evaluate, load_questions
from graphwright.query.global_search import NO_DATA, covering_communities
from graphwright.query.graph_seeds import NAME_MATCH_CAP, linked_entities
from graphwright.query.keywords import question_keywords
from graphwright.query.searcher import MODES, Searcher

QUESTION = "Who will carry the copper to Port Elling, and what did Dr. Ilse Brandt measure?"


@pytest.fixture(scope="module")
def indexed(tmp_path_factory):
    root = tmp_path_factory.mktemp("modes")
    run([DATA / "corpus"], root / "index", make_config(embed={"relationships": True}))  # every mode can run
    return root / "index"


@pytest.fixture
def server():
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture
def with_llm(server, monkeypatch):
    monkeypatch.setenv("GRAPHWRIGHT_LLM__MODEL", "fake-model")
    monkeypatch.setenv("GRAPHWRIGHT_LLM__BASE_URL", server.base_url)
    monkeypatch.setenv("GRAPHWRIGHT_LLM__API_KEY_ENV", "")
    monkeypatch.setenv("GRAPHWRIGHT_LLM__MAX_ATTEMPTS", "1")
    return server


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_returns_evidence_with_provenance(indexed, mode):
    result = query(str(indexed), QUESTION, mode=mode, top_k=5, answer=False)
    assert result["mode"] == mode and 0 < len(result["evidence"]) <= 5
    searcher = Searcher(str(indexed))
    chunks = searcher.chunk_docs([e["chunk_id"] for e in result["evidence"]])
    for e in result["evidence"]:
        assert chunks[e["chunk_id"]] == e["doc_id"]  # the chunk belongs to the document named
        assert e["source_key"] and e["text"]
    scores = [e["score"] for e in result["evidence"]]
    if mode not in ("hybrid", "mix", "low", "high"):  # the lightrag modes keep LightRAG's item order
        assert scores == sorted(scores, reverse=True)


def test_unknown_mode_is_refused(indexed):
    with pytest.raises(ValueError, match="unknown query mode"):
        query(str(indexed), QUESTION, mode="psychic")


def test_local_context_fits_its_token_budget(indexed):
    from graphwright.text.tokens import count_tokens

    searcher = Searcher(str(indexed))
    wide = searcher.search(QUESTION, "local", 8)
    assert len(wide["evidence"]) == 8  # the default budget holds the requested chunks
    searcher.config = make_config(query={"local_context_tokens": 400, "local_text_unit_prop": 0.5, "local_community_prop": 0.2})
    tight = searcher.search(QUESTION, "local", 8)
    used = tight["context_tokens"]
    assert used["text_units"] <= 200 and used["reports"] <= 80 and used["entities"] <= 60 and used["relationships"] <= 60
    assert used["text_units"] == sum(count_tokens([e["text"] for e in tight["evidence"]]))
    # the budget cuts the ranking, it does not reorder it
    assert [e["chunk_id"] for e in tight["evidence"]] == [e["chunk_id"] for e in wide["evidence"]][: len(tight["evidence"])]
    assert 1 <= len(tight["evidence"]) < 8
    assert len(tight["entities"]) < len(wide["entities"])


# -- graph: personalized PageRank ----------------------------------------------------------------

@pytest.fixture(scope="module")
def small_graph(tmp_path_factory):
    """Alder Voss and Brin Tallow meet in one document; each also appears elsewhere with others."""
    root = tmp_path_factory.mktemp("ppr")
    corpus = root / "corpus"
    corpus.mkdir()
    docs = {
        "bridge.txt": "Alder Voss met Brin Tallow at the old mill.",
        "alder.txt": "Alder Voss planted orchards by the river. Alder Voss sold apples to Corin Hale at the market.",
        "brin.txt": "Esk Marrow sailed to Dunmore Bay. Esk Marrow and Brin Tallow mended nets on the quay.",
        "esk.txt": "Esk Marrow built a boat with Orla Finch in the winter.",
        "far.txt": "Fenna Quill painted the lighthouse at Gull Point for Tam Reed.",
    }
    for name, text in docs.items():
        (corpus / name).write_text(text + "\n")
    run([corpus], root / "index")
    return root / "index"


def _keys(result):
    return [e["source_key"] for e in result["evidence"]]


def graph_search(index, question: str, **settings) -> dict:
    """Graph mode walking from the question's entities alone (no passage seeds, no facts, chunks
    ranked by PageRank alone), plus `settings`."""
    searcher = Searcher(str(index))
    searcher.config = make_config(query={"graph_passage_weight": 0.0, "graph_facts": 0, "graph_fusion_weight": 0.0, **settings})
    return searcher.attach_titles(searcher.search(question, "graph", 5))


def test_pagerank_ranks_the_chunk_connecting_two_question_entities_first(small_graph):
    result = graph_search(small_graph, "How are Alder Voss and Brin Tallow connected?")
    assert _keys(result)[0] == "bridge.txt"
    assert {"Alder Voss", "Brin Tallow"} <= {s["name"] for s in result["seeds"]}


def test_pagerank_reaches_entities_the_question_does_not_name(small_graph):
    # Brin Tallow is named; Esk Marrow is his neighbour; Orla Finch only Esk Marrow's
    result = graph_search(small_graph, "Who is Brin Tallow?")
    keys = _keys(result)
    assert keys.index("brin.txt") < keys.index("esk.txt")  # two hops beats three
    assert "far.txt" not in keys  # no path from the question's entities: no mass
    mass = {e["name"]: e["ppr"] for e in result["entities"]}
    assert mass["Brin Tallow"] > mass["Esk Marrow"] > mass.get("Orla Finch", 0) > 0


def test_a_fact_the_question_matches_seeds_both_its_entities(small_graph):
    result = graph_search(small_graph, "Who mended nets on the quay?", graph_facts=5, graph_links=False)
    assert "mended nets" in result["facts"][0]["description"]
    assert {s["name"] for s in result["seeds"]} == {"Esk Marrow", "Brin Tallow"}  # no name in the question
    assert _keys(result)[0] == "brin.txt"


def test_a_name_bm25_matches_in_part_seeds_its_entity(small_graph):
    # "Quill" is no entity's whole name or alias, nor near enough to one by embedding
    question = "What did Quill paint?"
    assert not graph_search(small_graph, question, graph_name_matches=0)["seeds"]
    result = graph_search(small_graph, question, graph_name_matches=5)
    assert [s["name"] for s in result["seeds"]] == ["Fenna Quill"]  # not Tam Reed, its neighbour
    assert _keys(result) == ["far.txt"]


def test_a_named_entity_links_above_a_name_matched_in_part(small_graph):
    searcher = Searcher(str(small_graph))
    searcher.config = make_config(query={"graph_name_matches": 5})
    question = "Did Esk Marrow sail with Orla?"
    names = {e["entity_id"]: e["name"] for e in searcher.index.read("entities", columns=["entity_id", "name"]).to_pylist()}
    scores = {names[e]: s for e, s in linked_entities(searcher, question, searcher.embedder.encode([question])[0]).items()}
    assert scores["Esk Marrow"] == 1.0 and 0 < scores["Orla Finch"] <= NAME_MATCH_CAP


def test_passage_seeds_add_the_chunks_the_fused_ranking_finds(small_graph):
    question = "Who is Brin Tallow, and who painted the lighthouse?"
    assert "far.txt" not in _keys(graph_search(small_graph, question))  # no path from Brin Tallow
    seeded = graph_search(small_graph, question, graph_passage_weight=0.05)
    assert "far.txt" in _keys(seeded)  # BM25 and vector search find it: a seed of its own


def test_the_final_ranking_fuses_the_walk_with_the_fused_ranking(small_graph):
    question = "Who is Brin Tallow, and who painted the lighthouse?"
    assert "far.txt" not in _keys(graph_search(small_graph, question))  # no path, no passage seed: PageRank alone misses it
    fused = graph_search(small_graph, question, graph_fusion_weight=1.0)
    assert "far.txt" in _keys(fused)  # BM25 and vector search rank it: the fused list brings it in
    walked = set(_keys(graph_search(small_graph, question)))
    assert walked <= set(_keys(fused))  # and the walk's chunks stay


class _Chunks:
    """The passage graph's id lookups over sorted chunk ids (node = position, no entities)."""

    def __init__(self, ids):
        self.sorted = sorted(ids)

    def ids(self, nodes):
        return [self.sorted[n] for n in np.asarray(nodes).tolist()]

    def chunk_nodes(self, ids):
        at = {c: i for i, c in enumerate(self.sorted)}
        return np.array([at.get(c, -1) for c in ids], dtype=np.int64)


def test_final_ranking_merges_by_reciprocal_rank():
    from graphwright.query.graph import final_ranking

    graph = _Chunks(["a", "b", "c", "d", "e"])
    nodes, mass = np.array([0, 1, 2]), np.array([0.5, 0.3, 0.2])  # a, b, c walked
    fused = [("c", 0.9), ("d", 0.8), ("z", 0.7)]  # z is in no graph
    assert final_ranking(graph, nodes, mass, fused, 3, 0.0) == [("a", 0.5), ("b", 0.3), ("c", 0.2)]  # PageRank alone
    top = [c for c, _ in final_ranking(graph, nodes, mass, fused, 5, 1.0)]
    assert top[0] == "c"  # third by the walk, first by search: 1/63 + 1/61 beats 1/61
    assert top == ["c", "a", "b", "d", "z"]  # b and d tie at 1/62: by id
    assert [c for c, _ in final_ranking(graph, nodes, mass, fused, 5, 1.0, pruned=True)] == ["c", "a", "b"]  # d is not in the tree
    assert final_ranking(graph, nodes[:0], mass[:0], fused, 2, 1.0) == fused[:2]  # nothing reached: the fused ranking
    assert final_ranking(graph, nodes[:0], mass[:0], fused, 2, 1.0, pruned=True) == []


@pytest.mark.parametrize("seed", range(5))
def test_final_ranking_equals_the_fusion_of_the_whole_walk(seed):
    from graphwright.query.fusion import reciprocal_rank_fusion
    from graphwright.query.graph import final_ranking

    rng = np.random.default_rng(seed)
    ids = [f"{i:04x}" for i in range(400)]
    graph = _Chunks(ids)
    nodes = np.sort(rng.choice(400, 300, replace=False))
    mass = rng.choice([0.1, 0.2, 0.3, 0.4], len(nodes)) * rng.random(len(nodes)).round(1)  # ties, and zeros
    walked = [graph.sorted[n] for n in sorted(nodes.tolist(), key=lambda n: (-mass[list(nodes).index(n)], graph.sorted[n]))]
    for depth in (3, 40):  # a short fused list leaves most of the top to the walk
        fused = [(graph.sorted[i], 0.0) for i in rng.choice(400, depth, replace=False)] + [("zz", 0.0)]  # zz: in no graph
        for k in (1, 2, 10, 50):
            for w in (0.5, 1.0, 2.0):
                assert final_ranking(graph, nodes, mass, fused, k, w) == reciprocal_rank_fusion([walked, [c for c, _ in fused]], [1.0, w])[:k]


def test_steiner_pruning_keeps_the_tree_joining_the_top_entities(small_graph):
    result = graph_search(small_graph, "How are Alder Voss and Brin Tallow connected?", graph_steiner=True, graph_steiner_terminals=2)
    assert {e["name"] for e in result["entities"]} == {"Alder Voss", "Brin Tallow"}  # adjacent: the tree is one edge
    assert result["tree"] == {"nodes": 2, "edges": 1}
    assert result["evidence"][0]["source_key"] == "bridge.txt"


def test_graph_mode_on_a_version_without_a_passage_graph_says_how_to_build_one(small_graph):
    searcher = Searcher(str(small_graph))
    searcher.index.manifest["vector_indexes"].pop("graph")
    with pytest.raises(ValueError, match="no passage graph.*graphwright index"):
        searcher.search("Who is Brin Tallow?", "graph", 5)


# -- global: map-reduce over reports -------------------------------------------------------------

def test_global_without_llm_ranks_reports_with_chunk_provenance(indexed):
    searcher = Searcher(str(indexed))
    result = searcher.search(QUESTION, "global", 4, use_llm=False)
    level = result["level"]
    covering = set(covering_communities(searcher, level))
    assert "answer" not in result and result["evidence"]
    for e in result["evidence"]:
        assert e["kind"] == "report" and e["community_id"] in covering
        assert e["chunk_id"] in e["chunk_ids"] and e["doc_id"] in e["doc_ids"]
    community = {c["community_id"]: c for c in searcher.communities}
    entities = searcher.index.read("entities", columns=["entity_id", "chunk_ids"]).to_pylist()
    chunks_of = {e["entity_id"]: e["chunk_ids"] for e in entities}
    for e in result["evidence"]:  # the chunks of its members, from the passage graph
        members = community[e["community_id"]]["entity_ids"]
        assert e["chunk_ids"] == sorted({c for m in members for c in chunks_of[m]})
        assert len(e["chunk_ids"]) == community[e["community_id"]]["n_chunks"]


def test_a_communitys_chunks_are_its_members_with_or_without_the_passage_graph(indexed, monkeypatch):
    searcher = Searcher(str(indexed))
    assert searcher.has_graph
    with_graph = {c["community_id"]: searcher.community_chunks(c) for c in searcher.communities}
    monkeypatch.setattr(Searcher, "has_graph", property(lambda self: False))
    plain = Searcher(str(indexed))
    assert {c["community_id"]: plain.community_chunks(c) for c in plain.communities} == with_graph
    assert all(len(with_graph[c["community_id"]]) == c["n_chunks"] for c in searcher.communities)


def test_global_drops_zero_scored_points_and_cites_reports(indexed, with_llm):
    searcher = Searcher(str(indexed))
    reports = searcher.search(QUESTION, "global", 50, use_llm=False)["evidence"]
    zero_title = reports[0]["report_title"]
    with_llm.zero_score_markers = [zero_title]
    result = query(str(indexed), QUESTION, mode="global")
    assert result["dropped_points"] >= 1
    assert all(p["score"] > 0 for p in result["points"]) and result["points"]
    assert not any(zero_title in p["description"] for p in result["points"])
    reduce_prompt = [r for r in with_llm.requests if "\nPoints:\n" in r["messages"][0]["content"]][-1]["messages"][0]["content"]
    assert zero_title not in reduce_prompt and f"about {result['evidence'][1]['report_title']}" in reduce_prompt
    assert result["answer"].startswith(f"{len(result['points'])} points")
    cited = {c["n"] for c in result["citations"]}
    assert cited == {n for p in result["points"] for n in p["reports"]} and 1 not in cited
    assert all(c["community_id"] == result["evidence"][c["n"] - 1]["community_id"] for c in result["citations"])
    assert result["llm"]["calls"] == len(with_llm.requests) and result["llm"]["cache_hits"] == 0
    # the same question again is answered from the cache
    before = len(with_llm.requests)
    again = query(str(indexed), QUESTION, mode="global")
    assert len(with_llm.requests) == before and again["answer"] == result["answer"]
    assert again["llm"]["cache_hits"] == again["llm"]["calls"]


def test_global_with_every_point_zero_says_it_does_not_know(indexed, with_llm):
    with_llm.zero_score_markers = [""]  # every title
    result = query(str(indexed), "What happened at the Lantern Festival?", mode="global")  # not asked before: not cached
    assert result["answer"] == NO_DATA and result["points"] == [] and result["dropped_points"] > 0
    assert not [r for r in with_llm.requests if "\nPoints:\n" in r["messages"][0]["content"]]  # no reduce call


# -- lightrag ------------------------------------------------------------------------------------

def test_keywords_without_llm_come_from_the_question(indexed):
    keys = question_keywords(Searcher(str(indexed)), QUESTION)
    assert "Port Elling" in keys["low"] and "Dr. Ilse Brandt" in keys["low"]
    assert keys["high"] and "copper" in keys["high"][0] and "Port" not in keys["high"][0]


def test_low_level_search_returns_the_chunks_of_the_named_entity(indexed):
    result = query(str(indexed), "Dr. Ilse Brandt", mode="low", top_k=3, answer=False)
    assert result["keywords"]["low"] == ["Dr. Ilse Brandt"]
    brandt = [e for e in result["entities"] if "Brandt" in e["name"]]
    assert brandt and result["evidence"][0]["chunk_id"] in brandt[0]["chunk_ids"]


def test_hybrid_and_mix_merge_their_parts_round_robin(indexed):
    from graphwright.query.lightrag import _round_robin

    searcher = Searcher(str(indexed))
    parts = {m: [e["chunk_id"] for e in searcher.search(QUESTION, m, 4)["evidence"]] for m in ("naive", "low", "high", "hybrid", "mix")}
    assert parts["low"] != parts["high"]
    assert parts["hybrid"] == _round_robin([parts["low"], parts["high"]])[:4]
    assert parts["mix"] == _round_robin([parts["naive"], parts["low"], parts["high"]])[:4]


def test_llm_keywords_are_used_and_cached(indexed, with_llm):
    result = query(str(indexed), QUESTION, mode="hybrid", answer=True)
    assert result["keywords"]["source"] == "llm" and "Port Elling" in result["keywords"]["low"]
    assert result["keywords"]["high"] == ["travel"] and result["keywords"]["cache_hit"] is False
    again = Searcher(str(indexed)).search(QUESTION, "hybrid", 5)
    assert again["keywords"]["cache_hit"] is True
    assert result["answer"].startswith("The evidence says so")


def test_relationships_are_embedded_as_source_target_description(indexed):
    from graphwright.engines.embed import make_embedder
    from graphwright.storage.delta import IndexStore

    store = IndexStore(indexed)
    rel = store.read("relationships").to_pylist()[0]
    (row,) = store.read("embeddings", where=f"kind = 'relationship' AND item_id = '{rel['relationship_id']}'").to_pylist()
    text = f"{rel['source']} - {rel['target']}: {rel['description'][:600]}"
    np.testing.assert_allclose(row["vector"], make_embedder(make_config().embed).encode([text])[0], rtol=1e-6)


def test_relation_search_needs_relationship_vectors(tmp_path):
    index = tmp_path / "index"
    run([DATA / "corpus"], index, make_config())  # relationships are not embedded by default
    assert query(str(index), QUESTION, mode="low", answer=False)["evidence"]
    with pytest.raises(ValueError, match="no relationship vectors"):
        query(str(index), QUESTION, mode="high", answer=False)


# -- CLI and eval --------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["global", "graph", "mix"])
def test_cli_query_and_eval_take_every_mode(indexed, mode):
    runner = CliRunner()
    out = runner.invoke(app, ["query", "--index", str(indexed), "--mode", mode, "--json", "--no-answer", QUESTION])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["mode"] == mode
    out = runner.invoke(app, ["eval", "--index", str(indexed), "--questions", str(DATA / "questions.jsonl"), "--mode", mode, "--json"])
    assert out.exit_code == 0, out.output
    assert 0 <= json.loads(out.output)["recall@10"] <= 1


def test_eval_scores_every_mode_against_gold_documents(indexed):
    questions = load_questions(DATA / "questions.jsonl")
    searcher = Searcher(str(indexed))
    for mode in MODES:
        result = evaluate(str(indexed), questions, mode, 10, searcher=searcher)
        for q, p in zip(questions, result["per_question"]):
            evidence = searcher.search(q["question"], mode, 10, use_llm=False)["evidence"][:10]
            gold = {doc_id(g) for g in q["gold_doc_ids"]}
            assert p["recall"] == len(gold & {e["doc_id"] for e in evidence}) / len(gold)
            words = " ".join(re.findall(r"\w+", " ".join(e["text"] for e in evidence).casefold()))
            assert p["answer_found"] == (" ".join(re.findall(r"\w+", q["answer"].casefold())) in words)
        assert result["short_answer_questions"] == len(questions)
        assert result["answer_words@10"] == pytest.approx(sum(p["answer_words"] for p in result["per_question"]) / len(questions), abs=1e-3)


def test_answer_words_credit_an_answer_phrased_rather_than_quoted():
    from graphwright.query.evaluate import answer_in_evidence, answer_word_recall

    q = {"question": "What is near Housel Cove?", "answer": "Penolver is located near Housel Cove."}
    evidence = [{"text": "From Housel Cove we walked on; near it stands Penolver, the headland."}]
    assert answer_in_evidence(q, evidence) is False  # not verbatim
    assert answer_word_recall(q, evidence) == pytest.approx(4 / 5)  # all but "located" of penolver, located, near, housel, cove
    assert answer_word_recall(q, [{"text": "nothing here"}]) == 0.0
    assert answer_word_recall({"question": "?", "answer": "yes"}, evidence) is None  # not a short answer
    assert answer_word_recall({"question": "?", "answer": "the"}, evidence) is None  # no content word


def test_global_merges_repeated_points():
    from graphwright.query.global_search import _unique

    points = [{"description": "Revenue grew.", "score": 80, "reports": [1]},
              {"description": "revenue  grew.", "score": 60, "reports": [3]},
              {"description": "Costs fell.", "score": 50, "reports": [2]}]
    assert _unique(points) == [{"description": "Revenue grew.", "score": 80, "reports": [1, 3]},
                               {"description": "Costs fell.", "score": 50, "reports": [2]}]

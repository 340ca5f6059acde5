"""The retrieval pieces behind the fusion and graph modes: PageRank by push against igraph's,
reciprocal rank fusion, the local mode's bound on an entity's chunks, and iterative retrieval
(IRCoT) with a fake LLM."""

from __future__ import annotations

import igraph as ig
import numpy as np
import pytest
from _helpers import make_config
from fake_openai import FakeOpenAI

from graphwright.query import query
from graphwright.query.fusion import convex_fusion, reciprocal_rank_fusion
from graphwright.query.ircot import first_sentence
from graphwright.query.ppr import personalized_pagerank
from graphwright.query.searcher import Searcher


def _csr(g: ig.Graph):
    n = g.vcount()
    rows = [[] for _ in range(n)]
    for e in g.es:
        a, b = e.tuple
        rows[a].append((b, e["weight"]))
        rows[b].append((a, e["weight"]))
    indptr = np.zeros(n + 1, np.int64)
    indptr[1:] = np.cumsum([len(r) for r in rows])
    indices = np.array([b for r in rows for b, _ in r], np.int32)
    weights = np.array([w for r in rows for _, w in r], np.float32)
    return indptr, indices, weights, np.array([sum(w for _, w in r) for r in rows])


@pytest.mark.parametrize("damping", [0.5, 0.85])
def test_pagerank_by_push_matches_igraph(damping):
    rng = np.random.default_rng(7)
    g = ig.Graph.Barabasi(n=800, m=3)  # hubs, as entity graphs have
    g.es["weight"] = (rng.random(g.ecount()) * 4 + 0.2).tolist()
    reset = np.zeros(g.vcount())
    seeds = np.array([5, 40, 300, 799])
    reset[seeds] = [1.0, 0.4, 0.2, 0.05]
    exact = np.asarray(g.personalized_pagerank(directed=False, damping=damping, reset=reset.tolist(), weights="weight"))
    indptr, indices, weights, total = _csr(g)
    nodes, scores = personalized_pagerank(indptr, indices, weights, total, seeds, reset[seeds], damping, epsilon=1e-7)
    approx = np.zeros(g.vcount())
    approx[nodes] = scores
    degree = np.diff(indptr)
    assert np.all(np.abs(approx - exact) <= 1e-7 * degree + 1e-9)  # the push bound: epsilon x degree
    assert list(np.argsort(-approx)[:30]) == list(np.argsort(-exact)[:30])


def test_pagerank_keeps_a_seed_without_edges_and_ignores_bad_seeds():
    indptr, indices = np.array([0, 1, 2, 2]), np.array([1, 0], np.int32)  # 0 - 1, and 2 alone
    weights, total = np.ones(2, np.float32), np.array([1.0, 1.0, 0.0])
    nodes, scores = personalized_pagerank(indptr, indices, weights, total, np.array([2, 0, 7, -1]), np.array([1.0, 1.0, 5.0, 5.0]))
    mass = dict(zip(nodes.tolist(), scores.tolist()))
    assert mass[2] == pytest.approx(0.5)  # half the reset, all of it kept
    assert mass[0] > mass[1] > 0 and sum(mass.values()) == pytest.approx(1.0, abs=1e-4)
    assert personalized_pagerank(indptr, indices, weights, total, np.array([], np.int64), np.array([]))[0].size == 0


def test_reciprocal_rank_fusion_sums_weighted_reciprocal_ranks():
    fused = dict(reciprocal_rank_fusion([["a", "b", "c"], ["c", "a"]], [1.0, 2.0]))
    assert fused["a"] == pytest.approx(1 / 61 + 2 / 62) and fused["c"] == pytest.approx(1 / 63 + 2 / 61)
    assert fused["b"] == pytest.approx(1 / 62)
    assert [x for x, _ in reciprocal_rank_fusion([["a", "b"], ["b", "a"]])] == ["a", "b"]  # ties by id
    assert reciprocal_rank_fusion([["a"], ["b"]], [1.0, 0.0]) == [("a", pytest.approx(1 / 61))]


def test_convex_fusion_weighs_each_lists_normalised_scores():
    dense = [("a", 0.9), ("b", 0.8), ("c", 0.5)]
    bm25 = [("c", 12.0), ("d", 4.0), ("a", 2.0)]
    fused = dict(convex_fusion([dense, bm25], [1.0, 1.0]))
    # dense: a 1, b 0.75, c 0; bm25: c 1, d 0.2, a 0; each list half the weight
    assert fused == pytest.approx({"a": 0.5, "b": 0.375, "c": 0.5, "d": 0.1})
    assert [x for x, _ in convex_fusion([dense, bm25])][:2] == ["a", "c"]  # ties by id
    assert dict(convex_fusion([dense, bm25], [3.0, 1.0]))["b"] == pytest.approx(0.75 * 0.75)
    assert convex_fusion([dense, bm25], [1.0, 0.0])[0] == ("a", pytest.approx(1.0))
    # an id listed twice keeps its best score; one score normalises to 1; an empty list still weighs
    assert convex_fusion([[("x", 2.0), ("x", 1.0)], []]) == [("x", pytest.approx(0.5))]


def test_the_convex_fusion_method_ranks_by_scores_not_ranks(indexed):
    searcher = Searcher(str(indexed.index))
    question = "Where does the Greywater River rise?"
    q = searcher.encode(question)
    by_rank = [e["chunk_id"] for e in searcher.search(question, "fusion", 8)["evidence"]]
    base = searcher.config
    searcher.config = base.model_copy(update={"query": base.query.model_copy(update={"fusion_method": "convex"})})
    by_score = [e["chunk_id"] for e in searcher.search(question, "fusion", 8)["evidence"]]
    expected = convex_fusion([searcher.nearest("chunk", q, 50), searcher.lexical_search("chunk", question, 50)])
    assert by_score == [c for c, _ in expected][:8]
    assert by_score != by_rank  # the two methods order this question's chunks differently


def test_fusion_finds_what_bm25_finds_and_what_vectors_find(indexed):
    searcher = Searcher(str(indexed.index))
    question = "Where does the Greywater River rise?"
    fused = [e["chunk_id"] for e in searcher.search(question, "fusion", 5)["evidence"]]
    dense = [c for c, _ in searcher.nearest("chunk", searcher.encode(question), 5)]
    lexical = [c for c, _ in searcher.lexical_search("chunk", question, 5)]
    assert dense[0] in fused[:2] and lexical[0] in fused[:2]
    assert set(fused) <= set(dense) | set(lexical)


def test_local_scores_at_most_its_bound_of_entity_chunks(indexed):
    searcher = Searcher(str(indexed.index))
    question = "What did Captain Mara Voss and Tobias Reed do in Port Elling?"
    wide = searcher.search(question, "local", 10)
    searcher.config = make_config(query={"local_entity_chunks": 2, "candidate_chunks": 1})
    narrow = searcher.search(question, "local", 10)
    assert len(narrow["evidence"]) <= 3 < len(wide["evidence"])  # 1 nearest + at most 2 entity chunks


def test_first_sentence_of_a_hostile_reply():
    assert first_sentence("  Mara Voss carried copper.  Then more.") == "Mara Voss carried copper."
    assert first_sentence("no stop " * 200) == ("no stop " * 200)[:300].strip()
    assert first_sentence("") == "" and first_sentence(None) == ""


@pytest.fixture
def llm(monkeypatch):
    with FakeOpenAI() as fake:
        monkeypatch.setenv("GRAPHWRIGHT_LLM__MODEL", "fake-model")
        monkeypatch.setenv("GRAPHWRIGHT_LLM__BASE_URL", fake.base_url)
        monkeypatch.setenv("GRAPHWRIGHT_LLM__API_KEY_ENV", "")
        monkeypatch.setenv("GRAPHWRIGHT_LLM__MAX_ATTEMPTS", "1")
        yield fake


@pytest.mark.parametrize("mode", ["graph", "local"])
def test_iterative_retrieval_queries_with_each_reasoning_sentence(indexed_copy, llm, mode):
    llm.reasoning = ["The letter says the copper is ready on Kestrel Island.", "Hollis Wren wrote a reply about the festival.",
                     "So the answer is: Captain Mara Voss."]
    question = "Who will carry the copper to Port Elling?"
    index = str(indexed_copy.index)
    plain = query(index, question, mode=mode, top_k=5, answer=False)
    result = query(index, question, mode=mode, top_k=5, answer=False, steps=3)
    steps = result["ircot"]["steps"]
    assert [s["thought"] for s in steps] == ["The letter says the copper is ready on Kestrel Island.",
                                             "Hollis Wren wrote a reply about the festival.", "So the answer is: Captain Mara Voss."]
    assert "retrieved" in steps[0] and "retrieved" not in steps[-1]  # "the answer is" ends it: no retrieval
    assert result["ircot"]["calls"] == 3 and result["ircot"]["prompt_tokens"] > 0 and result["ircot"]["cache_hits"] == 0
    second = Searcher(index).search(steps[1]["thought"], mode, 5)["evidence"]
    assert second[0]["chunk_id"] in {e["chunk_id"] for e in result["evidence"]}  # a later step's best chunk is evidence
    assert len(result["evidence"]) == 5 and [e["score"] for e in result["evidence"]] == sorted((e["score"] for e in result["evidence"]), reverse=True)
    assert result["evidence"] != plain["evidence"]
    prompts = [r for r in llm.requests if "one step at a time" in r["messages"][0]["content"]]
    assert "Reasoning so far: The letter says" in prompts[1]["messages"][1]["content"]
    # the same question again is answered from the cache: no request, the same steps, costed as cache hits
    before = len(llm.requests)
    again = query(index, question, mode=mode, top_k=5, answer=False, steps=3)
    assert len(llm.requests) == before and again["ircot"]["cache_hits"] == 3 and again["evidence"] == result["evidence"]


def test_iterative_retrieval_stops_at_the_step_limit_and_checks_its_arguments(indexed_copy, llm, monkeypatch):
    llm.reasoning = ["Kestrel Island sends copper.", "Tobias Reed counts crates.", "Mara Voss sails.", "Never asked."]
    index = str(indexed_copy.index)
    result = query(index, "Who counts the crates?", mode="graph", top_k=3, answer=False, steps=2)
    assert len(result["ircot"]["steps"]) == 2 and llm.reasoning == ["Mara Voss sails.", "Never asked."]
    with pytest.raises(ValueError, match="between 1 and 3"):
        query(index, "Who counts the crates?", mode="graph", answer=False, steps=4)
    with pytest.raises(ValueError, match="for the graph and local modes"):
        query(index, "Who counts the crates?", mode="naive", answer=False, steps=1)
    monkeypatch.delenv("GRAPHWRIGHT_LLM__MODEL")
    with pytest.raises(ValueError, match="needs an LLM"):
        query(index, "Who counts the crates?", mode="graph", answer=False, steps=1)


def test_iterative_retrieval_keeps_the_first_ranking_when_the_llm_fails(indexed_copy, llm):
    llm.fault("Who fails", "always:503")
    index = str(indexed_copy.index)
    plain = query(index, "Who fails at Port Elling?", mode="local", top_k=4, answer=False)
    result = query(index, "Who fails at Port Elling?", mode="local", top_k=4, answer=False, steps=3)
    assert result["ircot"]["steps"] == [] and "error" in result["ircot"]
    assert [e["chunk_id"] for e in result["evidence"]] == [e["chunk_id"] for e in plain["evidence"]]


def test_top_keys_without_a_full_sort_equal_a_full_sort():
    from graphwright.query.local import _top

    rng = np.random.default_rng(1)
    for _ in range(300):
        n = int(rng.integers(1, 60))
        key, ids = rng.integers(0, 5, n), np.sort(rng.choice(1000, n, replace=False))
        limit = int(rng.integers(1, 70))
        assert list(_top(key, ids, limit)) == list(np.lexsort((ids, -key))[:limit])

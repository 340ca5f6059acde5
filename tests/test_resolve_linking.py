"""Entity linking in resolve: variants merge with evidence, chaining and ambiguous names do not,
and a merge follows its evidence (a deleted document undoes it)."""

import random

import numpy as np
import pytest
from _helpers import assertions_table, mentions_table

from graphwright import ids
from graphwright.config import ResolveConfig
from graphwright.engines.vectors.neighbours import neighbours, ngram_vectors
from graphwright.stages.resolve.adjudicate import adjudicate, parse_verdict
from graphwright.stages.resolve.candidates import pairs_above
from graphwright.stages.resolve.core import resolve
from graphwright.stages.resolve.scoring import (
    CodeSet,
    contained,
    name_score,
    overlap,
    spelling_score,
)
from graphwright.text.names import resolution_key

LINKED = ResolveConfig()


# 'Ebenezer Scrooge' and 'Scrooge' share chunks and neighbours in d1; d2 adds a second Scrooge.
D1 = [("Ebenezer Scrooge", "PERSON", "Ebenezer Scrooge kept the books.", 1, "c1", "d1"),
      ("Scrooge", "PERSON", "Scrooge was cold.", 3, "c1", "d1"),
      ("Scrooge", "PERSON", "Scrooge counted.", 2, "c2", "d1"),
      ("Ebenezer Scrooge", "PERSON", "Ebenezer Scrooge signed.", 1, "c2", "d1"),
      ("Marley", "PERSON", "Marley was dead.", 2, "c1", "d1"),
      ("Marley", "PERSON", "Marley's ghost.", 1, "c2", "d1"),
      ("London", "GEO", "London was foggy.", 1, "c1", "d1"),
      ("London", "GEO", "London streets.", 1, "c2", "d1"),
      ("Mrs. Cratchit", "PERSON", "Mrs. Cratchit cooked.", 1, "c2", "d1"),
      ("Cratchit", "PERSON", "Cratchit copied letters.", 2, "c2", "d1"),
      ("Masterton", "PERSON", "Masterton rode in.", 3, "c1", "d1"),
      ("Masetrton", "PERSON", "Masetrton rode out.", 1, "c1", "d1"),
      ("Masterton", "PERSON", "Masterton left.", 1, "c2", "d1")]
A1 = [(x, y, f"{x} and {y}.", 1.0, c, "d1") for c in ("c1", "c2")
      for x, y in [("Ebenezer Scrooge", "Marley"), ("Scrooge", "Marley"), ("Scrooge", "London"), ("Ebenezer Scrooge", "London"),
                   ("Masterton", "London"), ("Masetrton", "London"), ("Masterton", "Marley"), ("Masetrton", "Marley")]]
D2 = [("Fred Scrooge", "PERSON", "Fred Scrooge, the nephew, laughed.", 2, "c3", "d2"),
      ("Scrooge", "PERSON", "Scrooge scowled at Fred Scrooge.", 1, "c3", "d2"),
      ("Marley", "PERSON", "Marley again.", 1, "c3", "d2"),
      ("London", "GEO", "London at Christmas.", 1, "c3", "d2")]
A2 = [("Fred Scrooge", "Scrooge", "Fred Scrooge and Scrooge.", 1.0, "c3", "d2"), ("Fred Scrooge", "London", "", 1.0, "c3", "d2"),
      ("Fred Scrooge", "Marley", "", 1.0, "c3", "d2"), ("Scrooge", "Marley", "", 1.0, "c3", "d2")]


def entity_of(result) -> dict[str, str]:
    return dict(zip(result[1].column("alias").to_pylist(), result[1].column("entity_id").to_pylist()))


def test_name_rules():
    assert contained(("scrooge",), ("ebenezer", "scrooge"))
    assert contained(("j", "smith"), ("john", "smith"))
    assert not contained(("espn",), ("espn", "radio"))  # extends to the right: another thing
    assert not contained(("stamford", "bridge"), ("battle", "of", "stamford", "bridge"))
    assert not contained(("bilson",), ("mrs", "bilson"))
    assert spelling_score("south africa", "south america") == 0.0  # a different word, not a typo
    assert spelling_score("masterton", "masetrton") > 0.9  # one transposition in a long name
    assert spelling_score("armenian", "armenia") < spelling_score("armenain", "armenian")
    assert name_score("scrooge", "ebenezer scrooge") == (0.9, True)
    assert resolution_key("Mrs. Cratchit's") == "mrs cratchit" and resolution_key("Mr. Cratchit") == "cratchit"


def test_links_variants_with_evidence():
    result = resolve(mentions_table(D1), assertions_table(A1), LINKED)
    ent = entity_of(result)
    assert ent["Scrooge"] == ent["Ebenezer Scrooge"] == ids.entity_id("scrooge")  # the most mentioned key names it
    assert ent["Masetrton"] == ent["Masterton"]
    assert ent["Mrs. Cratchit"] != ent["Cratchit"]
    assert len({ent["Scrooge"], ent["Marley"], ent["London"], ent["Masterton"]}) == 4
    aliases = {r["alias"]: r for r in result[1].to_pylist()}
    assert aliases["Ebenezer Scrooge"]["method"] == "linked"
    assert "merged into 'scrooge'" in aliases["Ebenezer Scrooge"]["evidence"] and "contained" in aliases["Ebenezer Scrooge"]["evidence"]
    assert aliases["Scrooge"]["method"] == "normalized_name"
    scrooge = next(e for e in result[0].to_pylist() if e["entity_id"] == ent["Scrooge"])
    assert scrooge["mention_count"] == 7 and scrooge["name"] == "Scrooge"
    # relationships between two names of one entity are dropped; the others are merged
    rels = result[2].to_pylist()
    assert all(r["source_id"] != r["target_id"] for r in rels)
    assert sum(1 for r in rels if {r["source_id"], r["target_id"]} == {ent["Scrooge"], ent["Marley"]}) == 1


def test_exact_names_only_when_configured():
    ent = entity_of(resolve(mentions_table(D1), assertions_table(A1), ResolveConfig(method="normalized_name")))
    assert ent["Scrooge"] != ent["Ebenezer Scrooge"] and ent["Mrs. Cratchit"] == ent["Cratchit"]


def test_ambiguous_short_name_is_not_chained_and_merge_follows_evidence():
    both = entity_of(resolve(mentions_table(D1 + D2), assertions_table(A1 + A2), LINKED))
    # 'Scrooge' could be either: no merge, and the two full names are never chained together
    assert both["Fred Scrooge"] != both["Ebenezer Scrooge"]
    assert both["Scrooge"] != both["Ebenezer Scrooge"] and both["Scrooge"] != both["Fred Scrooge"]
    # deleting d2 removes the ambiguity: the merge comes back, exactly as from scratch
    after = resolve(mentions_table(D1), assertions_table(A1), LINKED)
    assert entity_of(after)["Scrooge"] == entity_of(after)["Ebenezer Scrooge"]


def test_merge_undone_when_its_evidence_is_deleted():
    # the variant and its evidence live in d9 only; without d9 nothing of it remains
    extra_m = [("Ebeneezer Scrooge", "PERSON", "Ebeneezer Scrooge again.", 1, "c9", "d9"),
               ("Marley", "PERSON", "Marley.", 1, "c9", "d9"), ("London", "GEO", "London.", 1, "c9", "d9")]
    extra_a = [("Ebeneezer Scrooge", "Marley", "", 1.0, "c9", "d9"), ("Ebeneezer Scrooge", "London", "", 1.0, "c9", "d9")]
    with_doc = resolve(mentions_table(D1 + extra_m), assertions_table(A1 + extra_a), LINKED)
    assert entity_of(with_doc)["Ebeneezer Scrooge"] == entity_of(with_doc)["Scrooge"]
    without = resolve(mentions_table(D1), assertions_table(A1), LINKED)
    assert "Ebeneezer Scrooge" not in entity_of(without)
    assert without[0].equals(resolve(mentions_table(D1), assertions_table(A1), LINKED)[0])
    scrooge = next(e for e in with_doc[0].to_pylist() if e["canonical_key"] == "scrooge")
    assert "d9" in scrooge["doc_ids"]
    scrooge = next(e for e in without[0].to_pylist() if e["canonical_key"] == "scrooge")
    assert scrooge["doc_ids"] == ["d1"]


def test_linking_ignores_input_order():
    first = resolve(mentions_table(D1 + D2), assertions_table(A1 + A2), LINKED)
    rows_m, rows_a = list(D1 + D2), list(A1 + A2)
    random.Random(5).shuffle(rows_m)
    random.Random(6).shuffle(rows_a)
    again = resolve(mentions_table(rows_m), assertions_table(rows_a), LINKED)
    for x, y in zip(first, again):
        assert x.equals(y)


def test_type_conflict_blocks_merge():
    rows = [("Jordan", "GEO", "Jordan is a country.", 3, "c1", "d1"), ("Michael Jordan", "PERSON", "Michael Jordan played.", 2, "c1", "d1"),
            ("Amman", "GEO", "Amman.", 1, "c1", "d1")]
    a = [("Jordan", "Amman", "", 1.0, "c1", "d1"), ("Michael Jordan", "Amman", "", 1.0, "c1", "d1"),
         ("Jordan", "Amman", "", 1.0, "c1", "d1")]
    ent = entity_of(resolve(mentions_table(rows), assertions_table(a), LINKED))
    assert ent["Jordan"] != ent["Michael Jordan"]


def test_borderline_pairs_go_to_the_adjudicator():
    asked = []

    def judge(pairs):
        asked.extend((e.a, e.b) for e, _, _ in pairs)
        return {(e.a, e.b): True for e, _, _ in pairs}

    # a very high threshold makes the Scrooge pair borderline
    strict = ResolveConfig(accept_threshold=0.99, borderline_threshold=0.5)
    no_llm = entity_of(resolve(mentions_table(D1), assertions_table(A1), strict, adjudicate=judge))
    assert not asked and no_llm["Scrooge"] != no_llm["Ebenezer Scrooge"]  # adjudicate is off
    with_llm = resolve(mentions_table(D1), assertions_table(A1), ResolveConfig(accept_threshold=0.99, borderline_threshold=0.5, adjudicate=True),
                       adjudicate=judge)
    assert ("ebenezer scrooge", "scrooge") in asked
    assert entity_of(with_llm)["Scrooge"] == entity_of(with_llm)["Ebenezer Scrooge"]
    assert {r["alias"]: r["method"] for r in with_llm[1].to_pylist()}["Ebenezer Scrooge"] == "llm"


def test_adjudicate_asks_through_the_cache(tmp_path):
    from graphwright.config import LLMConfig
    from graphwright.engines.llm.interface import LLMResponse
    from graphwright.stages.resolve.scoring import KeyProfile, PairScorer
    from graphwright.storage.delta import IndexStore

    class Engine:
        def complete(self, requests):
            return [LLMResponse(text='{"same": true}' if "Ebenezer" in r.messages[1][1] else '{"same": false}',
                                prompt_tokens=40, completion_tokens=4) for r in requests]

    profiles = {k: KeyProfile(k, 1, {"PERSON": 1}, {"c1"}, set(), f"{k.title()}: a person") for k in ("scrooge", "ebenezer scrooge", "marley")}
    scorer = PairScorer(profiles)
    pairs = [(scorer("scrooge", "ebenezer scrooge"), profiles["ebenezer scrooge"], profiles["scrooge"]),
             (scorer("scrooge", "marley"), profiles["marley"], profiles["scrooge"])]
    verdicts, calls = adjudicate(IndexStore(tmp_path / "idx"), pairs, LLMConfig(model="fake"), Engine)
    assert verdicts == {("ebenezer scrooge", "scrooge"): True, ("marley", "scrooge"): False}
    assert [c["cache_hit"] for c in calls] == [False, False] and calls[0]["prompt_tokens"] == 40
    assert parse_verdict("not json") is False


def test_ngram_vectors_hash_each_distinct_gram_once_and_equal_hashing_every_gram(monkeypatch):
    import zlib

    from graphwright.engines.vectors import neighbours as nb

    def reference(texts, dim, n):  # every gram of every text hashed in turn
        out = np.zeros((len(texts), dim), dtype=np.float32)
        for i, text in enumerate(texts):
            padded = f"#{text}#"
            for j in range(max(1, len(padded) - n + 1)):
                out[i, crc32(padded[j:j + n].encode()) % dim] += 1
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)

    rng = random.Random(3)
    alphabet = "ab c#éß漢字😀\U0010ffff\x00"
    texts = ["", "a", "ab", "#", "##", *("".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12))) for _ in range(2000))]
    hashed, crc32 = [], zlib.crc32
    monkeypatch.setattr(nb.zlib, "crc32", lambda data: hashed.append(data) or crc32(data))
    for n in (1, 2, 3):
        for dim in (16, 128):
            hashed.clear()
            assert np.array_equal(nb.ngram_vectors(texts, dim, n), reference(texts, dim, n)), (n, dim)
            assert len(hashed) == len(set(hashed))
    with pytest.raises(ValueError, match="1 to 3"):
        nb.ngram_vectors(texts, 16, 4)


def test_faiss_neighbours_exclude_self_and_are_deterministic():
    keys = ["scrooge", "scroge", "marley", "marly", "london", "londen", "cratchit"]
    vecs = ngram_vectors(keys, 64)
    _, idx = neighbours(vecs, 2)
    assert idx.shape == (7, 2) and all(idx[i, 0] != i for i in range(7))
    assert keys[idx[0, 0]] == "scroge" and keys[idx[2, 0]] == "marly"
    # the IVF path (large inputs) gives the same answer twice
    rng = np.random.default_rng(0)
    big = rng.standard_normal((3000, 16)).astype(np.float32)
    big /= np.linalg.norm(big, axis=1, keepdims=True)
    a = neighbours(big, 5, exact_up_to=100)
    b = neighbours(big, 5, exact_up_to=100)
    assert np.array_equal(a[1], b[1]) and (a[1] != np.arange(3000)[:, None]).all()


def test_the_ngram_ivf_finds_most_of_the_exact_searchs_pairs():
    # hashed-row centroids, 128 lists, 24 probed: 91% of the exact pairs here; the k-means IVF
    # (sqrt(n) lists, 8 probed) found 89%
    rng = random.Random(7)
    syllables = ["ka", "lo", "mi", "ren", "dor", "vel", "sa", "tu", "bri", "gan", "hol", "mer", "ost", "pa", "qui", "zen"]
    keys = sorted({" ".join("".join(rng.choice(syllables) for _ in range(rng.randint(2, 3))) for _ in range(rng.randint(1, 2)))
                   for _ in range(5000)})
    vecs = ngram_vectors(keys, 128)
    exact = pairs_above(*neighbours(vecs, 10, exact_up_to=10**9), 0.3)
    approximate = pairs_above(*neighbours(vecs, 10, exact_up_to=100), 0.3)
    assert len(keys) > 3000 and len(np.intersect1d(approximate, exact)) / len(exact) > 0.86


def test_keys_an_update_leaves_alone_keep_their_ngram_neighbours():
    # the IVF's lists do not depend on the other keys: removing and adding a few keys changes the
    # pairs of those keys and of the keys near them, not a share of all pairs (here 0.3-2.4% of
    # the pairs over three seeds; a k-means IVF trained on rows picked by position changed 27-30%,
    # which linking then scored)
    rng = random.Random(11)
    syllables = ["ka", "lo", "mi", "ren", "dor", "vel", "sa", "tu", "bri", "gan", "hol", "mer", "ost", "pa", "qui", "zen"]
    keys = sorted({" ".join("".join(rng.choice(syllables) for _ in range(rng.randint(2, 3))) for _ in range(rng.randint(1, 2)))
                   for _ in range(6000)})
    gone = set(rng.sample(keys, 10))
    added = {k + "n" for k in rng.sample(keys, 6)} - set(keys)
    after = sorted((set(keys) - gone) | added)

    def named(ks):
        codes = pairs_above(*neighbours(ngram_vectors(ks, 128), 10, exact_up_to=100), 0.3)
        return {(ks[c // len(ks)], ks[c % len(ks)]) for c in codes.tolist()}

    before_pairs, after_pairs = named(keys), named(after)
    changed = {p for p in before_pairs ^ after_pairs if not ({*p} & (gone | added))}
    assert len(keys) > 3000 and len(changed) < 0.05 * len(before_pairs), (len(changed), len(before_pairs))


def test_candidates_stored_by_other_generators_are_generated_again(monkeypatch):
    from graphwright.stages.resolve import pair_cache

    keys = ["marley", "marly", "scrooge"]
    stored = pair_cache.candidates_table({"tokens": np.empty(0, np.int64), "ngrams": np.array([0 * 3 + 1, 1 * 3 + 2])}, keys)
    assert stored.column("i").to_pylist() == [0, 1] and stored.column("j").to_pylist() == [1, 2]
    back = pair_cache.candidates_from(stored, keys)
    assert {g: c.tolist() for g, c in back.items()} == {"tokens": [], "ngrams": [1, 5]}
    assert pair_cache.candidates_from(stored, keys[:2]) == {}
    monkeypatch.setattr(pair_cache, "CANDIDATES_FORMAT", pair_cache.CANDIDATES_FORMAT + 1)
    assert pair_cache.candidates_from(stored, keys) == {}


def test_stored_candidates_are_split_by_generator_in_arrow_not_as_python_strings(monkeypatch):
    """Each generator's stored pairs are picked by Arrow: no generator name becomes a numpy
    object to be sorted or compared (at 1.2M chunks, 0.26 s of every update's resolve)."""
    from graphwright.stages.resolve import pair_cache

    rng = np.random.default_rng(3)
    keys = [f"key {i:05d}" for i in range(400)]
    made = {g: np.unique(rng.integers(0, 400 * 400, n)) for g, n in (("ngrams", 3000), ("tokens", 200), ("embedding", 0))}
    stored = pair_cache.candidates_table(made, keys)

    def objects(*args, **kwargs):
        raise AssertionError("np.unique over the generator names")

    monkeypatch.setattr(np, "unique", objects)
    back = pair_cache.candidates_from(stored, keys)
    assert list(back) == ["embedding", "ngrams", "tokens"]
    assert {g: c.tolist() for g, c in back.items()} == {g: c.tolist() for g, c in made.items()}


@pytest.mark.gpu
def test_cuvs_neighbours_match_faiss():
    pytest.importorskip("cuvs")
    rng = np.random.default_rng(1)
    vecs = rng.standard_normal((5000, 32)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    cpu = neighbours(vecs, 5, "faiss")
    gpu = neighbours(vecs, 5, "cuvs")  # brute force below exact_up_to: the same neighbours
    assert (cpu[1][:, 0] == gpu[1][:, 0]).mean() > 0.99
    approx = neighbours(vecs, 5, "cuvs", exact_up_to=100)  # CAGRA
    assert (approx[1] != np.arange(5000)[:, None]).all()
    assert (approx[1][:, 0] == cpu[1][:, 0]).mean() > 0.9


@pytest.mark.slow  # three index runs: ~12 s on 2 shared cores
def test_pipeline_update_undoes_and_redoes_merges_like_a_fresh_build(tmp_path):
    from graphwright.config import load_config
    from graphwright.pipeline.runner import run_index
    from graphwright.storage.delta import IndexStore

    config = load_config(overrides={"execution": {"executor": "local"}, "embed": {"engine": "hashing", "dim": 16},
                                    "ingest": {"max_delete_fraction": 1.0}})
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("Ebenezer Scrooge met Jacob Marley in London. Scrooge paid Jacob Marley in London. "
                               "Later Scrooge and Jacob Marley walked through London. Ebenezer Scrooge and Jacob Marley argued in London.")
    (src / "b.txt").write_text("Fred Scrooge visited London with Jacob Marley. Scrooge and Fred Scrooge ate in London with Jacob Marley.")

    def aliases(index):
        t = IndexStore(index).read("entity_aliases")
        return dict(zip(t.column("alias").to_pylist(), t.column("entity_id").to_pylist()))

    quiet = lambda msg: None
    run_index([str(src)], tmp_path / "idx", config, show_progress=False, log=quiet)
    before = aliases(tmp_path / "idx")
    assert before["Scrooge"] != before["Ebenezer Scrooge"]  # ambiguous while Fred Scrooge is there
    (src / "b.txt").unlink()
    run_index([str(src)], tmp_path / "idx", config, show_progress=False, log=quiet)
    after = aliases(tmp_path / "idx")
    assert after["Scrooge"] == after["Ebenezer Scrooge"] and "Fred Scrooge" not in after
    run_index([str(src)], tmp_path / "fresh", config, show_progress=False, log=quiet)
    assert IndexStore(tmp_path / "idx").read("entity_aliases").sort_by("alias").equals(
        IndexStore(tmp_path / "fresh").read("entity_aliases").sort_by("alias"))


def test_code_sets_overlap_like_python_sets():
    rng = np.random.default_rng(5)
    for _ in range(50):
        x, y = (np.unique(rng.integers(0, 30, rng.integers(0, 12))).astype(np.int32) for _ in range(2))
        assert overlap(CodeSet(x), CodeSet(y)) == overlap(set(x.tolist()), set(y.tolist()))
        assert all((int(v) in CodeSet(x)) == (int(v) in set(x.tolist())) for v in range(30))


def test_an_embedder_that_returns_the_wrong_number_of_vectors_is_an_error_not_wrong_pairs():
    from graphwright.stages.resolve.linking import link_keys
    from graphwright.stages.resolve.scoring import KeyProfile

    profiles = {k: KeyProfile(k) for k in ("marley", "marly", "scrooge")}
    with pytest.raises(ValueError, match="2 vectors for 3 name keys"):
        link_keys(profiles, ResolveConfig(embeddings=True), embed=lambda texts: np.eye(2, 8, dtype=np.float32))


def test_pairs_their_names_keep_low_are_not_measured_and_link_as_if_they_were(monkeypatch):
    """PairScorer.bounded skips the context overlaps of candidate pairs whose name score keeps
    them under the borderline whatever their context (most n-gram candidates): the labels and
    accepted pairs equal those of scoring every pair whole, and each skipped pair's score is an
    upper bound of its whole score."""
    import graphwright.stages.resolve.scoring as scoring
    from graphwright.stages.resolve.linking import link_keys
    from graphwright.stages.resolve.scoring import KeyProfile, PairScorer

    rng = random.Random(11)
    syllables = ["ka", "lo", "mi", "ren", "dor", "vel", "sa", "tu", "bri", "gan"]
    names = {"".join(rng.choice(syllables) for _ in range(3)) for _ in range(120)}
    names |= {n[:2] + n[3] + n[2] + n[4:] for n in list(names)[:40]}  # swapped letters: spelling variants
    names |= {f"{rng.choice(sorted(names))} {n}" for n in list(names)[:30]}  # person-style containment

    def profiles() -> dict:
        rng_ = random.Random(3)
        out = {}
        for code, k in enumerate(sorted(names)):
            out[k] = KeyProfile(k, mentions=rng_.randint(1, 5), types={"PERSON": 1}, code=code,
                                chunks=set(rng_.sample(range(40), 4)), neighbours=set(rng_.sample(range(len(names)), 3)))
        return out

    calls = []
    real = scoring.overlap
    monkeypatch.setattr(scoring, "overlap", lambda *a, **k: calls.append(1) or real(*a, **k))
    bounded: dict = {}
    label, accepted, _ = link_keys(profiles(), LINKED, bounded=bounded)
    skipping = len(calls)
    calls.clear()
    monkeypatch.setattr(PairScorer, "bounded", lambda self, a, b, below: self(a, b))
    whole_label, whole_accepted, _ = link_keys(profiles(), LINKED)
    assert label == whole_label and set(accepted) == set(whole_accepted)
    assert len(bounded) > 100 and skipping < len(calls) - len(bounded)  # two overlaps a pair not measured
    scorer = PairScorer(profiles())
    for (a, b), e in bounded.items():
        assert e.neighbours is None and e.score < LINKED.borderline_threshold
        assert scorer(a, b).score <= e.score and "at most" in e.describe()

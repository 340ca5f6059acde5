"""Resolve's n-gram candidates kept between runs: an update whose key set changed searches again
only the keys its change can reach, and gets the hits a search of every key gets."""

import random

import numpy as np
import pytest

from graphwright.config import load_config
from graphwright.engines.vectors.count_neighbours import CountSpace, count_neighbours
from graphwright.engines.vectors.neighbours import ivf_centroids, ngram_counts, row_hashes
from graphwright.stages.resolve import ngram_hits as hits_module
from graphwright.stages.resolve.ngram_hits import NgramHits, ngram_hits

SYLLABLES = ["ka", "lo", "mi", "ren", "dor", "vel", "sa", "tu", "bri", "gan", "hol", "mer", "ost", "pa", "qui", "zen"]


def _keys(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    return sorted({" ".join("".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 3))) for _ in range(rng.randint(1, 2)))
                   for _ in range(n)})


def _named(h: NgramHits, keys: list[str]) -> set:
    return {(keys[r], keys[j], s) for r, j, s in zip(h.row.tolist(), h.hit.tolist(), h.score.tolist())}


def _edited(keys: list[str], rng: random.Random, removed: int, added: int) -> list[str]:
    gone = set(rng.sample(keys, removed))
    new = {k + rng.choice("xyz") for k in rng.sample(keys, added)} - set(keys)
    return sorted((set(keys) - gone) | new)


def _centroid_keys(keys: list[str]) -> set[str]:
    return {keys[i] for i in ivf_centroids(CountSpace(ngram_counts(keys, 128)).vectors, 500).tolist()}


@pytest.fixture
def ivf(monkeypatch):
    """The IVF from 500 keys on (20,000 in a run), so that a few thousand keys use it."""
    monkeypatch.setattr(hits_module, "EXACT_UP_TO", 500)


def test_a_keys_neighbours_are_the_same_searched_alone_or_with_every_key():
    keys = _keys(3, 4000)
    space = CountSpace(ngram_counts(keys, 128))
    for centroids in (None, ivf_centroids(space.vectors, 500)):
        scores, idx = count_neighbours(space, 10, centroids)
        for rows in (np.array([5]), np.arange(0, len(keys), 37), np.arange(7, 40)):  # SIMD and BLAS batches in faiss
            alone = count_neighbours(space, 10, centroids, rows)
            assert np.array_equal(alone[1], idx[rows]) and np.array_equal(alone[0], scores[rows])
        # best first, ties by row
        valid = idx >= 0
        assert valid[:, 0].all() and (idx != np.arange(len(keys))[:, None]).all()
        same = (scores[:, 1:] == scores[:, :-1]) & valid[:, 1:]
        assert (np.diff(scores, axis=1)[valid[:, 1:]] <= 0).all() and (idx[:, 1:] > idx[:, :-1])[same].all()


def test_rows_tied_past_what_faiss_returned_are_taken_by_row():
    # rows 1-20 and 21-40 all score 0.5 with row 0; 21-40 sit in the list row 0 probes first, so
    # faiss's heap fills with them and turns away the lower rows that tie with them
    counts = np.zeros((43, 8), np.float32)
    counts[0, [0, 1]] = 1
    counts[1:21, 1], counts[1:21, 3] = 1, 1  # list of centroid row 42 (gram 3)
    counts[21:41, 0], counts[21:41, 2] = 1, 1  # list of centroid row 41 (gram 2), probed first on the tie
    counts[41, 2], counts[42, 3] = 1, 1
    space = CountSpace(counts)
    scores, idx = count_neighbours(space, 3, np.array([41, 42]), np.array([0]))
    assert idx.tolist() == [[1, 2, 3]] and len(set(scores[0].tolist())) == 1
    assert count_neighbours(space, 3, None, np.array([0]))[1].tolist() == [[1, 2, 3]]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_an_update_searches_only_the_keys_its_change_can_reach_and_gets_every_keys_search(ivf, seed):
    config = load_config(None, {}).resolve
    keys = _keys(seed, 5000)
    rng = random.Random(seed)
    before = ngram_hits(keys, config)
    assert before.searched == len(keys)
    centroid_keys = _centroid_keys(keys)
    for _ in range(50):  # an edit that leaves the IVF's centroids as they were (the next test changes them)
        after = _edited(keys, rng, 10, 6)
        if _centroid_keys(after) == centroid_keys:
            break
    else:
        pytest.fail("no edit left the centroids as they were")
    updated = ngram_hits(after, config, before, keys)
    fresh = ngram_hits(after, config)
    assert _named(updated, after) == _named(fresh, after)
    assert np.array_equal(updated.pairs(len(after)), fresh.pairs(len(after)))
    assert updated.searched < 0.1 * len(after), updated.searched  # every key: 5,000 here, 41k at 145k chunks


def test_an_update_that_changes_the_ivfs_centroids_searches_what_they_move_and_equals_every_keys_search(ivf):
    config = load_config(None, {}).resolve
    keys = _keys(5, 5000)
    before = ngram_hits(keys, config)
    centroids = ivf_centroids(CountSpace(ngram_counts(keys, 128)).vectors, 500)
    gone = {keys[i] for i in centroids[:1].tolist()}  # a list loses its centroid: its rows move
    # and a key comes that is a centroid among the keys after: rows move to its list
    variants = [k + " " + s for k in keys[:400] for s in ("ka", "zen")]
    comers = sorted(set(variants) - set(keys), key=lambda k: int(row_hashes(CountSpace(ngram_counts([k], 128)).vectors)[0]))[:1]
    after = sorted((set(keys) - gone) | set(comers))
    assert set(comers) <= _centroid_keys(after)
    updated, fresh = ngram_hits(after, config, before, keys), ngram_hits(after, config)
    assert _named(updated, after) == _named(fresh, after)
    assert len(after) * 0.01 < updated.searched < len(after), updated.searched


def test_hits_of_other_settings_or_other_keys_are_searched_again(ivf):
    config = load_config(None, {}).resolve
    keys = _keys(6, 3000)
    before = ngram_hits(keys, config)
    after = keys[:-1]
    assert ngram_hits(after, config, before, keys).searched < len(after)
    assert ngram_hits(after, config.model_copy(update={"min_ngram_cosine": 0.4}), before, keys).searched == len(after)
    assert ngram_hits(after, config, before, keys[1:]).searched == len(after)  # hits of another key set
    back = NgramHits.from_table(before.table())
    assert _named(back, keys) == _named(before, keys) and back.settings == before.settings
    assert NgramHits.from_table(None) is None
    assert NgramHits.from_table(before.table().drop_columns(["score"])) is None
    # a state whose rows are not rows of its keys is searched again, not trusted
    broken = NgramHits(before.row, before.hit + len(keys), before.score, before.keys, before.settings, 0)
    assert ngram_hits(after, config, broken, keys).searched == len(after)
    for row, hit in ((before.row, before.row), (np.zeros_like(before.row), before.hit)):  # its own hit; more than k
        assert ngram_hits(after, config, NgramHits(row, hit, before.score, before.keys, before.settings, 0), keys).searched == len(after)


def test_flat_search_updates_and_chains_of_updates_equal_every_keys_search():
    """Below 20,000 keys every key is searched exactly (no lists); an update's hits, and those
    of an update of an update, are every key's search's."""
    config = load_config(None, {}).resolve
    rng = random.Random(8)
    keys = _keys(8, 3000)
    hits = ngram_hits(keys, config)
    for step in range(3):
        after = _edited(keys, rng, 8, 8)
        hits = ngram_hits(after, config, hits, keys)
        assert _named(hits, after) == _named(ngram_hits(after, config), after), step
        assert hits.searched < 0.2 * len(after), (step, hits.searched)
        keys = after


def test_a_change_that_reaches_most_keys_searches_every_key(ivf, monkeypatch):
    config = load_config(None, {}).resolve
    keys = _keys(9, 3000)
    before = ngram_hits(keys, config)
    after = _edited(keys, random.Random(9), 5, 5)
    monkeypatch.setattr(hits_module, "SEARCH_SHARE", 0.0)
    assert ngram_hits(after, config, before, keys).searched == len(after)
    monkeypatch.setattr(hits_module, "SEARCH_SHARE", 0.5)
    monkeypatch.setattr(hits_module, "REFRESH_SHARE", 0.001)
    assert ngram_hits(after, config, before, keys).searched == len(after)

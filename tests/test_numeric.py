import numpy as np
import pyarrow as pa
import pytest

from graphwright.util.numeric import distinct_lists, sorted_codes, sorted_dictionary, spans, unique


def test_sorted_codes_index_the_sorted_distinct_values():
    column = pa.chunked_array([pa.array(["pear", "apple", "pear"]), pa.array(["fig", "apple", "zucchini"])])
    codes, distinct = sorted_codes(column)
    assert distinct.to_pylist() == ["apple", "fig", "pear", "zucchini"]
    assert codes.tolist() == [2, 0, 2, 1, 0, 3]
    assert distinct.take(pa.array(codes)).to_pylist() == column.to_pylist()


def test_sorted_codes_of_random_ids_sort_as_the_ids_do():
    rng = np.random.default_rng(0)
    ids = [f"id-{v}" for v in rng.integers(0, 5000, 20_000)]
    codes, distinct = sorted_codes(pa.array(ids))
    assert distinct.to_pylist() == sorted(set(ids))
    order = np.argsort(codes, kind="stable")
    assert [ids[i] for i in order] == sorted(ids)


def test_sorted_codes_of_nothing():
    codes, distinct = sorted_codes(pa.array([], pa.string()))
    assert len(codes) == 0 and len(distinct) == 0


@pytest.mark.parametrize("n", [0, 1, 20_000])
def test_sorted_dictionary_codes_as_sorted_codes_does(n):
    rng = np.random.default_rng(1)
    ids = pa.array([f"chunk-{v}" for v in rng.integers(0, 3000, n)], pa.string())
    codes, distinct = sorted_dictionary(ids)
    want_codes, want_distinct = sorted_codes(ids)
    assert distinct.equals(want_distinct) and codes.dtype == np.int32 and codes.tolist() == want_codes.tolist()


def test_sorted_dictionary_codes_a_null_as_a_value_sorted_last():
    codes, distinct = sorted_dictionary(pa.array(["b", None, "a", "b"], pa.string()))
    assert distinct.to_pylist() == ["a", "b", None] and codes.tolist() == [1, 2, 0, 1]


def test_unique_and_distinct_lists():
    assert unique(np.array([3, 1, 3, 2, 1])).tolist() == [1, 2, 3]
    values = pa.array(["a", "b", "c"])
    lists = distinct_lists(np.array([1, 0, 1, -1, 1]), np.array([2, 0, 2, 1, 0]), values, 3)
    assert lists.to_pylist() == [["a"], ["a", "c"], []]


@pytest.mark.parametrize("values", [np.zeros(0, np.int64), np.array([5, -3, 5, 0, -3, 9], np.int64),
                                    np.random.default_rng(3).integers(-1 << 40, 1 << 40, 50_000).repeat(3)])
def test_unique_inverse_is_numpys(values):
    from graphwright.util.numeric import unique_inverse

    expected, inverse = np.unique(values, return_inverse=True)
    got, got_inverse = unique_inverse(values)
    assert np.array_equal(got, expected) and np.array_equal(got_inverse, inverse.reshape(-1))
    assert np.array_equal(got[got_inverse], values)


def test_distinct_codes_are_the_sorted_distinct_values_found_without_a_sort(monkeypatch):
    """Codes into a dictionary lie in [0, size): their distinct values come from a mask (resolve
    asks for those of 20M chunk codes and 9.6M name codes each run, 0.9 s and 0.4 s sorted)."""
    from graphwright.util.numeric import distinct_codes, unique

    rng = np.random.default_rng(7)
    cases = [(rng.integers(0, size, n).astype(np.int32), size) for n, size in ((0, 0), (0, 5), (1, 1), (1_000, 50), (5_000, 100_000))]
    expected = [unique(codes) for codes, _ in cases]

    def refused(*args, **kwargs):
        raise AssertionError("sorted")

    monkeypatch.setattr(np, "sort", refused)
    for (codes, size), want in zip(cases, expected):
        np.testing.assert_array_equal(distinct_codes(codes, size), want)


def test_first_index_finds_each_keys_first_occurrence_through_a_hash_table(monkeypatch):
    from graphwright.util.numeric import first_index

    rng = np.random.default_rng(1)
    distinct = np.unique(rng.integers(0, 1 << 60, 5_000))
    keys = np.r_[distinct[rng.integers(0, len(distinct), 20_000)], rng.integers(1 << 61, 1 << 62, 100)]
    at = np.minimum(np.searchsorted(distinct, keys), len(distinct) - 1)
    expected = np.where(distinct[at] == keys, at, -1)

    def refused(*args, **kwargs):
        raise AssertionError("searchsorted")

    monkeypatch.setattr(np, "searchsorted", refused)
    assert np.array_equal(first_index(distinct, keys), expected)
    values = np.array([5, 3, 5, 7, 3, 9], dtype=np.int64)
    assert first_index(values, np.array([3, 5, 9, 4, 5])).tolist() == [1, 0, 5, -1, 0]
    assert first_index(values, np.empty(0, np.int64)).tolist() == []
    assert first_index(np.empty(0, np.int64), np.array([1, 2])).tolist() == [-1, -1]


def test_grouped_order_is_a_stable_argsort_made_by_counting_or_sorting_values(monkeypatch):
    from graphwright.util.numeric import grouped_order

    rng = np.random.default_rng(2)
    cases = [np.empty(0, np.int64), np.array([0]), np.array([2, 0, 2, 1, 0], np.int32), rng.integers(0, 300, 50_000),
             rng.integers(0, 3, 10_000).astype(np.int16), rng.integers(0, 1 << 40, 5_000)]  # the last: too many groups to count
    expected = [np.argsort(group, kind="stable") for group in cases]

    def refused(*args, **kwargs):
        raise AssertionError("argsort")

    monkeypatch.setattr(np, "argsort", refused)
    for group, want in zip(cases[1:], expected[1:]):
        assert np.array_equal(grouped_order(group), want)
    monkeypatch.undo()
    assert grouped_order(cases[0]).tolist() == [] and np.array_equal(grouped_order(np.array([1, -1, 0])), [1, 2, 0])


def test_spans_are_each_start_counted_up_its_length_one_after_the_other():
    starts, lengths = np.array([5, 0, 9, 2]), np.array([3, 0, 1, 2])
    assert spans(starts, lengths).tolist() == [s + i for s, n in zip(starts, lengths) for i in range(n)] == [5, 6, 7, 9, 2, 3]
    assert spans(np.zeros(0, np.int64), np.zeros(0, np.int64)).tolist() == []


def test_chunk_counts_per_level_come_from_items_put_in_order_of_chunk_once(monkeypatch):
    """A community's n_chunks is the distinct chunks of its members. The lineage items are put in
    order of chunk once, by a counting pass (np.argsort of 7.5M items took 0.8 s of an update at
    1.2M chunks); each level then sorts keys that are in order but for short runs, where sorting
    the unordered keys of every level took 0.55-0.97 s a level at 1.2M chunks."""
    from graphwright.stages.cluster.communities import ChunkLists
    from graphwright.util.numeric import distinct_counts_by_code

    rng = np.random.default_rng(5)
    n_entities, n_chunks = 300, 2_000
    pairs = np.unique(rng.integers(0, n_entities, 20_000) * n_chunks + rng.integers(0, n_chunks, 20_000))
    sorts = []
    argsort = np.argsort
    monkeypatch.setattr(np, "argsort", lambda *a, **k: sorts.append(1) or argsort(*a, **k))
    lists = ChunkLists((pairs // n_chunks).astype(np.int32), (pairs % n_chunks).astype(np.int32),
                       pa.array([f"c{i}" for i in range(n_chunks)]))
    for n_groups in (1, 7, 60, 300):
        label = rng.integers(-1, n_groups, n_entities)  # -1: an entity in no counted community
        expected = [len({c for o, c in zip(lists.owner.tolist(), lists.codes.tolist()) if label[o] == g}) for g in range(n_groups)]
        assert lists.counts(label, n_groups).tolist() == expected
    assert not sorts
    assert np.all(np.diff(lists.codes) >= 0) and lists.owner.tolist() == (pairs // n_chunks)[np.argsort(pairs % n_chunks, kind="stable")].tolist()
    assert distinct_counts_by_code(np.array([0, 1, 0]), np.array([4, 4, 4]), 2).tolist() == [1, 1]
    assert distinct_counts_by_code(np.array([-1]), np.array([0]), 3).tolist() == [0, 0, 0]
    assert distinct_counts_by_code(np.empty(0, np.int64), np.empty(0, np.int64), 0).tolist() == []


def test_transposed_groups_pairs_by_column_in_row_order_as_a_stable_sort_does():
    from graphwright.util.numeric import transposed

    rng = np.random.default_rng(5)
    for n_rows, n_cols, n in ((1, 1, 0), (3, 4, 1), (50, 20, 400), (2_000, 30_000, 60_000)):
        key = np.unique(rng.integers(0, n_rows * n_cols, n))
        rows, cols = key // n_cols, key % n_cols  # in order of row, then column
        counts, grouped = transposed(rows, cols, n_rows, n_cols)
        assert counts.tolist() == np.bincount(cols, minlength=n_cols).tolist()
        assert grouped.tolist() == rows[np.argsort(cols, kind="stable")].tolist()


def test_grouped_distinct_lists_each_groups_distinct_codes_in_order_without_sorting_the_pairs(monkeypatch):
    """The distinct (group, code) pairs of resolve's chunk lists, profiles and neighbours come from
    two counting passes, not from a sort of every pair (np.sort is made to fail below)."""
    from graphwright.stages.resolve.profiles import key_chunks, key_neighbours
    from graphwright.storage import lineage
    from graphwright.util.numeric import grouped_distinct

    rng = np.random.default_rng(11)
    cases = [(0, 3, 5), (1, 1, 1), (40, 4, 9), (5_000, 60, 700), (20_000, 7, 30_000)]
    inputs = [(rng.integers(0, k, n), rng.integers(0, w, n), k, w) for n, k, w in cases]
    inputs.append((np.array([2, 0, 2, 2, 0]), np.array([1, 3, 1, 0, 3]), 4, 5))  # group 1 and 3 hold nothing
    expected = []
    for group, codes, k, w in inputs:
        pairs = np.unique(group.astype(np.int64) * w + codes)
        expected.append((np.searchsorted(pairs // w, np.arange(k + 1)).tolist(), (pairs % w).tolist()))
    src, tgt, keep = rng.integers(0, 50, 3_000), rng.integers(0, 50, 3_000), rng.random(3_000) < 0.6
    once = np.unique(np.minimum(src, tgt)[keep] * 50 + np.maximum(src, tgt)[keep])
    linked = np.unique(np.r_[once, (once % 50) * 50 + once // 50])
    values = pa.array([f"c{i:05d}" for i in range(700)])

    def no_sort(*_, **__):
        raise AssertionError("pairs sorted")

    monkeypatch.setattr(np, "sort", no_sort)
    for (group, codes, k, w), (indptr, distinct) in zip(inputs, expected):
        got_indptr, got = grouped_distinct(group, codes, k, w)
        assert got_indptr.tolist() == indptr and got.tolist() == distinct
        assert lineage.entity_lists(np.arange(k), group, codes, w)[1].tolist() == distinct
        assert key_chunks(k, group, codes)[0].tolist() == distinct
    group, codes, k, w = inputs[3]
    lists = distinct_lists(group, codes, values, k).to_pylist()
    assert lists == [values.take(pa.array(expected[3][1][a:b])).to_pylist() for a, b in zip(expected[3][0], expected[3][0][1:])]
    neighbours, bounds = key_neighbours(50, src, tgt, keep, 700)  # five slices of assertions
    assert neighbours.tolist() == (linked % 50).tolist() and bounds.tolist() == np.searchsorted(linked // 50, np.arange(51)).tolist()


def test_counted_and_pair_orders_are_stable_argsorts_and_pair_inverse_is_unique_inverse(monkeypatch):
    """Orders made by counting passes (scipy's sparse transpose) equal a stable argsort of the
    keys, pairs included (a * n_b + b), and pair_inverse equals unique_inverse of the codes,
    without numpy's argsort or Arrow's hash of every code; keys out of range are refused, as
    scipy would write past its arrays."""
    import pyarrow.compute as pc

    from graphwright.util.numeric import counted_order, pair_inverse, pair_order, unique_inverse

    rng = np.random.default_rng(13)
    cases = [(0, 4, 3), (1, 1, 1), (60, 3, 7), (20_000, 500, 40), (30_000, 7, 9_000)]
    inputs = [(rng.integers(0, n_a, n).astype(np.int32), rng.integers(0, n_b, n), n_a, n_b) for n, n_a, n_b in cases]
    wanted = [(np.argsort(a, kind="stable"), np.argsort(a.astype(np.int64) * n_b + b, kind="stable"),
               unique_inverse(a.astype(np.int64) * n_b + b)) for a, b, n_a, n_b in inputs]

    def refused(*args, **kwargs):
        raise AssertionError("sorted or hashed")

    monkeypatch.setattr(np, "argsort", refused)
    monkeypatch.setattr(pc, "dictionary_encode", refused)
    for (a, b, n_a, n_b), (by_a, by_pair, (distinct, inverse)) in zip(inputs, wanted):
        assert counted_order(a, n_a).tolist() == by_a.tolist()
        assert pair_order(a, b, n_a, n_b).tolist() == by_pair.tolist()
        got_distinct, got_inverse = pair_inverse(a, b, n_a, n_b)
        assert got_distinct.tolist() == distinct.tolist() and got_inverse.tolist() == inverse.tolist()
    monkeypatch.undo()
    for keys in (np.array([0, 3]), np.array([-1, 0])):
        with pytest.raises(ValueError, match="outside"):
            counted_order(keys, 3)


def test_sorted_index_finds_each_key_among_sorted_values_or_gives_minus_one():
    from graphwright.util.numeric import sorted_index

    values = np.array([2, 5, 9, 14], np.int64)
    assert sorted_index(values, np.array([9, 2, 3, 14, 15, -1])).tolist() == [2, 0, -1, 3, -1, -1]
    assert sorted_index(values, np.array([], np.int64)).tolist() == []
    assert sorted_index(np.array([], np.int64), np.array([4, 5])).tolist() == [-1, -1]
    ids = np.array([b"a1", b"b2", b"c3"], "S2")  # fixed-width ids, as the passage graph keeps them
    found = sorted_index(ids, np.array([b"c3", b"b1", b"a1"], "S2"))
    assert found.dtype == np.int64 and found.tolist() == [2, -1, 0]
